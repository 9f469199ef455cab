"""The record types of the knob registry (knobs.py holds the records, one per knob).

A record says, once, what each stage needs to know of a knob: the flags that spell it with the
framework versions that have each (`Spelling`), its values, its default, the flags that only mean
something with it (removed with it), where it exists and what it needs. The reader
(script/strategy_args.py), the writers (emit/strategy_plan.py, expressible.py), the rules
(rules.py), the search space (solve/space.py), the version table (script/versions.py) and the
flag table `inspect` reports from (script/flags.py) read these fields; none of them lists a
knob's flags or values of its own (ARCHITECTURE.md, "The knob registry").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

Version = tuple[int, ...]
MINDSPEED, MEGATRON = "mindspeed", "megatron"
"""The framework families (script/versions.py uses the same two names)."""


@dataclass(frozen=True)
class Spelling:
    """One flag that spells a knob, the framework versions that have it, and what it says."""

    flag: str
    since: dict[str, Version | None]
    """Family -> first version with the flag; None: the family never has it."""
    until: dict[str, Version] = field(default_factory=dict)
    """Family -> first version without it (renamed or removed)."""
    role: str = ""
    """What this flag says of a knob that several flags spell ("" = the knob's own flag); the
    record's docstring names its roles."""
    words: tuple[str, ...] = ()
    """The flag's values where it names the knob's values otherwise (index = the knob's value)."""
    effect: str = ""
    """Its row of the README flag table where it differs from the knob's (script/flags.py)."""


def spell(
    flag: str,
    mindspeed: Version | None,
    megatron: Version | None,
    *,
    until_mindspeed: Version | None = None,
    role: str = "",
    effect: str = "",
) -> Spelling:
    """A Spelling from its first MindSpeed-LLM and Megatron-LM versions (and a rename)."""
    until = {MINDSPEED: until_mindspeed} if until_mindspeed else {}
    return Spelling(flag, {MINDSPEED: mindspeed, MEGATRON: megatron}, until, role, effect=effect)


def spell_always(
    flag: str, role: str = "", words: tuple[str, ...] = (), effect: str = ""
) -> Spelling:
    """A flag every version of both families has (no row in the version table)."""
    return Spelling(flag, {}, role=role, words=words, effect=effect)


class Layout(Protocol):
    """What a knob's context reads of a strategy (strategy.Strategy)."""

    @property
    def tp(self) -> int: ...
    @property
    def sp(self) -> bool: ...
    @property
    def ep(self) -> int: ...
    @property
    def vpp(self) -> int: ...
    @property
    def dist_opt(self) -> bool: ...


@dataclass(frozen=True)
class ModelFacts:
    """What a knob's rule reads of the model and the framework besides the layout (the defaults:
    a dense model of an unknown framework)."""

    is_moe: bool = False
    dispatcher: str | None = None
    """The model's `--moe-token-dispatcher-type` (None: not known, or a dense model)."""
    grouped_gemm: bool = False
    """The model's experts run as one grouped GEMM (`--moe-grouped-gemm`; False: not known)."""
    family: str | None = None
    """The framework family the strategy is written for (MINDSPEED, MEGATRON; None: not known,
    a search without a script: only the rules both families share apply)."""
    mtp_layers: int = 0
    """Multi-token prediction layers (`--mtp-num-layers`)."""
    precision: str = "bf16"
    """The training precision (specs.ModelSpec.precision)."""
    shared_experts: bool = False
    """The MoE layers have shared experts (`--moe-shared-expert-intermediate-size`)."""

    @classmethod
    def of(cls, model: Any, family: str | None = None) -> ModelFacts:
        """The facts of a ModelSpec (read by attribute) for `family`."""
        is_moe = bool(model.is_moe)
        return cls(
            is_moe,
            model.moe_token_dispatcher_type if is_moe else None,
            is_moe and bool(model.moe_grouped_gemm),
            family,
            int(getattr(model, "mtp_num_layers", 0) or 0),
            str(getattr(model, "precision", "bf16")),
            is_moe and bool(getattr(model, "moe_shared_expert_intermediate_size", None)),
        )


@dataclass(frozen=True)
class KnobContext:
    """What decides where a knob exists and is accepted: the strategy's layout, its recompute kind
    and the model's facts."""

    tp: int
    sp: bool
    ep: int
    vpp: int
    dist_opt: bool
    is_moe: bool
    dispatcher: str | None = None
    """The model's `--moe-token-dispatcher-type` (None: not known, or a dense model)."""
    grouped_gemm: bool = False
    """The model's experts run as one grouped GEMM (`--moe-grouped-gemm`; False: not known)."""
    pp: int = 1
    recompute: str | None = None
    """The recompute kind (choices.Recompute; None: not chosen yet, or none)."""
    family: str | None = None
    """ModelFacts.family: the framework family (None: not known)."""
    mtp_layers: int = 0
    precision: str = "bf16"
    shared_experts: bool = False

    @classmethod
    def of(
        cls, s: Layout, is_moe: bool, dispatcher: str | None = None, grouped_gemm: bool = False
    ) -> KnobContext:
        """The context of a layout and the model's MoE facts (no family: only the rules both
        families share)."""
        return cls.of_facts(s, ModelFacts(is_moe, dispatcher if is_moe else None, grouped_gemm))

    @classmethod
    def of_facts(cls, s: Layout, facts: ModelFacts) -> KnobContext:
        """The context of a layout (pp and recompute read where it has them) and model facts."""
        moe = facts.is_moe
        return cls(
            s.tp,
            s.sp,
            s.ep,
            s.vpp,
            s.dist_opt,
            moe,
            facts.dispatcher if moe else None,
            moe and facts.grouped_gemm,
            getattr(s, "pp", 1),
            getattr(s, "recompute", None),
            facts.family,
            facts.mtp_layers,
            facts.precision,
            moe and facts.shared_experts,
        )


OuterRule = Callable[[Any, Any, Any, int, int, Any], "str | None"]
"""(record, strategy, model, devices, global batch, FrameworkRules) -> why it is refused, or None."""
SplitRule = Callable[[Any, Any, Any, str], "str | None"]
"""(record, strategy, model, layer form) -> why the split is refused, or None."""


def _always(context: KnobContext) -> bool:
    return True


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One boolean strategy knob (a switch): its flags, where it applies, what it needs."""

    key: str
    """The Strategy key (strategy.OVERLAP_KEYS: the registry's switches in their order)."""
    spellings: tuple[Spelling, ...]
    """The flags that switch it on, MindSpeed-LLM's first, Megatron-LM's last, with the versions
    that have each; the writer keeps the script's own spelling, else the first the version has."""
    exists: Callable[[KnobContext], bool] = _always
    """Where the knob exists; elsewhere the schema's value is None and the writer removes it."""
    accepts: Callable[[KnobContext], bool] = _always
    """Where the framework accepts it on (a rule of rules.py; `needs` says it in words)."""
    needs: str = ""
    """Why `accepts` is false, in words, for the rule's message."""
    refusal: Callable[[KnobContext], str | None] | None = None
    """The framework's own argument checks on it (knob_rules.py): why it would not launch in this
    context, or None (run after `accepts`, by the rules and the search alike)."""
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
    added_by_search: bool = True
    """Whether the search may switch it on in a script that does not have it (else only where
    the script already sets it: expressible.searched_overlaps)."""
    companions: tuple[str, ...] = ()
    """Flags that only mean something with it on: the writer removes them with it."""
    with_flags: tuple[str, ...] = ()
    """Flags the framework refuses it without and that change nothing the cost model prices: the
    writer adds those the script lacks when it turns the knob on (it leaves them when it turns
    the knob off: the script may want them for themselves)."""
    effect: str = ""
    """What it changes, in words: the README flag table's row of its flags (script/flags.py)."""
    source: str = ""

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(spelling.flag for spelling in self.spellings)

    def set_by_search(self, context: KnobContext) -> bool:
        """Whether the search sets it (on or off) in `context` rather than leaving it None: a
        priced knob where it exists (knobs.search_choices; `inspect`'s searched column)."""
        return self.priced and self.exists(context)


@dataclass(frozen=True, kw_only=True)
class LayoutKnob:
    """A knob of the parallel layout that one flag spells: a size with its value, or a switch."""

    key: str
    """The Strategy field."""
    spelling: Spelling
    """The flag and the framework versions that have it."""
    others: tuple[Spelling, ...] = ()
    """Further flags that set it (by role; etp: `--moe-tp-extend-ep`, etp 1 on MindSpeed-LLM)."""
    default: int | bool = 1
    """What the framework runs without the flag (the writer then leaves the flag out)."""
    group: str = "parallel"
    """The flags the writer adds it next to (emit/strategy_plan.py anchors)."""
    check: OuterRule | None = None
    """Its rule against the model, the batch and the other sizes (knob_rules.py; rules.check_outer)."""
    priced: str = "costs/ (the layout: every term)"
    """Where the cost model prices it."""
    effect: str = "parallel sizes"
    """Its row of the README flag table."""
    source: str = "NVIDIA/Megatron-LM megatron/training/arguments.py"

    @property
    def flag(self) -> str:
        return self.spelling.flag

    @property
    def spellings(self) -> tuple[Spelling, ...]:
        return (self.spelling, *self.others)

    def flag_for(self, role: str) -> str:
        """The flag of `role` (`Spelling.role`)."""
        return _one(self.key, self.spellings, role)


@dataclass(frozen=True, kw_only=True)
class ChoiceKnob:
    """A knob that is more than a switch or one size: a choice (its StrEnum, choices.py), a count,
    a stage or a schedule, possibly spelled by several flags (told apart by `Spelling.role`)."""

    key: str
    """The field: of the Strategy (`home` "strategy"), the ModelSpec ("model") or TrainSpec ("job")."""
    spellings: tuple[Spelling, ...]
    kind: type
    """The value's type: a StrEnum of choices.py for a choice, else int or bool."""
    priced: str
    """Where the cost model prices it."""
    searched: bool
    """Whether the search chooses it (else it is read and written back as the script has it)."""
    values: tuple[Any, ...] = ()
    """Every value it takes (empty: the members of `kind`, a StrEnum)."""
    searched_values: tuple[Any, ...] | None = None
    """The values the search tries unless told otherwise (None: every value)."""
    default: Any = None
    """The value the framework runs without its flag (the writer leaves the flag out for it)."""
    value_since: dict[str, Version] = field(default_factory=dict)
    """Value -> the first MindSpeed-LLM version that has it (a value missing: never)."""
    companions: tuple[str, ...] = ()
    """Flags that only mean something with it set (removed with it)."""
    value_companions: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    """(flags, the values they need): flags removed when the knob takes another value."""
    excludes: tuple[str, ...] = ()
    """Switches (knobs.KNOBS) that cannot be on with it set (its rule reads them; the search turns
    them off with it, and the switches that require them: knobs.switched_off_with)."""
    check: OuterRule | None = None
    """Its rule against the model, the batch and the other knobs (knob_rules.py), run on every
    outer configuration by rules.check_outer and the search space."""
    split_check: SplitRule | None = None
    """Its rule on the layer split (knob_rules.py), run by rules.check_strategy."""
    rules: str = ""
    """Where rules other than `check` / `split_check` hold it (module.function), if any."""
    home: str = "strategy"
    effect: str = ""
    """Its row of the README flag table (script/flags.py)."""
    source: str = "NVIDIA/Megatron-LM megatron/training/arguments.py"

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(spelling.flag for spelling in self.spellings)

    @property
    def flag(self) -> str:
        """The knob's own flag (role "")."""
        return self.flag_for("")

    def flag_for(self, role: str) -> str:
        """The one flag of `role`."""
        return _one(self.key, self.spellings, role)

    def flags_for(self, role: str) -> tuple[str, ...]:
        """Every flag of `role`, in the record's order."""
        return tuple(s.flag for s in self.spellings if s.role == role)

    def words_for(self, role: str) -> tuple[str, ...]:
        """The values the flag of `role` spells, by the knob's value."""
        return next(s.words for s in self.spellings if s.role == role)

    @property
    def choices(self) -> tuple[Any, ...]:
        """Every value, as plain values (a StrEnum's spellings)."""
        values = self.values or tuple(self.kind)  # type: ignore[arg-type]
        return tuple(getattr(v, "value", v) for v in values)

    @property
    def searched_choices(self) -> tuple[Any, ...]:
        """The values the search tries unless told otherwise."""
        values = self.choices if self.searched_values is None else self.searched_values
        return tuple(getattr(v, "value", v) for v in values)

    def companions_off(self, value: object) -> tuple[str, ...]:
        """The value companions that `value` does not keep."""
        return tuple(
            flag for flags, keep in self.value_companions if value not in keep for flag in flags
        )


def _one(key: str, spellings: tuple[Spelling, ...], role: str) -> str:
    found = [s.flag for s in spellings if s.role == role]
    assert len(found) == 1, (key, role, found)
    return found[0]
