"""Strategy: one point of the parallel-strategy space, with its JSON schema.

The JSON keys are fixed by ARCHITECTURE.md ("File formats and machine-readable interfaces"):
`tp, pp, dp, cp, cp_algo, ep, etp, sp, vpp, mbs, recompute, recompute_method,
recompute_num_layers, num_layer_list, dualpipev, moe_fb_overlap, zero`, then the overlap switches
(OVERLAP_KEYS: the knob registry's switches in its order, knobs.py). The switches that code
outside the registry reads by name (the cost terms and rules of the gradient reduce, the
parameter gather, the MoE all-to-all and TP overlaps) are typed fields; every other switch of the
registry is kept by key in `switches`, read as `getattr(s, key)` and set by `replace(key=...)`,
so a new switch is its record and its cost term, with no field here. `zero` is the one ZeRO field; the
distributed optimizer is the read-only property `dist_opt`, read from older files (LEGACY_KEYS)
and never written.
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
from tinker_opt.knobs import CHOICES, KNOBS
from tinker_opt.layer_stack import num_chunks, rank_chunks, stage_totals

RECOMPUTE_KINDS: tuple[str, ...] = CHOICES["recompute"].choices
RECOMPUTE_METHODS: tuple[str, ...] = CHOICES["recompute_method"].choices
FIELD_SWITCHES = (
    "overlap_grad_reduce",
    "overlap_param_gather",
    "overlap_moe_comm",
    "tp_comm_overlap",
)
"""The registry's switches that are typed Strategy fields (read by name by cost terms and rules)."""
OVERLAP_KEYS = tuple(KNOBS)
"""Communication-overlap switches, the last keys, in the registry's order (knobs.py)."""
_KEPT_SWITCHES = tuple(key for key in OVERLAP_KEYS if key not in FIELD_SWITCHES)
"""The registry's other switches, kept by key in `Strategy.switches`."""
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
    "mbs",
    "recompute",
    "recompute_method",
    "recompute_num_layers",
    "num_layer_list",
    "dualpipev",
    "moe_fb_overlap",
    "zero",
    *OVERLAP_KEYS,
)
LEGACY_KEYS = ("dist_opt",)
"""Keys older files carry and `from_dict` still reads, never written: `dist_opt` is the derived
`Strategy.dist_opt` (zero >= 1), one fact with `zero`."""
ZERO_LEVELS: tuple[int, ...] = CHOICES["zero"].choices
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
    switches: tuple[tuple[str, bool], ...] = ()
    """The registry's other switches (`_KEPT_SWITCHES`) that are set, as (key, value) in the
    registry's order; a key left out is None. Set them through `replace` or `from_dict`."""

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
        # A member already (every strategy the search space lists): nothing to convert.
        if type(self.recompute) is not Recompute:
            object.__setattr__(
                self, "recompute", choice(Recompute, self.recompute, "recompute", StrategyError)
            )
        for name, kind in (("recompute_method", RecomputeMethod), ("cp_algo", CpAlgo)):
            value = getattr(self, name)
            if value is not None and type(value) is not kind:
                object.__setattr__(self, name, choice(kind, value, name, StrategyError))
        for name in FIELD_SWITCHES:
            if getattr(self, name) not in (None, True, False):
                raise StrategyError(
                    f"strategy {name} must be true, false or null, got {getattr(self, name)!r}"
                )
        if self.switches:
            self._check_switches()
        if self.num_layer_list is not None:
            self._check_layer_list()

    def _check_switches(self) -> None:
        """The kept switches: registry keys with true / false, in the registry's order."""
        values = dict(self.switches)
        for name, value in values.items():
            if name not in _KEPT_SWITCHES:
                raise StrategyError(
                    f"unknown strategy switch {name!r}; expected some of {list(_KEPT_SWITCHES)}"
                )
            if value not in (None, True, False):
                raise StrategyError(f"strategy {name} must be true, false or null, got {value!r}")
        kept = tuple((k, values[k]) for k in _KEPT_SWITCHES if values.get(k) is not None)
        object.__setattr__(self, "switches", kept)

    def _check_layer_list(self) -> None:
        """One count per pipeline stage, or per chunk (virtual stage, or DualPipeV's V: the
        computing layers its noop padding leaves, layer_stack.dualpipev_layer_list); the
        virtual form collapsed to per-rank totals when each rank's chunks are equal (one split,
        one spelling)."""
        layers = self.num_layer_list
        assert layers is not None
        chunks = num_chunks(self.pp, self.vpp, self.dualpipev)
        if len(layers) not in (self.pp, chunks):
            per_chunk = f" or its {chunks} chunks" if chunks > self.pp else ""
            raise StrategyError(
                f"num_layer_list has {len(layers)} entries but pp is {self.pp}{per_chunk}; "
                "give one layer count per pipeline stage"
            )
        if self.vpp > 1 and len(layers) == chunks:
            ranks = [layers[s :: self.pp] for s in range(self.pp)]
            if all(len(set(rank)) == 1 for rank in ranks):
                totals = tuple(sum(rank) for rank in ranks)
                object.__setattr__(self, "num_layer_list", totals)

    @property
    def per_virtual_stage(self) -> bool:
        """The layer list gives one count per chunk (pp * vpp entries with vpp > 1, or DualPipeV's
        2 * pp)."""
        layers = self.num_layer_list
        chunks = num_chunks(self.pp, self.vpp, self.dualpipev)
        return layers is not None and chunks > self.pp and len(layers) == chunks

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
        """Layers of each pipeline stage: `num_layer_list` (a per-chunk one summed over each
        rank's chunks, layer_stack.rank_chunks), or the even split."""
        if self.per_virtual_stage and self.num_layer_list is not None:
            return stage_totals(self.num_layer_list, self.pp, self.vpp, self.dualpipev)
        if self.num_layer_list is not None:
            return tuple(self.num_layer_list)
        if num_layers % self.pp:
            raise StrategyError(
                f"num_layers ({num_layers}) is not divisible by pp ({self.pp}); "
                "give a num_layer_list or choose a pp that divides it"
            )
        return (num_layers // self.pp,) * self.pp

    def chunk_layers(self, num_layers: int) -> tuple[int, ...]:
        """Layers of each chunk in layer order (interleaved: chunk j of rank s at j * pp + s;
        DualPipeV: rank s holds s and 2 pp - 1 - s, layer_stack.rank_chunks): the per-chunk
        list, else each rank's layers split evenly over its chunks."""
        if self.per_virtual_stage and self.num_layer_list is not None:
            return tuple(self.num_layer_list)
        stages = self.stage_layers(num_layers)
        per_rank = 2 if self.dualpipev else self.vpp
        if any(n % per_rank for n in stages):
            raise StrategyError(
                f"with {per_rank} chunks per rank every stage's layer count must be a multiple "
                f"of it (the framework splits a rank's layers evenly over its chunks); stages "
                f"are {list(stages)}"
            )
        out = [0] * num_chunks(self.pp, self.vpp, self.dualpipev)
        for s, total in enumerate(stages):
            for k in rank_chunks(self.pp, self.vpp, self.dualpipev, s):
                out[k] = total // per_rank
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ARCHITECTURE.md, keys in schema order, one field per fact: `zero`
        and no `dist_opt` (the property, zero >= 1)."""
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
        unknown = sorted(set(data) - set(STRATEGY_KEYS) - set(LEGACY_KEYS))
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
        if data.get("dist_opt") is not None:
            values["zero"] = zero_from_dist_opt(data["dist_opt"], values.get("zero"))
        kept = tuple((key, values.pop(key)) for key in _KEPT_SWITCHES if key in values)
        return cls(**values, switches=kept)

    def replace(self, **changes: Any) -> Strategy:
        """This strategy with `changes`, checked like a new one (`__post_init__`). As
        `dataclasses.replace`, without building every field's keyword argument: the search
        space lists tens of thousands of strategies this way (issue 30)."""
        unknown = changes.keys() - _FIELD_NAMES
        if unknown:
            kept = {key: changes.pop(key) for key in unknown & set(_KEPT_SWITCHES)}
            if len(kept) < len(unknown):
                raise TypeError(f"Strategy has no field {sorted(unknown - set(kept))[0]!r}")
            changes["switches"] = tuple({**dict(self.switches), **kept}.items())
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


def _kept_switch(key: str) -> property:
    """`getattr(s, key)` of a kept switch: its value in `switches`, None when left out. A class
    property rather than `__getattr__`, which Python calls only after the instance and class
    lookups fail: the cost terms and rules read these keys for every configuration a search
    lists (issue 30)."""

    def value(self: Strategy) -> bool | None:
        for name, setting in self.switches:
            if name == key:
                return setting
        return None

    return property(value, doc=f"The kept switch {key!r} (None when not set).")


for _key in _KEPT_SWITCHES:
    # the type checker sees only the fields; kept switches are read by getattr(s, key)
    setattr(Strategy, _key, _kept_switch(_key))
