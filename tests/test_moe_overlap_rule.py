"""The MoE all-to-all overlap only where it launches (issue 29): its record's rule
(knob_rules.moe_comm_refusal, by framework family), the search space that combines it with the
recompute kind, the rules `simulate` runs, and the plain search space's switch defaults."""

from __future__ import annotations

import dataclasses

import pytest
from model_support import moe_model

from tinker_opt.choices import Recompute
from tinker_opt.errors import StrategyError
from tinker_opt.knob_rules import moe_comm_refusal
from tinker_opt.knobs import KNOBS, MEGATRON, MINDSPEED, KnobContext, ModelFacts
from tinker_opt.rules import LATEST_RULES, check_outer
from tinker_opt.solve.space import SearchSpace, outer_choices
from tinker_opt.specs import ModelSpec
from tinker_opt.strategy import OVERLAP_KEYS, Strategy

_GOOD = Strategy(
    tp=1, pp=2, dp=4, ep=4, vpp=2, recompute=Recompute.SELECTIVE, overlap_moe_comm=True
)
"""A layout Megatron-Core accepts the overlap with (ep > 1, pp 2 with a virtual pipeline)."""


def _model(dispatcher: str = "alltoall", grouped_gemm: bool = True, **more) -> ModelSpec:
    facts = {"moe_token_dispatcher_type": dispatcher, "moe_grouped_gemm": grouped_gemm, **more}
    return dataclasses.replace(moe_model(num_layers=8, experts=8), **facts)


def _refusal(s: Strategy, model: ModelSpec, family: str | None) -> str | None:
    return moe_comm_refusal(KnobContext.of_facts(s, ModelFacts.of(model, family)))


@pytest.mark.parametrize(
    ("change", "model_change", "words"),
    [
        ({"ep": 1, "dp": 4}, {}, "ep > 1"),
        ({"recompute": Recompute.FULL}, {}, "no full recompute"),
        ({"vpp": 1}, {}, "virtual pipeline"),
        ({}, {"moe_token_dispatcher_type": "allgather"}, "token dispatcher"),
        ({}, {"moe_token_dispatcher_type": "alltoall_seq"}, "token dispatcher"),
        ({}, {"precision": "fp32"}, "bf16 or fp16"),
        ({}, {"mtp_num_layers": 2}, "MTP"),
    ],
)
def test_megatron_core_refuses_what_its_transformer_config_refuses(change, model_change, words):
    """megatron-core 0.16.1 TransformerConfig.__post_init__: each condition alone refuses it."""
    assert _refusal(_GOOD, _model(), MEGATRON) is None
    message = _refusal(_GOOD.replace(**change), _model(**model_change), MEGATRON)
    assert message is not None and words in message


def test_mindspeed_refuses_what_its_feature_refuses_and_keeps_the_rest():
    """MindSpeed's MoEAlltoAllOverLapFeature.validate_args: alltoall / alltoall_seq with the
    grouped GEMM; full recompute and pp > 1 without a virtual pipeline are Megatron's own."""
    free = _GOOD.replace(recompute=Recompute.FULL, vpp=1)
    assert _refusal(free, _model(), MINDSPEED) is None
    assert _refusal(free, _model("alltoall_seq"), MINDSPEED) is None
    assert "token dispatcher" in _refusal(free, _model("allgather"), MINDSPEED)
    assert "token dispatcher" in _refusal(free, _model("flex"), MINDSPEED)
    assert "--moe-grouped-gemm" in _refusal(free, _model(grouped_gemm=False), MINDSPEED)


def test_an_unknown_family_keeps_only_the_shared_checks():
    """Without a script (no family) only what both refuse: a dispatcher neither runs it with."""
    free = _GOOD.replace(recompute=Recompute.FULL, vpp=1, ep=1)
    for dispatcher in ("alltoall", "alltoall_seq", "flex"):
        assert _refusal(free, _model(dispatcher, grouped_gemm=False), None) is None
    assert "token dispatcher" in _refusal(free, _model("allgather"), None)


def test_the_rules_refuse_it_with_a_one_line_message():
    """check_outer (simulate, the cost model) with the family: one line naming the fix."""
    model = _model()
    full = _GOOD.replace(recompute=Recompute.FULL, recompute_method="uniform")
    megatron = dataclasses.replace(LATEST_RULES, family=MEGATRON)
    check_outer(_GOOD, model, 8, 64, megatron)
    with pytest.raises(StrategyError) as caught:
        check_outer(full, model, 8, 64, megatron)
    message = str(caught.value)
    assert "\n" not in message and "overlap_moe_comm needs no full recompute" in message
    assert "turn it off" in message
    check_outer(full, model, 8, 64, dataclasses.replace(LATEST_RULES, family=MINDSPEED))
    shared = _GOOD.replace(moe_shared_expert_overlap=True)
    with pytest.raises(StrategyError, match="exclude each other"):
        check_outer(shared, model, 8, 64, megatron)


def _outers(model: ModelSpec, family: str | None) -> list[Strategy]:
    space = SearchSpace(max_mbs=1, tp=(1,), cp=(1,), ep=(4,), family=family)
    return outer_choices(model, 8, 64, space, lambda *shape: True, 1)


def _layout(s: Strategy) -> Strategy:
    """The outer configuration without its switches."""
    return s.replace(**dict.fromkeys(OVERLAP_KEYS))


def test_the_search_turns_it_off_with_full_recompute_not_the_configuration():
    """The search combines the switches with the recompute kind: on Megatron every outer with
    full recompute or pp > 1 without vpp has the overlap off (and is still listed), the others on;
    on MindSpeed the recompute kind does not matter."""
    model = _model()
    megatron = _outers(model, MEGATRON)
    full = [s for s in megatron if s.recompute == Recompute.FULL]
    assert full and not any(s.overlap_moe_comm for s in full)
    assert not any(s.overlap_moe_comm for s in megatron if s.pp > 1 and s.vpp == 1)
    assert any(s.overlap_moe_comm for s in megatron if s.recompute != Recompute.FULL and s.vpp > 1)
    mindspeed = _outers(model, MINDSPEED)
    assert {_layout(s) for s in mindspeed} == {_layout(s) for s in megatron}
    on = {_layout(s) for s in mindspeed if s.overlap_moe_comm}
    assert {_layout(s) for s in full} <= on


def test_a_plain_search_space_adds_no_switch_a_script_cannot_gain():
    """TP overlap (Megatron's --tp-comm-overlap: Transformer Engine userbuffers; MindSpeed's MC2:
    an edited validation) is searched only where the script sets it (expressible.search_space_for),
    never by a plain SearchSpace."""
    plain = SearchSpace().overlaps
    assert plain is not None and "tp_comm_overlap" not in plain
    assert set(plain) == {key for key in OVERLAP_KEYS if KNOBS[key].added_by_search}
    dense = dataclasses.replace(moe_model(num_layers=8), num_experts=None)
    outers = outer_choices(
        dense, 8, 64, SearchSpace(max_mbs=1, tp=(2,), cp=(1,)), lambda *shape: True, 1
    )
    assert outers and not any(s.tp_comm_overlap for s in outers)
