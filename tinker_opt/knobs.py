"""The knob registry: one declaration per strategy knob, read by every stage that handles it.

A `Knob` says, once, what the script reader (script/strategy_args.py), the validity rules
(rules.py), the search space (solve/space.py), the writers (emit/strategy_plan.py,
expressible.py) and the version table (script/versions.py FLAG_SINCE) each need to know
about a strategy knob: its Strategy key, the flags that spell it and the framework versions that
have each, where it exists (else its schema value is None), what turning it on requires and
excludes, where the search turns it on, and the companion flags written back with it. Adding
a knob is one entry here plus its Strategy field (ARCHITECTURE.md, "Adding a knob").

The registry holds the communication-overlap switches (`Knob`, `OVERLAP_KNOBS`) and the knobs of
the parallel layout that one flag spells (`LayoutKnob`, `LAYOUT_KNOBS`: tp, pp, cp, ep, etp, mbs
and sp), whose flags, versions, defaults and writer groups the reader, the writer, what the
framework can express and the version table read from here. Their validity rules (divisibility,
rules.py) and the knobs with more than one flag (vpp, the layer split, recompute, ZeRO, the
schedule) are still written in the modules above (ARCHITECTURE.md, "The knob registry").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from tinker_opt.choices import (
    CpAlgo,
    Dispatcher,
    Recompute,
    RecomputeMethod,
    RecomputeModule,
    Schedule,
)
from tinker_opt.strategy import Strategy

Version = tuple[int, ...]
MINDSPEED, MEGATRON = "mindspeed", "megatron"
"""The framework families (script/versions.py uses the same two names)."""


@dataclass(frozen=True)
class Spelling:
    """One flag that spells a knob, and the framework versions that have it."""

    flag: str
    since: dict[str, Version | None]
    """Family -> first version with the flag; None: the family never has it."""
    until: dict[str, Version] = field(default_factory=dict)
    """Family -> first version without it (renamed or removed)."""


def _spell(
    flag: str, mindspeed: Version | None, megatron: Version | None, until_mindspeed=None
) -> Spelling:
    """A Spelling from its first MindSpeed-LLM and Megatron-LM versions (and a rename)."""
    until = {MINDSPEED: until_mindspeed} if until_mindspeed else {}
    return Spelling(flag, {MINDSPEED: mindspeed, MEGATRON: megatron}, until)


def _spell_always(flag: str) -> Spelling:
    """A flag every version of both families has (no row in the version table)."""
    return Spelling(flag, {})


@dataclass(frozen=True)
class KnobContext:
    """What decides where a knob exists and is accepted: the strategy's layout and the model."""

    tp: int
    sp: bool
    ep: int
    vpp: int
    dist_opt: bool
    is_moe: bool

    @classmethod
    def of(cls, s: Strategy, is_moe: bool) -> KnobContext:
        return cls(tp=s.tp, sp=s.sp, ep=s.ep, vpp=s.vpp, dist_opt=s.dist_opt, is_moe=is_moe)


def _always(context: KnobContext) -> bool:
    return True


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One boolean strategy knob (a switch): its flags, where it applies, what it needs."""

    key: str
    """The Strategy field (strategy.STRATEGY_KEYS)."""
    spellings: tuple[Spelling, ...]
    """The flags that switch it on, MindSpeed-LLM's first, Megatron-LM's last, with the versions
    that have each; the writer keeps the script's own spelling, else the first the version has."""
    exists: Callable[[KnobContext], bool] = _always
    """Where the knob exists; elsewhere the schema's value is None and the writer removes it."""
    accepts: Callable[[KnobContext], bool] = _always
    """Where the framework accepts it on (a rule of rules.py; `needs` says it in words)."""
    needs: str = ""
    """Why `accepts` is false, in words, for the rule's message."""
    requires: tuple[str, ...] = ()
    """Knobs that must not be off (False) when this one is on."""
    excludes: tuple[str, ...] = ()
    """Knobs that cannot be on together with this one (either way round: `excluded_pairs`)."""
    pays_off: Callable[[KnobContext], bool] = _always
    """Where the search turns it on: there is a collective for it to hide (costs/overlap.py
    prices an overlap as the part that cannot hide, never more than without it)."""
    priced: bool = True
    """Whether the cost model prices it; an unpriced knob is read and written back as the script
    has it (the search leaves it None, "keep the script's setting") and never chosen."""
    companions: tuple[str, ...] = ()
    """Flags that only mean something with it on: the writer removes them with it."""
    effect: str = ""
    """What it changes, in words: the README flag table's row of its flags (script/flags.py)."""
    source: str = ""

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(spelling.flag for spelling in self.spellings)


