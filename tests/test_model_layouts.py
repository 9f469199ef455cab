"""Per-virtual-stage layer counts priced by CostModel.evaluate (Strategy.chunk_layers,
coefficients._chunk_bounds): Megatron's layout strings and first/last counts with vpp."""

from __future__ import annotations

import pytest
from model_support import cluster, dense_model, moe_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.errors import StrategyError
from tinker_opt.strategy import Strategy


def _cost_model(model, gbs: int = 16):
    return CostModel.from_profile(synthetic_profile(model), model, cluster(1, 4, 60000), gbs)


DENSE10 = dense_model(num_layers=10)
DENSE8 = dense_model(num_layers=8)


def _same(a, b) -> bool:
    return (a.iteration_time_ms, a.peak_memory_mb) == (b.iteration_time_ms, b.peak_memory_mb)


def test_equal_chunks_price_as_the_even_split():
    """A per-virtual-stage list with equal chunks per rank is the per-rank form, and an even one
    prices exactly as no list at all."""
    cost_model = _cost_model(DENSE8)
    listed = Strategy(pp=2, dp=2, vpp=2, num_layer_list=(2, 2, 2, 2))
    assert listed.num_layer_list == (4, 4)
    assert _same(cost_model.evaluate(listed), cost_model.evaluate(Strategy(pp=2, dp=2, vpp=2)))


def test_uneven_virtual_stages_are_priced_per_rank():
    """10 layers over pp 2 x vpp 2 (no even split): (3,2,2,3) and (2,3,3,2) give each rank 5
    layers of a homogeneous stack, so the same time and memory; (4,4,2,0) gives ranks 6 and 4."""
    cost_model = _cost_model(DENSE10)
    with pytest.raises(StrategyError, match="multiple of pp\\*vpp"):
        cost_model.evaluate(Strategy(pp=2, dp=2, vpp=2))
    a = cost_model.evaluate(Strategy(pp=2, dp=2, vpp=2, num_layer_list=(3, 2, 2, 3)))
    b = cost_model.evaluate(Strategy(pp=2, dp=2, vpp=2, num_layer_list=(2, 3, 3, 2)))
    assert _same(a, b) and [st["layers"] for st in a.to_dict()["stages"]] == [5, 5]
    c = cost_model.evaluate(Strategy(pp=2, dp=2, vpp=2, num_layer_list=(4, 4, 2, 0)))
    assert [st["layers"] for st in c.to_dict()["stages"]] == [6, 4]
    a_stages, c_stages = a.to_dict()["stages"], c.to_dict()["stages"]
    assert c_stages[0]["compute_ms"] > a_stages[0]["compute_ms"]
    assert c_stages[1]["compute_ms"] < a_stages[1]["compute_ms"]


def test_chunk_positions_follow_megatron_layer_order():
    """Layer ids run over virtual stage j * pp + s: with 2 dense layers first, (2,2,2,2) puts
    both on rank 0 (layers 0-1, 4-5), (1,3,3,1) one on each rank (0, 4-6 | 1-3, 7): the MoE
    weights move with them."""
    model = moe_model(num_layers=8, experts=4, first_dense=2)
    cost_model = _cost_model(model)
    front = cost_model.evaluate(Strategy(pp=2, dp=2, ep=1, vpp=2, num_layer_list=(2, 2, 2, 2)))
    moved = cost_model.evaluate(Strategy(pp=2, dp=2, ep=1, vpp=2, num_layer_list=(1, 3, 3, 1)))
    stages_front = front.to_dict()["stages"]
    stages_moved = moved.to_dict()["stages"]
    assert [st["layers"] for st in stages_moved] == [4, 4]
    assert stages_front[0]["weights_mb"] < stages_moved[0]["weights_mb"]
    assert stages_moved[0]["weights_mb"] == pytest.approx(stages_moved[1]["weights_mb"], abs=0.01)
    assert stages_moved[1]["weights_mb"] < stages_front[1]["weights_mb"]


def test_block_recompute_clamps_per_virtual_stage():
    """Block recompute with r above a chunk recomputes the whole chunk (min(r, n) per chunk)."""
    cost_model = _cost_model(DENSE10)
    base = Strategy(
        pp=2, dp=2, vpp=2, num_layer_list=(3, 2, 2, 3), recompute="full", recompute_method="block"
    )
    at_max = cost_model.evaluate(base.replace(recompute_num_layers=3))
    beyond = cost_model.evaluate(base.replace(recompute_num_layers=10))
    assert _same(at_max, beyond)
