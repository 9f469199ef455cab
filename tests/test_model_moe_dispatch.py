"""MoE token dispatch priced by dispatcher type, with the part that leaves the node (costs/moe_terms.py)."""

from __future__ import annotations

import dataclasses

import pytest
from model_support import cluster, moe_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.moe_terms import chunk_sort_us, distinct_ranks, moe_comm_us
from tinker_opt.strategy import Strategy

MODEL = moe_model(num_layers=4, hidden=1024, heads=16, experts=16, seq=2048, topk=8)
PROFILE = synthetic_profile(MODEL, tps=(1,), cps=(1,), eps=(1, 2, 4, 8, 16), mbss=(1,))


def _comm_us(model, ep: int, devices_per_node: int, nodes: int = 4) -> float:
    cost = CostModel.from_profile(PROFILE, model, cluster(nodes, devices_per_node, 60000), 64)
    strategy = Strategy(tp=1, pp=1, dp=nodes * devices_per_node, ep=ep, etp=1)
    return moe_comm_us(cost.context, strategy)


def _with(**fields):
    return dataclasses.replace(MODEL, **fields)


def test_all_to_all_leaving_the_node_is_slower():
    """The same EP group of 8: inside one node vs spread over two nodes of 4."""
    a2a = _with(moe_token_dispatcher_type="alltoall")
    assert _comm_us(a2a, 8, devices_per_node=4) > _comm_us(a2a, 8, devices_per_node=8)


def test_imbalance_and_capacity_scale_the_exchange():
    """The busiest rank receives imbalance x its share; a capacity factor caps it."""
    base = _with(moe_token_dispatcher_type="alltoall")
    busy = _with(moe_token_dispatcher_type="alltoall", moe_load_imbalance=1.5)
    capped = dataclasses.replace(busy, moe_expert_capacity_factor=1.1)
    balanced, heavy, limited = (_comm_us(m, 16, 8) for m in (base, busy, capped))
    assert balanced < limited < heavy


def test_allgather_moves_tokens_not_topk_copies():
    """The allgather dispatcher gathers every token of the EP group once (no topk factor)."""
    gather, a2a = (
        _with(moe_token_dispatcher_type="allgather"),
        _with(moe_token_dispatcher_type="alltoall"),
    )
    assert _comm_us(gather, 1, 8) == _comm_us(a2a, 1, 8) == 0.0
    assert _comm_us(gather, 8, 8) > 0


def test_deepep_sends_a_token_once_per_remote_node():
    """flex (DeepEP), topk 8 over 4 nodes: fewer inter-node bytes than the all-to-all."""
    flex, a2a = _with(moe_token_dispatcher_type="flex"), _with(moe_token_dispatcher_type="alltoall")
    assert _comm_us(flex, 16, 4) < _comm_us(a2a, 16, 4)
    assert _comm_us(flex, 4, 4) < _comm_us(a2a, 4, 4)  # one node: once per rank, not per expert


def test_deepep_inside_a_node_sends_a_token_once_per_rank():
    """16 experts over ep 4 (4 per rank), topk 8: by hand a token misses a rank with probability
    C(12, 8) / C(16, 8) = 495 / 12870, so it reaches 4 (1 - 495 / 12870) = 3.846 ranks; the
    exchange moves that many copies of each of the rank's 2048 x 1024 x 2 bytes, not 8."""
    assert distinct_ranks(16, 4, 8) == pytest.approx(4 * (1 - 495 / 12870))
    assert distinct_ranks(8, 8, 2) == 2  # one expert per rank: topk copies
    assert distinct_ranks(16, 1, 8) == 1
    flex = _with(moe_token_dispatcher_type="flex", moe_load_imbalance=1.0)
    cost = CostModel.from_profile(PROFILE, flex, cluster(4, 4, 60000), 64)
    strategy = Strategy(tp=1, pp=1, dp=16, ep=4, etp=1)
    sent = 2048 * 1024 * 2 * 4 * (1 - 495 / 12870)
    one_way = cost.context.comm.time_us("all_to_all", 4, "intra_node", sent)
    assert moe_comm_us(cost.context, strategy) == pytest.approx(2 * one_way)


def _sort_us(model, ep: int) -> tuple[float, float, float]:
    cost = CostModel.from_profile(PROFILE, model, cluster(4, 8, 60000), 64)
    strategy = Strategy(tp=1, pp=1, dp=32, ep=ep, etp=1)
    return (*chunk_sort_us(cost.context, strategy), cost.context.mem_bw_gbs)


def test_alltoall_sorts_received_tokens_by_local_expert():
    """Megatron's all-to-all dispatcher copies its received tokens twice per direction (sort by
    local expert, unsort before the combine), each a read and a write: by hand, 2048 tokens x
    topk 8 x hidden 1024 x 2 bytes = 32 MiB received, 4 x 32 MiB per direction at the HBM rate."""
    a2a = _with(moe_token_dispatcher_type="alltoall", moe_load_imbalance=1.0)
    fwd, bwd, bandwidth_gbs = _sort_us(a2a, 8)  # 16 experts over 8 ranks: 2 local experts
    received = 2048 * 8 * 1024 * 2
    assert fwd == bwd == pytest.approx(4 * received / (bandwidth_gbs * 1e3))
    busy = _with(moe_token_dispatcher_type="alltoall", moe_load_imbalance=1.5)
    assert _sort_us(busy, 8)[0] == pytest.approx(1.5 * fwd)  # the busiest rank sorts the most


def test_no_sort_for_one_local_expert_or_a_fused_dispatcher():
    """One local expert (ep = experts) needs no sort; DeepEP (flex) and allgather do not sort."""
    a2a = _with(moe_token_dispatcher_type="alltoall")
    assert _sort_us(a2a, 16)[:2] == (0.0, 0.0)
    for kind in ("flex", "allgather"):
        assert _sort_us(_with(moe_token_dispatcher_type=kind), 8)[:2] == (0.0, 0.0)