# Versions: MindSpeed-LLM, the first release whose examples use the flag
# (reference/script-conventions.md); Megatron-LM, arguments.py of the named core release.
# fmt: off
OVERLAP_KNOBS: tuple[Knob, ...] = (
    Knob(key="overlap_grad_reduce", spellings=(_spell("--overlap-grad-reduce", (0, 9, 2), (0, 0)),),
         effect="gradient reduce in buckets under the last backward (last bucket exposed)",
         source="NVIDIA/Megatron-LM megatron/training/arguments.py"),
    Knob(key="overlap_param_gather", spellings=(_spell("--overlap-param-gather", (0, 9, 3), (0, 0)),),
         exists=lambda c: c.dist_opt, accepts=lambda c: c.dist_opt,
         needs="the distributed optimizer (dist_opt, zero >= 1)", requires=("overlap_grad_reduce",),
         effect="parameter all-gather under the next forward (dist-opt; first bucket exposed)",
         source="Megatron-LM arguments.py: 'Must use --overlap-param-gather with --overlap-grad-reduce'; "
                "'Must use --overlap-param-gather-with-optimizer-step with --overlap-param-gather'"),
    Knob(key="overlap_moe_comm", spellings=(_spell("--moe-alltoall-overlap-comm", (2, 0, 0), None),
                                            _spell("--overlap-moe-expert-parallel-comm", None, (0, 14))),
         exists=lambda c: c.is_moe, accepts=lambda c: c.is_moe,
         needs="a MoE model; it applies to MoE models only and this model has no experts",
         excludes=("tp_comm_overlap",), pays_off=lambda c: c.ep > 1,
         effect="MoE all-to-all: backward one hidden behind the weight gradients",
         source="Ascend/MindSpeed mindspeed/features_manager/moe/moe_alltoall_overlap.py validate_args "
                "(incompatible_check use_ascend_mc2)"),
    Knob(key="tp_comm_overlap", spellings=(_spell("--use-ascend-mc2", (2, 2, 0), None),
                                           _spell("--use-mc2", (0, 9, 2), None, until_mindspeed=(2, 2, 0)),
                                           _spell("--tp-comm-overlap", None, (0, 0))),
         exists=lambda c: c.tp > 1, accepts=lambda c: c.tp > 1 and c.sp,
         needs="tp > 1 with sequence parallelism", companions=("--tp-comm-overlap-cfg",),
         pays_off=lambda c: c.tp > 1 and c.sp,
         effect="TP communication fused into the matmuls in tp chunks (MC2 on Ascend, TE userbuffers "
                "on GPUs): one chunk exposed, the rest hidden behind the matmul",
         source="Ascend/MindSpeed docs/zh/features/mc2.md; Megatron-LM arguments.py (tp_comm_overlap)"),
    # ASSUMPTION: the first versions (Megatron-LM core 0.9; MindSpeed-LLM 2.1.0, on a core that has it).
    Knob(key="overlap_param_gather_with_optimizer_step",
         spellings=(_spell("--overlap-param-gather-with-optimizer-step", (2, 1, 0), (0, 9)),),
         exists=lambda c: c.dist_opt, accepts=lambda c: c.dist_opt and c.vpp > 1,
         needs="the distributed optimizer and a virtual pipeline (vpp > 1)",
         requires=("overlap_param_gather",), priced=False,
         effect="first parameter all-gather under the optimizer step (dist-opt, vpp > 1)",
         source="Megatron-LM arguments.py: 'Must use --overlap-param-gather-with-optimizer-step with "
                "--overlap-param-gather', '... only supported with interleaved pipeline parallelism'"),
    # ASSUMPTION: Megatron-LM core 0.14, the release of --overlap-moe-expert-parallel-comm it needs;
    # no MindSpeed-LLM example found.
    Knob(key="delay_wgrad_compute", spellings=(_spell("--delay-wgrad-compute", None, (0, 14)),),
         exists=lambda c: c.is_moe, accepts=lambda c: c.is_moe,
         needs="a MoE model; it delays the expert weight gradients", requires=("overlap_moe_comm",),
         priced=False,
         effect="expert weight gradients delayed behind the MoE all-to-all (with its overlap)",
         source="Megatron-LM megatron/core/transformer/transformer_config.py: "
                "'overlap_moe_expert_parallel_comm must be enabled when enabling delay_wgrad_compute'"),
    # ASSUMPTION: Megatron-LM core 0.10, the first release read with the shared-expert stream; no
    # MindSpeed-LLM example found. Megatron also needs shared experts and the alltoall dispatcher
    # (transformer_config.py); the cost term prices nothing without shared experts.
    Knob(key="moe_shared_expert_overlap", spellings=(_spell("--moe-shared-expert-overlap", None, (0, 10)),),
         exists=lambda c: c.is_moe, accepts=lambda c: c.is_moe,
         needs="a MoE model with shared experts", pays_off=lambda c: c.ep > 1,
         effect="MoE dispatch / combine all-to-all hidden behind the shared expert's compute (costs/overlap.py)",
         source="NVIDIA/Megatron-LM megatron/core/transformer/moe/shared_experts.py (shared expert stream)"),
)
# fmt: on
"""The communication-overlap switches, in Strategy schema order (strategy.OVERLAP_KEYS)."""


