"""Validity rules of a Strategy for a model, a cluster and a framework version.

One rule per function (`_rule_*`, each returning why a strategy is invalid or None); the outer
rules (OUTER_RULES) judge a configuration before its layer split, check_strategy the whole
strategy. The facts of the framework version the rules depend on are a FrameworkRules
(script/versions.py builds it for a script); layer forms (LAYER_FORMS) say which per-stage layer
counts a framework can write, one rule shared by the split solvers, `simulate` and the writer.
The rules of the layout sizes are here; every other knob's are part of its record in the knob
registry (knobs.py: the switches' declarations, the choice knobs' `check` / `split_check`
functions of knob_rules.py), run here for every record (ARCHITECTURE.md, "The knob registry").
"""

from __future__ import annotations

from collections.abc import Callable

from tinker_opt.cp_rules import (
    MODELLED_CP_ALGOS,
    hybrid_ulysses_degree,
    ulysses_heads_factor,
    ulysses_heads_message,
)
from tinker_opt.errors import StrategyError
from tinker_opt.framework_rules import LATEST_RULES, FrameworkRules
from tinker_opt.knob_rules import interleaved_pipeline_message
from tinker_opt.knob_types import ChoiceKnob, LayoutKnob, ModelFacts
from tinker_opt.knobs import CHOICE_KNOBS, LAYOUT_KNOBS, knob_message
from tinker_opt.layer_stack import (
    LAYER_FORMS,
    form_allows,
    layer_form_message,
    virtual_form_message,
)
from tinker_opt.specs import ClusterSpec, ModelSpec
from tinker_opt.strategy import Strategy

__all__ = [  # the facts other modules import from here (their homes: the modules above)
    "LATEST_RULES",
    "LAYER_FORMS",
    "MODELLED_CP_ALGOS",
    "FrameworkRules",
    "form_allows",
    "hybrid_ulysses_degree",
    "interleaved_pipeline_message",
    "layer_form_message",
    "ulysses_heads_factor",
    "ulysses_heads_message",
    "virtual_form_message",
]

Rule = Callable[..., "str | None"]
"""(strategy, model, devices, global batch, framework = LATEST_RULES) -> why refused, or None."""

# ----------------------------------------------------------------------------------------------
# Validity rules: only strategies that Megatron-LM / MindSpeed-LLM can express.
# Each rule returns None or the one-line message of the StrategyError, with both numbers.
# Sources: ../shared/reference/script-conventions.md section 2 (facts over 1,300 real scripts) and
# Megatron-LM's own argument checks (arguments.py, parallel_state.py).
# ----------------------------------------------------------------------------------------------


def _rule_world(
    s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
) -> str | None:
    if s.world_size != num_devices:
        return (
            f"tp*pp*dp*cp = {s.tp}*{s.pp}*{s.dp}*{s.cp} = {s.world_size} must equal the "
            f"cluster's {num_devices} devices"
        )
    return None


def _rule_overlap(
    s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
) -> str | None:
    return knob_message(s, model.is_moe, facts=ModelFacts.of(model, fw.family))


def _record_rule(knob: LayoutKnob | ChoiceKnob) -> Rule:
    """A record's outer rule with the record bound (knob_rules.py)."""
    check = knob.check
    assert check is not None

    def rule(
        s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
    ) -> str | None:
        return check(knob, s, model, num_devices, gbs, fw)

    rule.__name__ = f"{knob.key}_rule"
    return rule


_RECORDS: tuple[LayoutKnob | ChoiceKnob, ...] = (*LAYOUT_KNOBS, *CHOICE_KNOBS)
OUTER_RULES: tuple[Rule, ...] = (
    _rule_world,
    *(_record_rule(knob) for knob in _RECORDS if knob.check is not None),
    _rule_overlap,
)
"""Rules on the outer configuration (everything but the layer split and recompute count): the
world size, then each layout and choice knob's record rule in registry order, then the
switches'."""

SPLIT_RULES: tuple[ChoiceKnob, ...] = tuple(k for k in CHOICE_KNOBS if k.split_check is not None)
"""The records with a rule on the layer split, in registry order."""


def check_outer(
    strategy: Strategy,
    model: ModelSpec,
    num_devices: int,
    global_batch_size: int,
    framework: FrameworkRules = LATEST_RULES,
) -> None:
    """Raise StrategyError naming the first outer rule the strategy breaks (for `framework`'s version)."""
    for rule in OUTER_RULES:
        message = rule(strategy, model, num_devices, global_batch_size, framework)
        if message:
            raise StrategyError(message)


def check_strategy(
    strategy: Strategy,
    model: ModelSpec,
    cluster: ClusterSpec,
    global_batch_size: int,
    framework: FrameworkRules = LATEST_RULES,
) -> None:
    """Raise StrategyError naming the rule `strategy` breaks, with both numbers; None when valid.

    `model` is a ModelSpec, `cluster` a ClusterSpec (only its device count matters here);
    `framework` the version-dependent facts (the script's, else recent versions').
    """
    check_outer(strategy, model, cluster.num_devices, global_batch_size, framework)
    for knob in SPLIT_RULES:
        assert knob.split_check is not None
        message = knob.split_check(knob, strategy, model, framework.layer_form)
        if message:
            raise StrategyError(message)
