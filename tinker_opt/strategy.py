"""Strategy: one point of the parallel-strategy space, with its JSON schema.

The JSON keys are fixed by ARCHITECTURE.md ("File formats and machine-readable interfaces"):
`tp, pp, dp, cp, cp_algo, ep, etp, sp, vpp, dist_opt, mbs, recompute, recompute_method,
recompute_num_layers, num_layer_list, zero`, then the overlap switches (OVERLAP_KEYS, declared in
the knob registry, knobs.py). `zero` is the one ZeRO field; `dist_opt` is its derived key.
`vpp` counts virtual chunks per pipeline rank (1 = plain 1F1B); `num_layer_list` is None for an
even split; knobs that do not apply are None (an overlap knob left None where it applies means
"keep the script's setting" to the writer).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tinker_opt.choices import (
    CpAlgo,
    Recompute,
    RecomputeMethod,
    Schedule,
    StrEnum,
    assert_never,
    choice,
)
from tinker_opt.errors import StrategyError

RECOMPUTE_KINDS = tuple(kind.value for kind in Recompute)
RECOMPUTE_METHODS = tuple(method.value for method in RecomputeMethod)
STRATEGY_KEYS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "cp_algo",
    "ep",
    "etp",
    "sp",
    "vpp",
    "dist_opt",
    "mbs",
    "recompute",
    "recompute_method",
    "recompute_num_layers",
    "num_layer_list",
    "dualpipev",
    "moe_fb_overlap",
    "zero",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "overlap_moe_comm",
    "tp_comm_overlap",
    "overlap_param_gather_with_optimizer_step",
    "delay_wgrad_compute",
)
OVERLAP_KEYS = STRATEGY_KEYS[STRATEGY_KEYS.index("overlap_grad_reduce") :]
"""Communication-overlap switches, the last keys (declared in the knob registry, knobs.py)."""
ZERO_LEVELS = (0, 1, 2, 3)
"""ZeRO stages (Rajbhandari et al. 2020): 0 none, 1 optimizer states sharded (Megatron's distributed
optimizer), 2 + gradients, 3 + parameters (FSDP)."""


def zero_from_dist_opt(dist_opt: object, zero: object = None) -> int:
    """The ZeRO stage of an older strategy file (or flag pair) that spells `dist_opt`: true means
    at least 1 (exactly 1 without `zero`), false means 0; a `zero` that contradicts it is an error
    naming both values."""
    on = bool(dist_opt)
    if zero is None:
        return int(on)
    if isinstance(zero, bool) or zero not in ZERO_LEVELS:
        raise StrategyError(f"zero must be one of {ZERO_LEVELS}, got {zero!r}")
    if on != (zero >= 1):
        raise StrategyError(
            f"dist_opt {str(on).lower()} contradicts zero {zero} (the distributed optimizer is "
            "zero >= 1); give one of them or make them agree"
        )
    return int(zero)


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """One parallel configuration, as Megatron / MindSpeed-LLM flags can express it."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    cp_algo: CpAlgo | None = None
    """Context-parallel algorithm (`--context-parallel-algo`), None when cp == 1."""
    ep: int = 1
    etp: int | None = None
    """Expert tensor-parallel size; None means Megatron's default (= tp) or a dense model."""
    sp: bool = False
    vpp: int = 1
    mbs: int = 1
    recompute: Recompute = Recompute.NONE
    recompute_method: RecomputeMethod | None = None
    """`block` or `uniform` with full recompute, else None."""
    recompute_num_layers: int | None = None
    """Megatron's `--recompute-num-layers` (one number for all stages), with full recompute."""
    num_layer_list: tuple[int, ...] | None = None
    """Layers per pipeline stage (`--num-layer-list`), None for an even split. With a virtual
    pipeline (vpp > 1) either pp per-rank totals, each split evenly over the rank's vpp chunks
    (Megatron's `--decoder-first/last-pipeline-num-layers` with virtual stages), or pp * vpp
    per-virtual-stage counts in Megatron's layout order (index chunk * pp + rank, the stages of
    `--pipeline-model-parallel-layout`; a stage may hold 0 decoder layers)."""
    dualpipev: bool = False
    """MindSpeed's DualPipeV schedule (`--schedules-method dualpipev`; vpp 1: its two chunks per
    rank are the schedule's own, costs/coefficients.py)."""
    moe_fb_overlap: bool = False
    """MindSpeed `--moe-fb-overlap`: one micro-batch's forward hides another's backward all-to-all."""
    zero: int = 0
    """ZeRO stage over the data-parallel (x context-parallel) group (ZERO_LEVELS); the one field of
    the optimizer sharding: the distributed optimizer is the read-only `dist_opt` (zero >= 1)."""
    overlap_grad_reduce: bool | None = None
    """`--overlap-grad-reduce`: DP gradient reduce in buckets during the backward."""
    overlap_param_gather: bool | None = None
    """`--overlap-param-gather`: parameter all-gather under the next forward; dist_opt only."""
    overlap_moe_comm: bool | None = None
    """MoE all-to-all overlap (`--moe-alltoall-overlap-comm` / `--overlap-moe-expert-parallel-comm`); MoE only."""
    tp_comm_overlap: bool | None = None
    """TP communication fused with the matmuls (`--use-ascend-mc2` / `--tp-comm-overlap`); tp > 1 only."""
    overlap_param_gather_with_optimizer_step: bool | None = None
    """`--overlap-param-gather-with-optimizer-step`: the first parameter all-gather under the
    optimizer step; dist_opt only (read and written back, not priced)."""
    delay_wgrad_compute: bool | None = None
    """`--delay-wgrad-compute`: expert weight gradients delayed behind the all-to-all; MoE only,
    with the MoE all-to-all overlap (read and written back, not priced)."""

    def __post_init__(self) -> None:
        if self.zero not in ZERO_LEVELS or isinstance(self.zero, bool):
            raise StrategyError(f"zero must be one of {ZERO_LEVELS}, got {self.zero!r}")
        for name in ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise StrategyError(f"strategy {name} must be a positive integer, got {value!r}")
        if self.dualpipev and self.vpp != 1:
            raise StrategyError(
                f"dualpipev runs two chunks per rank of its own; vpp must be 1, got {self.vpp}"
            )
        object.__setattr__(
            self, "recompute", choice(Recompute, self.recompute, "recompute", StrategyError)
        )
        for name, kind in (("recompute_method", RecomputeMethod), ("cp_algo", CpAlgo)):
            if getattr(self, name) is not None:
                object.__setattr__(
                    self, name, choice(kind, getattr(self, name), name, StrategyError)
                )
        for name in OVERLAP_KEYS:
            if getattr(self, name) not in (None, True, False):
                raise StrategyError(
                    f"strategy {name} must be true, false or null, got {getattr(self, name)!r}"
                )
        if self.num_layer_list is not None:
            self._check_layer_list()

    def _check_layer_list(self) -> None:
        """One count per pipeline stage, or per virtual stage; the latter collapsed to per-rank
        totals when each rank's chunks are equal (one split, one spelling)."""
        layers = self.num_layer_list
        assert layers is not None
        if len(layers) not in (self.pp, self.pp * self.vpp):
            per_virtual = f" or pp*vpp ({self.pp * self.vpp})" if self.vpp > 1 else ""
            raise StrategyError(
                f"num_layer_list has {len(layers)} entries but pp is {self.pp}{per_virtual}; "
                "give one layer count per pipeline stage"
            )
        if self.vpp > 1 and len(layers) == self.pp * self.vpp:
            chunks = [layers[s :: self.pp] for s in range(self.pp)]
            if all(len(set(rank)) == 1 for rank in chunks):
                totals = tuple(sum(rank) for rank in chunks)
                object.__setattr__(self, "num_layer_list", totals)

    @property
    def per_virtual_stage(self) -> bool:
        """The layer list gives one count per virtual stage (pp * vpp entries, vpp > 1)."""
        layers = self.num_layer_list
        return layers is not None and self.vpp > 1 and len(layers) == self.pp * self.vpp

    @property
    def dist_opt(self) -> bool:
        """Megatron's distributed optimizer (`--use-distributed-optimizer`): ZeRO stage >= 1."""
        return self.zero >= 1

    @property
    def schedule(self) -> Schedule:
        """The pipeline schedule: DualPipeV when chosen, interleaved 1F1B with virtual chunks
        (vpp > 1), else 1F1B."""
        if self.dualpipev:
            return Schedule.DUALPIPEV
        return Schedule.INTERLEAVED if self.vpp > 1 else Schedule.ONE_F_ONE_B

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def expert_tp(self) -> int:
        """The effective expert tensor-parallel size (Megatron defaults it to tp)."""
        return self.tp if self.etp is None else self.etp

    def stage_layers(self, num_layers: int) -> tuple[int, ...]:
        """Layers of each pipeline stage: `num_layer_list`, or the even split."""
        if self.per_virtual_stage and self.num_layer_list is not None:
            return tuple(sum(self.num_layer_list[s :: self.pp]) for s in range(self.pp))
        if self.num_layer_list is not None:
            return tuple(self.num_layer_list)
        if num_layers % self.pp:
            raise StrategyError(
                f"num_layers ({num_layers}) is not divisible by pp ({self.pp}); "
                "give a num_layer_list or choose a pp that divides it"
            )
        return (num_layers // self.pp,) * self.pp

    def chunk_layers(self, num_layers: int) -> tuple[int, ...]:
        """Layers of each virtual stage in Megatron's order (chunk j of rank s at j * pp + s):
        the per-virtual-stage list, else each rank's layers split evenly over its vpp chunks."""
        if self.per_virtual_stage and self.num_layer_list is not None:
            return tuple(self.num_layer_list)
        stages = self.stage_layers(num_layers)
        if any(n % self.vpp for n in stages):
            raise StrategyError(
                f"with vpp {self.vpp} every stage's layer count must be a multiple of it "
                f"(Megatron splits a rank's layers evenly over its chunks); stages are {list(stages)}"
            )
        return tuple(stages[s] // self.vpp for _ in range(self.vpp) for s in range(self.pp))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ARCHITECTURE.md, keys in schema order; `dist_opt` is written as the
        derived key (zero >= 1) that the frozen Strategy schema and older readers expect."""
        out = {key: getattr(self, key) for key in STRATEGY_KEYS}
        for key, value in out.items():
            if isinstance(value, StrEnum):
                out[key] = value.value  # plain strings in JSON and in dict comparisons
        if out["num_layer_list"] is not None:
            out["num_layer_list"] = list(out["num_layer_list"])
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Strategy:
        """Build from the JSON object; also accepts an Evaluation or a summary.json (uses `best`)."""
        if "best" in data and isinstance(data["best"], dict):
            data = data["best"]
        if "strategy" in data and isinstance(data["strategy"], dict):
            data = data["strategy"]
        unknown = sorted(set(data) - set(STRATEGY_KEYS))
        if unknown:
            raise StrategyError(
                f"unknown strategy key(s) {unknown}; expected some of {list(STRATEGY_KEYS)}"
            )
        values = {key: data[key] for key in STRATEGY_KEYS if key in data and data[key] is not None}
        for flag in ("sp", "dualpipev", "moe_fb_overlap", *OVERLAP_KEYS):
            if flag in values:
                values[flag] = bool(values[flag])
        if "num_layer_list" in values:
            values["num_layer_list"] = tuple(int(n) for n in values["num_layer_list"])
        if "dist_opt" in values:
            values["zero"] = zero_from_dist_opt(values.pop("dist_opt"), values.get("zero"))
        return cls(**values)

    def replace(self, **changes: Any) -> Strategy:
        """This strategy with `changes`, checked like a new one (`__post_init__`). As
        `dataclasses.replace`, without building every field's keyword argument: the search
        space lists tens of thousands of strategies this way (issue 30)."""
        unknown = changes.keys() - _FIELD_NAMES
        if unknown:
            raise TypeError(f"Strategy has no field {sorted(unknown)[0]!r}")
        new = object.__new__(Strategy)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        new.__post_init__()
        return new

    def label(self) -> str:
        """A short human-readable name, e.g. `tp2-pp4-dp2-sp-do-mbs2-rc_full4`."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.etp is not None and self.etp != self.tp:
            parts.append(f"etp{self.etp}")
        if self.vpp > 1:
            parts.append(f"vpp{self.vpp}")
        if self.dualpipev:
            parts.append("dualpipev")
        if self.moe_fb_overlap:
            parts.append("fbo")
        if self.sp:
            parts.append("sp")
        if self.zero >= 2:
            parts.append(f"z{self.zero}")
        elif self.dist_opt:
            parts.append("do")
        parts.append(f"mbs{self.mbs}")
        match self.recompute:
            case Recompute.NONE:
                pass
            case Recompute.SELECTIVE:
                parts.append("rc_sel")
            case Recompute.FULL:
                method = "_uni" if self.recompute_method == RecomputeMethod.UNIFORM else ""
                parts.append(f"rc_full{method}{self.recompute_num_layers or ''}")
            case _:
                assert_never(self.recompute)
        if self.num_layer_list is not None:
            parts.append("L" + "_".join(str(n) for n in self.num_layer_list))
        return "-".join(parts)


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Strategy))
"""The fields `Strategy.replace` may change."""
