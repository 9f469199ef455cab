"""The flag changes that put a (normalised) strategy into a script, as source edits.

One method per knob says which flags it owns: the value to set, the switch to add or remove, and
the companions that only make sense with it (context-parallel options with cp > 1, overlap of the
parameter all-gather with the distributed optimizer, the recompute method with full recompute).
New flags go next to the group that already holds their kind (parallel sizes, MoE, recompute).
Every knob's flags, values and companions come from its record (knobs.py): LAYOUT, CHOICES, KNOBS.
"""

from __future__ import annotations

import re

from tinker_opt.choices import CpAlgo, Recompute, RecomputeMethod, Schedule, assert_never
from tinker_opt.emit import script_edit
from tinker_opt.emit.script_edit import Edit
from tinker_opt.errors import StrategyError
from tinker_opt.expressible import overlap_flag, uses_layout_string
from tinker_opt.knobs import CHOICES, KNOBS, LAYOUT, LAYOUT_KNOBS
from tinker_opt.rules import hybrid_ulysses_degree
from tinker_opt.script import versions
from tinker_opt.script.launch import ArgOccurrence
from tinker_opt.script.model_args import int_value
from tinker_opt.script.pipeline_layout import EMBEDDING_FLAG, LAYOUT_FLAG, LOSS_FLAG, layout_text
from tinker_opt.script.reader import ScriptInfo
from tinker_opt.script.recompute_args import PER_RANK_FLAG, rank_count
from tinker_opt.script.strategy_args import (
    DEFAULT_CP_ALGO,
    SHARDING_FLAG,
    SHARDING_STRATEGIES,
    VPP_LAYERS_FLAG,
    VPP_SIZE_FLAGS,
    ZERO_STAGE_FLAG,
    zero_backend,
)
from tinker_opt.script.swap_recompute import is_swap_policy, swap_policy_count
from tinker_opt.script.train_args import ULYSSES_DEGREE_FLAG
from tinker_opt.strategy import Strategy

_CP_ALGO, _ZERO, _VPP = CHOICES["cp_algo"], CHOICES["zero"], CHOICES["vpp"]
_RECOMPUTE, _SCHEDULE, _FB = CHOICES["recompute"], CHOICES["dualpipev"], CHOICES["moe_fb_overlap"]
_METHOD, _COUNT = CHOICES["recompute_method"], CHOICES["recompute_num_layers"]
_SPLIT = CHOICES["num_layer_list"]
RECOMPUTE_FULL_ONLY = (*_METHOD.flags, *_COUNT.flags, *_METHOD.companions, *_COUNT.companions)
RECOMPUTE_OWNED = (*_RECOMPUTE.flags, *CHOICES["recompute_modules"].flags, *RECOMPUTE_FULL_ONLY)
"""What the strategy's recompute knobs own; MindSpeed's extra memory features
(`--recompute-activation-function`, `--recompute-norm`, `--swap-attention`, ...) stay as written."""
DIST_OPT_COMPANIONS = (
    *KNOBS["overlap_param_gather"].flags,
    *KNOBS["overlap_param_gather"].companions,
)
"""The flags that need the distributed optimizer (knobs.py: the parameter all-gather overlap)."""
_ANCHORS = {
    # The layout knobs' flags by their writer group (knobs.LAYOUT_KNOBS), then the model's.
    "parallel": (*(k.flag for k in LAYOUT_KNOBS if k.group == "parallel"), "--num-layers"),
    "moe": (*(k.flag for k in LAYOUT_KNOBS if k.group == "moe"), "--num-experts"),
    "recompute": _RECOMPUTE.flags,
}


