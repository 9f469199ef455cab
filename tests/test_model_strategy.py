"""Validity rules: only strategies Megatron / MindSpeed-LLM can express pass check_strategy."""

from __future__ import annotations

import pytest
from model_support import cluster, dense_model, moe_model

from tinker_opt.errors import StrategyError
from tinker_opt.rules import check_strategy
from tinker_opt.solve.space import SearchSpace, outer_choices
from tinker_opt.strategy import Strategy

DENSE = dense_model(num_layers=8, hidden=1024, heads=16, seq=2048)
MOE = moe_model(num_layers=8, hidden=1024, heads=16, experts=8)
EIGHT = cluster(1, 8)


def _check(strategy, model=DENSE, gbs=64):
    check_strategy(strategy, model, EIGHT, gbs)


def test_valid_strategy_passes():
    """A plain tp2-pp2-dp2 strategy with sp and the distributed optimizer is valid."""
    _check(Strategy(tp=2, pp=2, dp=2, sp=True, zero=1, mbs=2))


@pytest.mark.parametrize(
    "strategy, words",
    [
        (Strategy(tp=2, pp=2, dp=1), ["4", "8"]),  # world size
        (Strategy(tp=8, pp=1, dp=1, mbs=3), ["64", "3"]),  # gbs % (mbs*dp)
        (Strategy(tp=1, pp=1, dp=8, sp=True), ["sequence parallelism", "tp is 1"]),
        (
            Strategy(tp=1, pp=8, dp=1, num_layer_list=(1, 1, 1, 1, 1, 1, 1, 2)),
            ["sums to 9", "8 layers"],
        ),
        (
            Strategy(tp=1, pp=4, dp=2, vpp=2, num_layer_list=(2, 2, 2, 2)),
            ["num_layer_list", "virtual"],
        ),
        (Strategy(tp=1, pp=1, dp=8, vpp=2), ["pipeline size >= 2", "pp is 1"]),
        (Strategy(tp=1, pp=2, dp=4, overlap_param_gather=True), ["distributed optimizer"]),
        (Strategy(tp=2, pp=1, dp=4, tp_comm_overlap=True), ["sequence parallelism"]),
        (Strategy(tp=1, pp=1, dp=8, overlap_moe_comm=True), ["MoE models only"]),
        (
            Strategy(tp=1, pp=1, dp=8, recompute="full", recompute_num_layers=9),
            ["between 1", "(8)", "got 9"],
        ),
        (Strategy(tp=1, pp=1, dp=4, cp=2), ["cp_algo"]),
        (Strategy(tp=1, pp=1, dp=8, ep=2), ["MoE models only"]),
    ],
)
def test_dense_rules_name_the_rule_and_numbers(strategy, words):
    """Each broken rule raises StrategyError whose message carries the numbers involved."""
    with pytest.raises(StrategyError) as error:
        _check(strategy)
    for word in words:
        assert word in str(error.value)


def test_tp_must_divide_heads():
    """tp must divide the attention heads (Megatron's message, both numbers)."""
    model = dense_model(num_layers=8, hidden=960, heads=12, seq=2048)
    with pytest.raises(StrategyError, match=r"num_attention_heads \(12\).*\(8\)"):
        check_strategy(Strategy(tp=8, pp=1, dp=1), model, EIGHT, 64)


@pytest.mark.parametrize(
    "strategy, pattern",
    [
        (Strategy(tp=1, pp=1, dp=8, ep=3), r"num_experts \(8\).*\(3\)"),
        (Strategy(tp=2, pp=2, dp=2, ep=8, sp=True), r"tp\*dp\*cp \(4\).*ep\*etp"),
        (Strategy(tp=2, pp=1, dp=4, ep=2), r"needs sequence parallelism"),
    ],
)
def test_moe_rules(strategy, pattern):
    """Expert rules: experts % ep, (tp*dp*cp) % (ep*etp) and sp with tp for MoE."""
    with pytest.raises(StrategyError, match=pattern):
        check_strategy(strategy, MOE, EIGHT, 64)


def test_ulysses_needs_heads_divisible_by_tp_cp():
    """Ulysses splits heads over tp*cp: 4 heads cannot be split 8 ways."""
    model = dense_model(num_layers=8, hidden=256, heads=4, seq=2048)
    with pytest.raises(StrategyError, match=r"num_attention_heads \(4\).*tp\*cp \(8\)"):
        check_strategy(
            Strategy(tp=2, pp=1, dp=1, cp=4, cp_algo="ulysses_cp_algo", sp=True), model, EIGHT, 64
        )


def test_outer_choices_are_all_valid_and_distinct():
    """Every outer configuration of the default space passes the rules once."""
    choices = outer_choices(DENSE, 8, 64, SearchSpace(), lambda *shape: True, 4)
    assert len(choices) == len(set(choices)) > 100
    for outer in choices:
        layers = outer.stage_layers(DENSE.num_layers) if DENSE.num_layers % outer.pp == 0 else None
        if layers is not None:
            r = 1 if outer.recompute == "full" else None
            check_strategy(outer.replace(recompute_num_layers=r), DENSE, EIGHT, 64)


def test_space_restrictions_are_honoured():
    """A restricted space lists only the allowed knob values."""
    space = SearchSpace(
        tp=(2,), allow_vpp=False, allow_cp=False, recompute=("none",), allow_dist_opt=False
    )
    choices = outer_choices(DENSE, 8, 64, space, lambda *shape: True, 2)
    assert choices and all(
        o.tp == 2 and o.vpp == 1 and o.cp == 1 and o.recompute == "none" and not o.dist_opt
        for o in choices
    )


def test_interleaved_pp2_follows_the_framework_version():
    """vpp with pp 2 passes where p2p overlap is on (recent Megatron / MindSpeed-LLM) and fails without it."""
    from tinker_opt.rules import FrameworkRules

    strategy = Strategy(tp=1, pp=2, dp=4, vpp=2)
    check_strategy(strategy, DENSE, EIGHT, 64)
    with pytest.raises(
        StrategyError, match=r"pipeline size >= 3 without p2p communication overlap \(pp is 2\)"
    ):
        check_strategy(strategy, DENSE, EIGHT, 64, FrameworkRules(overlap_p2p_comm=False))


def test_overlap_keys_round_trip_json():
    """The overlap switches are schema keys: to_dict / from_dict keep them, other values are refused."""
    strategy = Strategy(
        tp=2,
        pp=1,
        dp=4,
        sp=True,
        zero=1,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        tp_comm_overlap=False,
    )
    assert Strategy.from_dict(strategy.to_dict()) == strategy
    with pytest.raises(StrategyError, match="true, false or null"):
        Strategy(overlap_grad_reduce="yes")


def test_choices_are_enum_members_and_json_stays_plain_strings():
    """Spellings become members (comparisons with the spelling still hold); to_dict writes plain
    strings; an unknown spelling names the choices."""
    import json

    from tinker_opt.choices import CpAlgo, Recompute, RecomputeMethod

    s = Strategy(cp=2, cp_algo="ulysses_cp_algo", recompute="full", recompute_method="block")
    assert s.recompute is Recompute.FULL and s.recompute == "full"
    assert (s.recompute_method, s.cp_algo) == (RecomputeMethod.BLOCK, CpAlgo.ULYSSES)
    data = s.to_dict()
    assert type(data["recompute"]) is str and type(data["cp_algo"]) is str
    assert Strategy.from_dict(json.loads(json.dumps(data))) == s
    with pytest.raises(StrategyError, match=r"cp_algo must be one of .*'megatron_cp_algo'"):
        Strategy(cp=2, cp_algo="ring")