@dataclass(frozen=True, kw_only=True)
class LayoutKnob:
    """A knob of the parallel layout that one flag spells: a size with its value, or a switch."""

    key: str
    """The Strategy field."""
    spelling: Spelling
    """The flag and the framework versions that have it."""
    default: int | bool = 1
    """What the framework runs without the flag (the writer then leaves the flag out)."""
    group: str = "parallel"
    """The flags the writer adds it next to (emit/strategy_plan.py anchors)."""
    source: str = "NVIDIA/Megatron-LM megatron/training/arguments.py"

    @property
    def flag(self) -> str:
        return self.spelling.flag


# Versions: Megatron-LM core releases and MindSpeed-LLM's first examples with the flag
# (reference/script-conventions.md); tp, pp, mbs and sp: every version. In the order the writer
# looks for the flag to add new ones after (emit/strategy_plan.py anchors).
# fmt: off
LAYOUT_KNOBS: tuple[LayoutKnob, ...] = (
    LayoutKnob(key="pp", spelling=_spell_always("--pipeline-model-parallel-size")),
    LayoutKnob(key="tp", spelling=_spell_always("--tensor-model-parallel-size")),
    LayoutKnob(key="cp", spelling=_spell("--context-parallel-size", (0, 9, 3), (0, 5))),
    LayoutKnob(key="ep", spelling=_spell("--expert-model-parallel-size", (0, 9, 1), (0, 4)), group="moe"),
    LayoutKnob(key="etp", spelling=_spell("--expert-tensor-parallel-size", (2, 2, 0), (0, 10)), group="moe"),
    LayoutKnob(key="sp", spelling=_spell_always("--sequence-parallel"), default=False),
    LayoutKnob(key="mbs", spelling=_spell_always("--micro-batch-size")),
)
# fmt: on
"""The layout knobs one flag spells (their rules: rules.check_outer; the writer: strategy_plan)."""

LAYOUT: dict[str, LayoutKnob] = {knob.key: knob for knob in LAYOUT_KNOBS}


@dataclass(frozen=True, kw_only=True)
class ChoiceKnob:
    """A knob that is more than a switch or one size: a choice (its StrEnum, choices.py), a count,
    a stage or a schedule, possibly spelled by several flags. Its record says where it lives, its
    flags per framework and version (the version table reads them), its type, where its rules are
    checked and where it is priced, and whether the search chooses it. Its reader, writer and
    rules are still code in the modules named (ARCHITECTURE.md, "The knob registry")."""

    key: str
    """The field: of the Strategy (`home` "strategy"), the ModelSpec ("model") or TrainSpec ("job")."""
    spellings: tuple[Spelling, ...]
    kind: type
    """The value's type: a StrEnum of choices.py for a choice, else int or bool."""
    rules: str
    """Where its validity rules are (module.function)."""
    priced: str
    """Where the cost model prices it."""
    searched: bool
    """Whether the search chooses it (else it is read and written back as the script has it)."""
    home: str = "strategy"
    source: str = "NVIDIA/Megatron-LM megatron/training/arguments.py"

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(spelling.flag for spelling in self.spellings)