class _Plan:
    def __init__(self, text: str, info: ScriptInfo, vr: versions.VersionRange) -> None:
        self.text, self.info, self.vr = text, info, vr
        self.launch = info.launch
        self.edits: list[Edit] = []
        self.removed: set[int] = set()
        self.additions: dict[str, list[str]] = {}

    def value(
        self, flag: str, value: object, *, default: object = None, group: str = "parallel"
    ) -> None:
        found = self.launch.occurrences(flag)
        for occurrence in found:
            edit = script_edit.value_edit(self.text, occurrence, str(value), self.info.expansion)
            if edit is not None:
                self.edits.append(edit)
        if not found and (default is None or str(value) != str(default)):
            self._add(group, f"{flag} {value}")

    def switch(self, flag: str, on: bool, group: str = "parallel") -> None:
        if on and not self.launch.has(flag):
            self._add(group, flag)
        elif not on:
            self.remove(flag)

    def remove(self, *flags: str) -> None:
        for occurrence in self.launch.args:
            if occurrence.name in flags and id(occurrence) not in self.removed:
                self.removed.add(id(occurrence))
                self.edits.append(script_edit.removal(self.text, occurrence, self.info.expansion))

    def _add(self, group: str, flag_text: str) -> None:
        flag = flag_text.split()[0]
        if not versions.flag_allowed(flag, self.vr):
            raise StrategyError(
                f"the strategy needs {flag}, which {self.vr.label} lacks; "
                "choose a strategy without it or pass a newer --version"
            )
        self.additions.setdefault(group, []).append(flag_text)

    def _anchor(self, group: str) -> ArgOccurrence | None:
        for name in _ANCHORS[group] + _ANCHORS["parallel"]:
            for occurrence in reversed(self.launch.occurrences(name)):
                if id(occurrence) not in self.removed:
                    return occurrence
        return None

    def finish(self) -> list[Edit]:
        for group, flags in self.additions.items():
            anchor = self._anchor(group)
            if anchor is None:
                self.edits.append(script_edit.insertion_after_field(self.launch.entry, flags))
            else:
                self.edits.append(script_edit.insertion(self.text, anchor, flags))
        return self.edits


def _size(plan: _Plan, s: Strategy, key: str, value: object = None) -> None:
    """A layout size set by its flag (knobs.LAYOUT), left out where it is the default."""
    knob = LAYOUT[key]
    value = getattr(s, key) if value is None else value
    plan.value(knob.flag, value, default=knob.default, group=knob.group)


def _context_parallel(plan: _Plan, s: Strategy) -> None:
    if s.cp > 1 or plan.launch.has(LAYOUT["cp"].flag):
        _size(plan, s, "cp")
    if s.cp == 1:
        if plan.info.train.strategy.cp > 1:  # a script already at cp 1 keeps its (idle) cp options
            plan.remove(*_CP_ALGO.flags, *_CP_ALGO.companions)
        return
    if plan.vr.family == versions.MEGATRON:
        return
    algo = s.cp_algo
    plan.value(_CP_ALGO.flag, algo, default=DEFAULT_CP_ALGO)
    plan.remove(*_CP_ALGO.companions_off(algo))
    if algo == CpAlgo.HYBRID:
        current = plan.launch.value(ULYSSES_DEGREE_FLAG)
        requested = int(current) if current and current.isdigit() else None
        heads = plan.info.model.num_attention_heads
        # ulysses x ring = cp: the script's degree where MindSpeed accepts it, else the fallback
        # the cost model prices too (rules.hybrid_ulysses_degree).
        plan.value(ULYSSES_DEGREE_FLAG, hybrid_ulysses_degree(s.cp, s.tp, heads, requested))


