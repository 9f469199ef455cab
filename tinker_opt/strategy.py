"""Strategy: one point of the parallel-strategy space, with its JSON schema.

The JSON keys are fixed by ARCHITECTURE.md ("Machine-readable interfaces"):
`tp, pp, dp, cp, cp_algo, ep, etp, sp, vpp, dist_opt, mbs, recompute, recompute_method,
recompute_num_layers, num_layer_list, overlap_grad_reduce, overlap_param_gather, overlap_moe_comm,
tp_comm_overlap`. `vpp` counts virtual chunks per pipeline rank (1 = plain 1F1B); `num_layer_list`
is None for an even split; knobs that do not apply are None (an overlap knob left None where it
applies means "keep the script's setting" to the writer).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tinker_opt.errors import StrategyError

RECOMPUTE_KINDS = ("none", "selective", "full")
RECOMPUTE_METHODS = ("block", "uniform")
SCHEDULES = ("1f1b", "dualpipev")
"""Pipeline schedules: Megatron's 1F1B (interleaved when vpp > 1) and MindSpeed's DualPipeV
(`--schedules-method dualpipev`: two chunks per rank in a V, costs/coefficients.py)."""
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
    "schedule",
    "moe_fb_overlap",
    "zero",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "overlap_moe_comm",
    "tp_comm_overlap",
)
OVERLAP_KEYS = STRATEGY_KEYS[-4:]
"""Communication-overlap switches (script/flags.py names their flags per framework)."""
ZERO_LEVELS = (0, 1, 2, 3)
"""ZeRO stages (Rajbhandari et al. 2020): 0 none, 1 optimizer states sharded (Megatron's distributed
optimizer), 2 + gradients, 3 + parameters (FSDP)."""


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """One parallel configuration, as Megatron / MindSpeed-LLM flags can express it."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    cp_algo: str | None = None
    """Context-parallel algorithm (`--context-parallel-algo`), None when cp == 1."""
    ep: int = 1
    etp: int | None = None
    """Expert tensor-parallel size; None means Megatron's default (= tp) or a dense model."""
    sp: bool = False
    vpp: int = 1
    dist_opt: bool = False
    mbs: int = 1
    recompute: str = "none"
    recompute_method: str | None = None
    """`block` or `uniform` with full recompute, else None."""
    recompute_num_layers: int | None = None
    """Megatron's `--recompute-num-layers` (one number for all stages), with full recompute."""
    num_layer_list: tuple[int, ...] | None = None
    """Layers per pipeline stage (`--num-layer-list`), None for an even split."""
    schedule: str = "1f1b"
    """Pipeline schedule (SCHEDULES): `1f1b`, or `dualpipev` (vpp 1: its two chunks per rank are
    the schedule's own)."""
    moe_fb_overlap: bool = False
    """MindSpeed `--moe-fb-overlap`: one micro-batch's forward hides another's backward all-to-all."""
    zero: int = 0
    """ZeRO stage over the data-parallel (x context-parallel) group, kept consistent with dist_opt:
    zero >= 1 exactly when dist_opt. Levels 0 and 1 follow dist_opt; 2 and 3 turn dist_opt on."""
    overlap_grad_reduce: bool | None = None
    """`--overlap-grad-reduce`: DP gradient reduce in buckets during the backward."""
    overlap_param_gather: bool | None = None
    """`--overlap-param-gather`: parameter all-gather under the next forward; dist_opt only."""
    overlap_moe_comm: bool | None = None
    """MoE all-to-all overlap (`--moe-alltoall-overlap-comm` / `--overlap-moe-expert-parallel-comm`); MoE only."""
    tp_comm_overlap: bool | None = None
    """TP communication fused with the matmuls (`--use-ascend-mc2` / `--tp-comm-overlap`); tp > 1 only."""

    def __post_init__(self) -> None:
        if self.zero not in ZERO_LEVELS or isinstance(self.zero, bool):
            raise StrategyError(f"zero must be one of {ZERO_LEVELS}, got {self.zero!r}")
        if self.zero <= 1:
            object.__setattr__(self, "zero", int(bool(self.dist_opt)))
        else:
            object.__setattr__(self, "dist_opt", True)
        for name in ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise StrategyError(f"strategy {name} must be a positive integer, got {value!r}")
        if self.schedule not in SCHEDULES:
            raise StrategyError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.schedule == "dualpipev" and self.vpp != 1:
            raise StrategyError(
                f"dualpipev runs two chunks per rank of its own; vpp must be 1, got {self.vpp}"
            )
        if self.recompute not in RECOMPUTE_KINDS:
            raise StrategyError(
                f"recompute must be one of {RECOMPUTE_KINDS}, got {self.recompute!r}"
            )
        if self.recompute_method is not None and self.recompute_method not in RECOMPUTE_METHODS:
            raise StrategyError(
                f"recompute_method must be one of {RECOMPUTE_METHODS}, got {self.recompute_method!r}"
            )
        for name in OVERLAP_KEYS:
            if getattr(self, name) not in (None, True, False):
                raise StrategyError(
                    f"strategy {name} must be true, false or null, got {getattr(self, name)!r}"
                )
        if self.num_layer_list is not None and len(self.num_layer_list) != self.pp:
            raise StrategyError(
                f"num_layer_list has {len(self.num_layer_list)} entries but pp is {self.pp}; "
                "give one layer count per pipeline stage"
            )

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def expert_tp(self) -> int:
        """The effective expert tensor-parallel size (Megatron defaults it to tp)."""
        return self.tp if self.etp is None else self.etp

    def stage_layers(self, num_layers: int) -> tuple[int, ...]:
        """Layers of each pipeline stage: `num_layer_list`, or the even split."""
        if self.num_layer_list is not None:
            return tuple(self.num_layer_list)
        if num_layers % self.pp:
            raise StrategyError(
                f"num_layers ({num_layers}) is not divisible by pp ({self.pp}); "
                "give a num_layer_list or choose a pp that divides it"
            )
        return (num_layers // self.pp,) * self.pp

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ARCHITECTURE.md, keys in schema order."""
        out = {key: getattr(self, key) for key in STRATEGY_KEYS}
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
        for flag in ("sp", "dist_opt", "moe_fb_overlap", *OVERLAP_KEYS):
            if flag in values:
                values[flag] = bool(values[flag])
        if "num_layer_list" in values:
            values["num_layer_list"] = tuple(int(n) for n in values["num_layer_list"])
        return cls(**values)

    def replace(self, **changes: Any) -> Strategy:
        return dataclasses.replace(self, **changes)

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
        if self.schedule != "1f1b":
            parts.append(self.schedule)
        if self.moe_fb_overlap:
            parts.append("fbo")
        if self.sp:
            parts.append("sp")
        if self.zero >= 2:
            parts.append(f"z{self.zero}")
        elif self.dist_opt:
            parts.append("do")
        parts.append(f"mbs{self.mbs}")
        if self.recompute == "selective":
            parts.append("rc_sel")
        elif self.recompute == "full":
            method = "_uni" if self.recompute_method == "uniform" else ""
            parts.append(f"rc_full{method}{self.recompute_num_layers or ''}")
        if self.num_layer_list is not None:
            parts.append("L" + "_".join(str(n) for n in self.num_layer_list))
        return "-".join(parts)