# Versions as for the switches: MindSpeed-LLM's first examples with the flag, Megatron-LM's core
# release (reference/script-conventions.md); `_spell_always`: every version of both families.
# fmt: off
CHOICE_KNOBS: tuple[ChoiceKnob, ...] = (
    ChoiceKnob(key="vpp", kind=int, searched=True,
               spellings=(_spell("--num-layers-per-virtual-pipeline-stage", (0, 9, 2), (0, 0)),
                          _spell_always("--virtual-pipeline-model-parallel-size"),
                          _spell("--num-virtual-stages-per-pipeline-rank", None, (0, 13))),
               rules="rules._rule_vpp, rules.interleaved_pipeline_message, layer_stack (chunks)",
               priced="costs/pipeline.py (v chunks per rank), costs/coefficients.py _chunk_bounds"),
    ChoiceKnob(key="dualpipev", kind=Schedule, searched=True,
               spellings=(_spell("--schedules-method", (2, 0, 0), None),),
               rules="rules._rule_schedule, layer_stack.dualpipev_message (the padded layer count)",
               priced="costs/pipeline.py, costs/stage_terms.py dualpipev_inflight_x_v",
               source="Ascend/MindSpeed mindspeed/features_manager/pipeline_parallel/dualpipev_feature.py"),
    ChoiceKnob(key="moe_fb_overlap", kind=bool, searched=True,
               spellings=(_spell("--moe-fb-overlap", (2, 0, 0), None),),
               rules="rules._rule_schedule", priced="costs/layer_comm.py (overlap.fb_overlap_exposed)",
               source="Ascend/MindSpeed docs/features/megatron_moe/megatron-moe-fb-overlap.md"),
    ChoiceKnob(key="recompute", kind=Recompute, searched=True,
               spellings=(_spell_always("--recompute-granularity"), _spell_always("--recompute-activations")),
               rules="rules._rule_recompute_kind", priced="costs/terms.py, costs/recompute.py"),
    ChoiceKnob(key="recompute_method", kind=RecomputeMethod, searched=True,
               spellings=(_spell_always("--recompute-method"),),
               rules="rules._recompute_count_message", priced="costs/recompute.py chunk_plan"),
    ChoiceKnob(key="recompute_num_layers", kind=int, searched=True,
               spellings=(_spell_always("--recompute-num-layers"),),
               rules="rules._recompute_count_message", priced="costs/recompute.py chunk_plan"),
    ChoiceKnob(key="zero", kind=int, searched=True,
               spellings=(_spell_always("--use-distributed-optimizer"), _spell_always("--zero-stage"),
                          _spell_always("--use-megatron-fsdp")),
               rules="strategy.ZERO_LEVELS", priced="costs/zero_terms.py, costs/data_parallel.py"),
    ChoiceKnob(key="cp_algo", kind=CpAlgo, searched=True,
               spellings=(_spell("--context-parallel-algo", (0, 9, 3), None),),
               rules="rules._rule_cp, cp_rules", priced="costs/cp_terms.py",
               source="Ascend/MindSpeed mindspeed/features_manager/context_parallel/context_parallel_feature.py"),
    ChoiceKnob(key="recompute_modules", kind=RecomputeModule, searched=False, home="job",
               spellings=(_spell_always("--recompute-modules"),),
               rules="script/recompute_args.recompute_modules", priced="costs/recompute_modules.py"),
    ChoiceKnob(key="moe_token_dispatcher_type", kind=Dispatcher, searched=False, home="model",
               spellings=(_spell_always("--moe-token-dispatcher-type"),),
               rules="rules._rule_schedule (fb-overlap needs alltoall)", priced="costs/moe_terms.py"),
    ChoiceKnob(key="fp8_format", kind=str, searched=True, home="model",
               spellings=(_spell_always("--fp8-format"),),
               rules="specs.ModelSpec", priced="costs/fp8_terms.py, costs/fp8_activation.py",
               source="NVIDIA/Megatron-LM arguments.py; searched by `search --allow-fp8` (verbs/precision.py)"),
)
# fmt: on
"""The knobs with more than one setting that one flag spells (their readers, writers and rules
are still the modules named in each record)."""