def _experts(plan: _Plan, s: Strategy) -> None:
    ep, etp, extend_flag = LAYOUT["ep"].flag, LAYOUT["etp"].flag, LAYOUT["etp"].flag_for("one")
    if not plan.info.model.is_moe:
        if plan.launch.has(ep):
            plan.value(ep, 1)
        return
    extend = plan.launch.has(extend_flag)
    if s.etp == 1 and extend and not plan.launch.has(etp) and s.ep % s.tp == 0:
        # MindSpeed's tp x ep expert ranks: the flag says ep / tp (script/strategy_args.py).
        _size(plan, s, "ep", s.ep // s.tp)
        return
    plan.remove(extend_flag)  # the sizes are then said as Megatron-Core's ep and etp
    _size(plan, s, "ep")
    if s.etp is None:
        plan.remove(etp)
    else:
        plan.value(etp, s.etp, group="moe")


LAYOUT_OWNED = (
    LAYOUT_FLAG,
    EMBEDDING_FLAG,
    LOSS_FLAG,
    _SPLIT.flag_for("first"),
    _SPLIT.flag_for("last"),
)


def _same_layout(current: Strategy, s: Strategy) -> bool:
    return (current.pp, current.vpp, current.num_layer_list) == (s.pp, s.vpp, s.num_layer_list)


def _inside_double_quotes(text: str, offset: int) -> bool:
    """Whether `offset` lies inside a double-quoted string (MindSpeed's `GPT_ARGS="..."` groups)."""
    return len(re.findall(r'(?<!\\)"', text[:offset])) % 2 == 1


def _layout_string(plan: _Plan, s: Strategy) -> None:
    """The whole split as one layout string (it also fixes vpp: Megatron derives it). The string
    holds `|`, `*` and parentheses: single-quoted on a launch line or in an array, bare inside a
    double-quoted argument group (the group's expansion keeps it one word)."""
    chunks = s.chunk_layers(plan.info.num_layers_in_script)
    plan.remove(VPP_LAYERS_FLAG, *VPP_SIZE_FLAGS, *LAYOUT_OWNED)
    value = layout_text(chunks, plan.info.model.mtp_num_layers)
    anchor = plan._anchor("parallel")
    loc = script_edit.locate((anchor.flag, *anchor.values)) if anchor is not None else None
    if loc is None or not _inside_double_quotes(plan.text, loc.end):
        value = f"'{value}'"
    plan._add("parallel", f"{LAYOUT_FLAG} {value}")


def _pipeline_layout(plan: _Plan, s: Strategy) -> None:
    spelled = any(plan.launch.has(flag) for flag in LAYOUT_OWNED[:3])
    if spelled and _same_layout(plan.info.train.strategy, s):
        return  # the script's layout string / account-for switches already say this split
    if plan.vr.family == versions.MEGATRON and uses_layout_string(s, plan.launch, plan.vr):
        _layout_string(plan, s)
        return
    plan.remove(LAYOUT_FLAG, EMBEDDING_FLAG, LOSS_FLAG)
    if s.vpp > 1:
        size_flag = next((f for f in VPP_SIZE_FLAGS if plan.launch.has(f)), None)
        if size_flag is not None:
            plan.value(size_flag, s.vpp)
            plan.remove(VPP_LAYERS_FLAG)
        else:
            plan.value(VPP_LAYERS_FLAG, plan.info.num_layers_in_script // (s.pp * s.vpp))
    else:
        plan.remove(VPP_LAYERS_FLAG, *VPP_SIZE_FLAGS)
    if s.schedule == Schedule.DUALPIPEV:
        plan.value(_SCHEDULE.flag, Schedule.DUALPIPEV)
    else:
        plan.remove(*_SCHEDULE.flags, *_SCHEDULE.companions)
    plan.switch(_FB.flag, s.moe_fb_overlap)
    layers = s.num_layer_list
    if plan.vr.family == versions.MEGATRON:
        if layers is None:
            plan.remove(_SPLIT.flag_for("first"), _SPLIT.flag_for("last"))
        else:
            plan.value(_SPLIT.flag_for("first"), layers[0])
            plan.value(_SPLIT.flag_for("last"), layers[-1])
    elif layers is None:
        plan.remove(_SPLIT.flag)
    else:
        plan.value(_SPLIT.flag, ",".join(str(n) for n in layers))


def _recompute(plan: _Plan, s: Strategy) -> None:
    match s.recompute:
        case Recompute.NONE:
            plan.remove(*RECOMPUTE_OWNED)
        case Recompute.SELECTIVE if is_swap_policy(plan.launch, plan.info.train.recompute_modules):
            # MindSpeed's swap policy recomputes the MLP (script/swap_recompute.py): kept as it is
            count = swap_policy_count(plan.launch, s, plan.info.num_layers_in_script)
            plan.value(_COUNT.flag, count, group="recompute")
            if s.vpp == 1:  # MindSpeed refuses the per-rank switch without virtual stages
                plan.remove(PER_RANK_FLAG)
        case Recompute.SELECTIVE:
            plan.remove(*RECOMPUTE_FULL_ONLY)
            if plan.launch.has(_RECOMPUTE.flag_for("selective")):
                if plan.launch.value(_RECOMPUTE.flag) not in (None, Recompute.SELECTIVE):
                    plan.remove(_RECOMPUTE.flag)
                return
            plan.value(_RECOMPUTE.flag, Recompute.SELECTIVE, group="recompute")
        case Recompute.FULL:
            plan.remove(_RECOMPUTE.flag_for("selective"), *CHOICES["recompute_modules"].flags)
            plan.value(_RECOMPUTE.flag, Recompute.FULL, group="recompute")
            plan.value(_METHOD.flag, s.recompute_method, group="recompute")
            plan.value(_COUNT.flag, _full_count(plan, s), group="recompute")
        case _:
            assert_never(s.recompute)


def _full_count(plan: _Plan, s: Strategy) -> int | None:
    """Full recompute's count as the script says it: per pipeline rank where the script has
    MindSpeed's per-rank switch and the strategy keeps block recompute over virtual stages
    (script/recompute_args.py), else per chunk (the switch removed: MindSpeed refuses it without
    a virtual pipeline, and only the block method reads it)."""
    if not plan.launch.has(PER_RANK_FLAG):
        return s.recompute_num_layers
    if s.vpp == 1 or s.recompute_method != RecomputeMethod.BLOCK or s.recompute_num_layers is None:
        plan.remove(PER_RANK_FLAG)
        return s.recompute_num_layers
    current = plan.info.train.strategy
    kept = ("vpp", "recompute", "recompute_method", "recompute_num_layers")
    if all(getattr(current, key) == getattr(s, key) for key in kept):
        return int_value(plan.launch, _COUNT.flag)  # the script's own count (read rounded up)
    return rank_count(s.recompute_num_layers, s.vpp)


def _zero(plan: _Plan, s: Strategy) -> None:
    """The distributed optimizer, or the ZeRO stage of DeepSpeed / Megatron-FSDP scripts."""
    backend = zero_backend(plan.launch)
    if (
        backend == "deepspeed"
    ):  # the stage variable also feeds the JSON config: change it at its assignment
        for occurrence in plan.launch.occurrences(ZERO_STAGE_FLAG):
            edit = script_edit.value_edit(
                plan.text, occurrence, str(s.zero), plan.info.expansion, prefer_assignment=True
            )
            if edit is not None:
                plan.edits.append(edit)
        return
    if backend == "megatron_fsdp":
        plan.value(SHARDING_FLAG, SHARDING_STRATEGIES[s.zero])
    plan.switch(_ZERO.flag_for("dist_opt"), s.dist_opt)
    if not s.dist_opt:
        plan.remove(*DIST_OPT_COMPANIONS)


def _overlaps(plan: _Plan, s: Strategy) -> None:
    """Each overlap switch: off (or not applicable) removes every spelling; on keeps the script's
    spelling or adds the one the version has (expressible.overlap_flag)."""
    for key, knob in KNOBS.items():
        if getattr(s, key):
            flag = overlap_flag(key, plan.info, plan.vr)
            # expressible.py refused a knob on that this version cannot spell
            assert flag is not None, key
            if not any(plan.launch.has(spelling) for spelling in knob.flags):
                plan.switch(flag, True)
            for needed in knob.with_flags:  # what the framework refuses it without
                plan.switch(needed, True)
        else:
            plan.remove(*knob.flags, *knob.companions)


def plan_strategy_edits(
    text: str, info: ScriptInfo, s: Strategy, vr: versions.VersionRange
) -> list[Edit]:
    """Edits that make the script run the (expressible) strategy `s`."""
    plan = _Plan(text, info, vr)
    _size(plan, s, "tp")
    _size(plan, s, "pp")
    _context_parallel(plan, s)
    _experts(plan, s)
    if s.tp > 1:  # with tp = 1 the flag has no effect (Megatron turns it off): leave it as it is
        plan.switch(LAYOUT["sp"].flag, s.sp)
    _pipeline_layout(plan, s)
    _zero(plan, s)
    _size(plan, s, "mbs")
    _recompute(plan, s)
    _overlaps(plan, s)
    return plan.finish()
