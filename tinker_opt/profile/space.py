"""The profile space: which (block, shape) rows to measure, in which order.

tp runs over the divisors of max_npu that divide the heads, the query groups and the MLP width,
plus the tp sizes asked for above max_npu (`prof_tp`, the script's own tp in `extra_tp`): tensor
parallelism across nodes (tp 16 on nodes of 8), profiled like any other shape; its collectives are
priced with the inter-node link by the cost model (costs.comm_model.group_scope: a tp group
wider than a node is `inter_node`), and comm.csv holds inter-node rows for every group size;
sp on and off (on only with tp > 1; always on for MoE models with tp > 1, as Megatron requires);
cp over 1 and the values the script (its cp and the powers of two dividing it) or the settings ask
for; ep over the divisors of num_experts
(up to max_ep when set, plus the script's own ep: expert-parallel groups live in the data-parallel
dimension and span nodes, so ep is not bounded by one node's devices), etp over 1, tp and the
values asked for (MoE layers only; the search considers etp in {1, tp}); mbs 1, 2, 4, ... up to
max_mbs (plus the script's own micro-batch size).

Order (Tinker's): shapes that need less memory first (larger tp, sp on, larger cp / ep / etp,
smaller mbs), so that an out-of-memory row lets every later row that needs at least as much
memory be skipped (`OomFrontier`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tinker_opt.errors import ConfigError
from tinker_opt.profile.shape import Shape
from tinker_opt.specs import ModelSpec


@dataclass(frozen=True)
class SpaceLimits:
    """What the settings restrict (None: the default rule). max_npu and max_mbs have no default
    here: they come from the `profile` settings (config.TABLE), the one place defaults live."""

    max_npu: int
    max_mbs: int
    prof_tp: tuple[int, ...] | None = None
    """Tensor-parallel sizes to keep; each divides max_npu (groups tile a node) or is a multiple of
    it (groups span whole nodes), and divides heads, query groups and ffn."""
    extra_tp: tuple[int, ...] = ()
    """Tensor-parallel sizes to add whatever max_npu (the script's own), when the model's rules allow them."""
    prof_sp: tuple[int, ...] | None = None
    prof_cp: tuple[int, ...] | None = None
    prof_ep: tuple[int, ...] | None = None
    """Expert-parallel sizes to keep (None: every divisor of num_experts up to max_ep)."""
    max_ep: int | None = None
    """Largest expert-parallel size (None: num_experts)."""
    extra_ep: tuple[int, ...] = ()
    """Expert-parallel sizes to add whatever the bounds (the script's own), when they divide num_experts."""
    prof_etp: tuple[int, ...] | None = None
    extra_mbs: tuple[int, ...] = ()
    """Micro-batch sizes to add (the script's own), when not above max_mbs."""


@dataclass(frozen=True)
class ProfilePoint:
    """One blocks.csv row to measure."""

    block: str
    shape: Shape

    @property
    def key(self) -> tuple:
        return self.shape.key(self.block)

    @property
    def label(self) -> str:
        s = self.shape
        return f"{self.block} tp{s.tp} sp{int(s.sp)} cp{s.cp} ep{s.ep} etp{s.etp} mbs{s.mbs}"


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def model_allows_tp(model: ModelSpec, tp: int) -> bool:
    """Megatron's divisibility rules for a tensor-parallel size: heads, query groups and the MLP
    width split evenly (Megatron-LM megatron/core/transformer: num_attention_heads and
    num_query_groups must be divisible by the tensor model parallel size; ColumnParallelLinear
    divides its output size by it)."""
    return (
        tp >= 1
        and model.num_attention_heads % tp == 0
        and model.num_query_groups % tp == 0
        and model.ffn_hidden_size % tp == 0
    )


def tiles_nodes(tp: int, max_npu: int) -> bool:
    """Whether tp groups tile the devices: inside a node of max_npu (tp divides it) or over whole
    nodes (a multiple of it), so that every tp group has the same links (costs.comm_model.group_scope)."""
    return max_npu % tp == 0 or tp % max_npu == 0


def tp_values(model: ModelSpec, limits: SpaceLimits) -> list[int]:
    """tp candidates: divisors of max_npu dividing heads, groups and ffn (Megatron's rules), and
    the script's own tp (`extra_tp`) when the model allows it, even above max_npu (across nodes);
    `prof_tp` keeps the values it names, any size that tiles nodes and the model allows."""
    valid = [t for t in divisors(limits.max_npu) if model_allows_tp(model, t)]
    extra = [t for t in limits.extra_tp if model_allows_tp(model, t)]
    if limits.prof_tp is None:
        return sorted(set(valid) | set(extra))
    bad = [
        t
        for t in limits.prof_tp
        if not (model_allows_tp(model, t) and tiles_nodes(t, limits.max_npu))
    ]
    if bad:
        raise ConfigError(
            f"prof_tp {bad} not usable: tp must divide max_npu ({limits.max_npu}) or be a multiple "
            f"of it (tensor parallelism across nodes), and divide heads ({model.num_attention_heads}), "
            f"query groups ({model.num_query_groups}) and ffn ({model.ffn_hidden_size}); valid values "
            f"up to max_npu are {valid}"
        )
    return sorted(set(limits.prof_tp))


def sp_values(model: ModelSpec, tp: int, cp: int, limits: SpaceLimits) -> list[bool]:
    if tp == 1:
        return [False]
    allowed = [bool(v) for v in (limits.prof_sp if limits.prof_sp is not None else (0, 1))]
    if model.is_moe:  # Megatron: MoE with tensor parallelism requires sequence parallelism
        allowed = [v for v in allowed if v]
    if (model.seq_length // cp) % tp:
        allowed = [v for v in allowed if not v]
    return sorted(set(allowed), reverse=True)


def cp_values(model: ModelSpec, limits: SpaceLimits) -> list[int]:
    wanted = sorted({1, *(limits.prof_cp or ())})
    bad = [c for c in wanted if model.seq_length % (2 * c) and c > 1]
    if bad:
        raise ConfigError(
            f"prof_cp {bad}: seq_length ({model.seq_length}) must be divisible by 2 x cp "
            "(load-balanced context parallel); pick cp values that divide seq_length / 2"
        )
    return wanted


def ep_values(model: ModelSpec, limits: SpaceLimits) -> list[int]:
    """ep candidates: divisors of num_experts up to max_ep (kept to prof_ep), plus extra_ep."""
    eps = [e for e in divisors(model.num_experts) if limits.max_ep is None or e <= limits.max_ep]
    if limits.prof_ep is not None:
        eps = [e for e in eps if e in limits.prof_ep]
    eps += [e for e in limits.extra_ep if model.num_experts % e == 0]
    return sorted(set(eps), reverse=True)


def expert_values(model: ModelSpec, tp: int, limits: SpaceLimits) -> list[tuple[int, int]]:
    """(ep, etp) pairs of a MoE layer at tensor-parallel size tp, least memory first."""
    moe_ffn = model.moe_ffn_hidden_size or model.ffn_hidden_size
    etps = {1, tp, *(limits.prof_etp or ())}
    etps = sorted(
        (e for e in etps if moe_ffn % e == 0 and e <= max(limits.max_npu, tp)), reverse=True
    )
    return [(ep, etp) for ep in ep_values(model, limits) for etp in etps]


def mbs_values(limits: SpaceLimits) -> list[int]:
    if limits.max_mbs < 1:
        raise ConfigError(f"max_mbs must be >= 1, got {limits.max_mbs}")
    powers = [2**i for i in range(limits.max_mbs.bit_length()) if 2**i <= limits.max_mbs]
    return sorted(set(powers) | {m for m in limits.extra_mbs if 1 <= m <= limits.max_mbs})


def _block_shapes(
    model: ModelSpec, block: str, tp: int, sp: bool, cp: int, mbs: int, limits: SpaceLimits
) -> list[Shape]:
    if block in ("layer.moe",) or (block == "layer" and model.is_moe):
        return [
            Shape(tp=tp, sp=sp, cp=cp, ep=ep, etp=etp, mbs=mbs)
            for ep, etp in expert_values(model, tp, limits)
        ]
    return [Shape(tp=tp, sp=sp, cp=cp, mbs=mbs)]


def profile_space(model: ModelSpec, limits: SpaceLimits) -> list[ProfilePoint]:
    """Every row to measure, least memory first."""
    blocks = ("embedding", *model.layer_block_names(), "final_norm", "head")
    points = []
    for tp in sorted(tp_values(model, limits), reverse=True):
        for cp in sorted(cp_values(model, limits), reverse=True):
            for sp in sp_values(model, tp, cp, limits):
                for mbs in mbs_values(limits):
                    for block in blocks:
                        points += [
                            ProfilePoint(block, s)
                            for s in _block_shapes(model, block, tp, sp, cp, mbs, limits)
                        ]
    return points


class OomFrontier:
    """Remembers out-of-memory rows; a row needing at least as much memory as one of them is skipped."""

    def __init__(self, points: Iterable[ProfilePoint] = ()) -> None:
        self._ooms: list[ProfilePoint] = list(points)

    def add(self, point: ProfilePoint) -> None:
        self._ooms.append(point)

    def blocks(self, point: ProfilePoint) -> bool:
        return any(
            o.block == point.block and point.shape.needs_at_least_memory_of(o.shape)
            for o in self._ooms
        )
