"""simulate: Tinker-style flags -> Strategy -> Evaluation, and the --detail table."""

from __future__ import annotations

import pytest
from model_support import cluster, dense_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.simulate import parse_layer_list, strategy_from_flags
from tinker_opt.errors import StrategyError
from tinker_opt.strategy import Strategy

MODEL = dense_model(num_layers=8, hidden=512, heads=8, seq=1024)
COST_MODEL = CostModel.from_profile(
    synthetic_profile(MODEL, tps=(1, 2), cps=(1,), mbss=(1, 2)), MODEL, cluster(1, 8, 60000), 32
)


def test_flags_give_the_strategy_with_dp_from_the_cluster():
    """tp2 pp2 on 8 devices is dp 2; Tinker's recompute 1 is full recompute of every layer."""
    strategy = strategy_from_flags(
        num_devices=8,
        num_layers=8,
        tp=2,
        pp=2,
        sp=True,
        zero=1,
        mbs=2,
        num_layer_list="5,3",
        recompute=1,
    )
    assert strategy == Strategy(
        tp=2,
        pp=2,
        dp=2,
        sp=True,
        zero=1,
        mbs=2,
        recompute="full",
        recompute_method="block",
        recompute_num_layers=5,
        num_layer_list=(5, 3),
    )


def test_uniform_flag_defaults_to_one_layer_per_group():
    """--recompute-method uniform: Megatron's usual full recompute, r = 1 unless given; it simulates."""
    strategy = strategy_from_flags(
        num_devices=8, num_layers=8, pp=2, recompute="full", recompute_method="uniform"
    )
    assert (strategy.recompute_method, strategy.recompute_num_layers) == ("uniform", 1)
    assert COST_MODEL.evaluate(strategy).stages[0].recompute_layers == 4
    with pytest.raises(StrategyError, match="block or uniform"):
        strategy_from_flags(num_devices=8, num_layers=8, recompute="full", recompute_method="chunk")


def test_indivisible_device_count_is_an_error():
    """tp*pp*cp must divide the devices."""
    with pytest.raises(StrategyError, match=r"8 devices.*tp\*pp\*cp = 3\*1\*1"):
        strategy_from_flags(num_devices=8, num_layers=8, tp=3)


def test_bad_layer_list_is_an_error():
    """A layer list that is not comma-separated integers is rejected."""
    with pytest.raises(StrategyError, match="comma-separated"):
        parse_layer_list("4;4")


def test_invalid_combination_names_the_rule():
    """A layer list that does not sum to the model's layers breaks a named rule."""
    strategy = strategy_from_flags(num_devices=8, num_layers=8, pp=2, num_layer_list="4,5")
    with pytest.raises(StrategyError, match="sums to 9"):
        COST_MODEL.evaluate(strategy)