CHOICES: dict[str, ChoiceKnob] = {knob.key: knob for knob in CHOICE_KNOBS}

KNOBS: dict[str, Knob] = {knob.key: knob for knob in OVERLAP_KNOBS}
assert len(KNOBS) == len(OVERLAP_KNOBS), "a knob is declared twice"
assert len(CHOICES) == len(CHOICE_KNOBS), "a knob is declared twice"
assert not (set(KNOBS) & set(LAYOUT) or set(CHOICES) & (set(KNOBS) | set(LAYOUT))), "declared twice"


def flag_versions() -> tuple[dict[str, dict[str, Version | None]], dict[str, dict[str, Version]]]:
    """The knobs' rows of script/versions.py FLAG_SINCE and FLAG_UNTIL (a flag every version has
    has none)."""
    spellings = [spelling for knob in KNOBS.values() for spelling in knob.spellings]
    spellings += [knob.spelling for knob in LAYOUT_KNOBS]
    spellings += [spelling for knob in CHOICE_KNOBS for spelling in knob.spellings]
    since = {spelling.flag: dict(spelling.since) for spelling in spellings if spelling.since}
    until = {spelling.flag: dict(spelling.until) for spelling in spellings if spelling.until}
    return since, until


def excluded_pairs() -> list[tuple[str, str]]:
    """Every pair of knobs that exclude each other, once, whichever side declares it."""
    return list(_excluded_pairs())


@functools.cache
def _excluded_pairs() -> tuple[tuple[str, str], ...]:
    """excluded_pairs, computed once (the registry is fixed; the search asks per configuration)."""
    pairs = {tuple(sorted((knob.key, other))) for knob in KNOBS.values() for other in knob.excludes}
    return tuple(sorted(pairs))  # type: ignore[arg-type]


def knob_message(s: Strategy, is_moe: bool) -> str | None:
    """Why the framework refuses the strategy's knobs (the first reason), or None."""
    context = KnobContext.of(s, is_moe)
    for knob in KNOBS.values():
        if not getattr(s, knob.key):
            continue
        if not knob.accepts(context):
            return (
                f"{knob.key} needs {knob.needs} (tp {s.tp}, sp {s.sp}, zero {s.zero}); turn it off"
            )
        for other in knob.requires:
            if getattr(s, other) is False:
                return f"{knob.key} needs {other} on ({knob.source})"
    for a, b in _excluded_pairs():
        if getattr(s, a) and getattr(s, b):
            return f"{a} and {b} exclude each other; turn one of them off"
    return None


def read_switches(has: Callable[[str], bool], context: KnobContext) -> dict[str, bool | None]:
    """The knobs as a script sets them: on when any spelling is present, None where the knob
    does not exist (the reader's normal form)."""
    return {
        key: any(has(flag) for flag in knob.flags) if knob.exists(context) else None
        for key, knob in KNOBS.items()
    }


def search_choices(
    s: Strategy, is_moe: bool, allowed: tuple[str, ...]
) -> list[dict[str, bool | None]]:
    """The switch settings the search tries for an outer configuration: every allowed knob on
    where it pays off and the framework accepts it, off where it exists but does not, None where
    it does not exist; for each pair that excludes each other and would both be on, one choice
    with each of the two (the search picks)."""
    context = KnobContext.of(s, is_moe)
    on = {
        key
        for key, knob in KNOBS.items()
        if key in allowed
        and knob.priced
        and knob.accepts(context)
        and knob.pays_off(context)
        and all(other in allowed for other in knob.requires)
    }
    choices = [on]
    for a, b in excluded_pairs():
        choices = [
            variant
            for chosen in choices
            for variant in ((chosen - {a}, chosen - {b}) if {a, b} <= chosen else (chosen,))
        ]
    return [
        {
            key: (key in chosen) if knob.exists(context) and knob.priced else None
            for key, knob in KNOBS.items()
        }
        for chosen in choices
    ]
