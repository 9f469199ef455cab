"""Context parallelism beyond one algorithm: MindSpeed's hybrid_cp_algo (Ulysses all-to-all inside
groups of u ranks, ring attention across cp / u groups) and unaligned Ulysses (heads not a
multiple of tp*cp). Byte counts below are worked out by hand from the model's sizes."""

from __future__ import annotations

import pytest
from model_support import cluster, dense_model, synthetic_profile

from tinker_opt.costs import overlap
from tinker_opt.costs.cp_terms import cp_fwd_bwd_us, cp_groups, unaligned_extra
from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.job import JobOptions
from tinker_opt.costs.layer_comm import layer_comm_us
from tinker_opt.errors import StrategyError
from tinker_opt.rules import (
    LATEST_RULES,
    FrameworkRules,
    check_strategy,
    hybrid_ulysses_degree,
    ulysses_heads_factor,
)
from tinker_opt.solve.search import search
from tinker_opt.solve.space import SearchSpace
from tinker_opt.strategy import Strategy

# 8 heads of 64, seq 2048: cp 8 gives 256 tokens per rank, one [256, 8, 64] bf16 tensor = 262,144 B.
HYBRID_MODEL = dense_model(num_layers=4, hidden=512, heads=8, seq=2048)
# 6 heads of 64 and 2 query groups: over cp 4 the ranks get 2, 2, 1, 1 heads (factor 4/3).
UNALIGNED_MODEL = dense_model(num_layers=4, hidden=384, heads=6, groups=2, seq=2048)


def _cost_model(model, *, nodes: int, per_node: int, ulysses_degree=None) -> CostModel:
    profiled = synthetic_profile(model, tps=(1,), cps=(1, 4, 8), mbss=(1,))
    return CostModel.from_profile(
        profiled, model, cluster(nodes, per_node), 16, job=JobOptions(ulysses_degree=ulysses_degree)
    )


def _layer_cost(cm: CostModel, s: Strategy):
    return cm.context.cost("layer", s)


def test_hybrid_degree_follows_mindspeed_rule():
    """The script's degree where cp / u > 1 and heads % (u*tp) == 0, else 2, else 1."""
    assert hybrid_ulysses_degree(8, 1, 32, 4) == 4
    assert hybrid_ulysses_degree(8, 1, 32, 8) == 2  # ring degree 1 is refused by MindSpeed
    assert hybrid_ulysses_degree(8, 1, 32, 3) == 2  # 3 does not divide cp
    assert hybrid_ulysses_degree(8, 2, 6, 2) == 1  # 6 heads not a multiple of 2 * tp 2
    assert hybrid_ulysses_degree(2, 1, 32, None) == 1  # cp 2: only u = 1 leaves a ring


def test_hybrid_comm_by_hand():
    """u = 4, cp = 8 on 2 nodes x 4: all-to-all of q, k, v (3 x 262,144 B) and the output
    (262,144 B) inside a node, one K/V hop (524,288 B) forward and two backward across nodes."""
    cm = _cost_model(HYBRID_MODEL, nodes=2, per_node=4, ulysses_degree=4)
    s = Strategy(tp=1, pp=1, dp=1, cp=8, cp_algo="hybrid_cp_algo", mbs=1)
    assert cp_groups(cm.context, s) == (4, 2)
    t = cm.comm.time_us
    a2a = t("all_to_all", 4, "intra_node", 3 * 262_144) + t("all_to_all", 4, "intra_node", 262_144)
    hop = t("send_recv", 2, "inter_node", 524_288)
    fwd, bwd = cp_fwd_bwd_us(cm.context, s)
    assert fwd == pytest.approx(a2a + hop) and bwd == pytest.approx(a2a + 2 * hop)
    # Exposed: the all-to-all in full, each hop less one block's attention (1/2 of the core).
    cost = _layer_cost(cm, s)
    share = overlap.matmul_share(HYBRID_MODEL, 1, 256, cost.param_count)
    exp_fwd, exp_bwd, hidden = layer_comm_us(cm.context, "dense", s, cost)
    assert exp_fwd == pytest.approx(a2a + max(0.0, hop - cost.fwd_us * (1 - share) / 2))
    assert exp_bwd == pytest.approx(a2a + 2 * max(0.0, hop - cost.bwd_us * (1 - share) / 2))
    assert hidden == pytest.approx(fwd + bwd - exp_fwd - exp_bwd)


def test_hybrid_degree_reaches_the_cost_model():
    """The script's --ulysses-degree-in-cp changes the price; without one the fallback (2) is used."""
    s = Strategy(tp=1, pp=1, dp=1, cp=8, cp_algo="hybrid_cp_algo", mbs=1)
    four = _cost_model(HYBRID_MODEL, nodes=1, per_node=8, ulysses_degree=4)
    default = _cost_model(HYBRID_MODEL, nodes=1, per_node=8)
    assert cp_groups(default.context, s) == (2, 4)
    assert cp_fwd_bwd_us(four.context, s) != cp_fwd_bwd_us(default.context, s)
    assert four.evaluate(s).iteration_time_ms != default.evaluate(s).iteration_time_ms


def test_megatron_ring_is_hybrid_with_one_ulysses_rank():
    """Ring attention prices exactly as hybrid with u = 1 (cp - 1 hops of the rank's K/V)."""
    cm = _cost_model(HYBRID_MODEL, nodes=1, per_node=8, ulysses_degree=1)
    ring = Strategy(tp=1, pp=1, dp=2, cp=4, cp_algo="megatron_cp_algo", mbs=1, zero=1)
    hybrid = ring.replace(cp_algo="hybrid_cp_algo")
    assert cp_groups(cm.context, hybrid) == (1, 4)
    assert cp_fwd_bwd_us(cm.context, ring) == cp_fwd_bwd_us(cm.context, hybrid)
    assert cm.evaluate(ring).time_ns_x_vpp == cm.evaluate(hybrid).time_ns_x_vpp


def test_unaligned_ulysses_by_hand():
    """6 heads over cp 4: the busiest rank holds 2 heads of 4 x 512 tokens per tensor
    (524,288 B, 4/3 of the aligned 393,216 B); K/V (2 groups < 4) are repeated to 6 heads."""
    assert ulysses_heads_factor(6, 1, 4) == pytest.approx(4 / 3)
    cm = _cost_model(UNALIGNED_MODEL, nodes=1, per_node=8)
    s = Strategy(tp=1, pp=1, dp=2, cp=4, cp_algo="ulysses_cp_algo", mbs=1, zero=1)
    t = cm.comm.time_us
    a2a = t("all_to_all", 4, "intra_node", 3 * 524_288) + t("all_to_all", 4, "intra_node", 524_288)
    assert cp_fwd_bwd_us(cm.context, s) == pytest.approx((a2a, a2a))
    cost = _layer_cost(cm, s)
    share = overlap.matmul_share(UNALIGNED_MODEL, 1, 512, cost.param_count)
    extra_fwd, extra_bwd, extra_bytes = unaligned_extra(cm.context, s, cost, share)
    assert extra_fwd == pytest.approx(cost.fwd_us * (1 - share) / 3)
    assert extra_bwd == pytest.approx(cost.bwd_us * (1 - share) / 3)
    # q, k, v and the output after the all-to-all: 4 x 524,288 held vs 4 x 393,216 aligned.
    assert extra_bytes == 4 * (524_288 - 393_216)


def test_aligned_ulysses_has_no_pace_term():
    """When tp*cp divides the heads nothing is added (factor 1)."""
    cm = _cost_model(HYBRID_MODEL, nodes=1, per_node=8)
    s = Strategy(tp=1, pp=1, dp=2, cp=4, cp_algo="ulysses_cp_algo", mbs=1, zero=1)
    cost = _layer_cost(cm, s)
    assert unaligned_extra(cm.context, s, cost, 0.5) == (0.0, 0.0, 0)


def test_unaligned_ulysses_rule_follows_the_version():
    """Accepted where the version has the unaligned all-to-all, refused with the one-line message
    elsewhere; fewer heads than tp*cp is refused everywhere."""
    s = Strategy(tp=1, pp=1, dp=2, cp=4, cp_algo="ulysses_cp_algo", mbs=1)
    check_strategy(s, UNALIGNED_MODEL, cluster(1, 8), 16, LATEST_RULES)
    old = FrameworkRules(unaligned_ulysses=False)
    with pytest.raises(StrategyError, match=r"num_attention_heads \(6\).*tp\*cp \(4\)"):
        check_strategy(s, UNALIGNED_MODEL, cluster(1, 8), 16, old)
    with pytest.raises(StrategyError, match=r"num_attention_heads \(6\).*tp\*cp \(8\)"):
        check_strategy(s.replace(cp=8, dp=1), UNALIGNED_MODEL, cluster(1, 8), 16, LATEST_RULES)


def test_hybrid_is_valid_and_searchable():
    """hybrid_cp_algo passes the rules and a search restricted to it proves its optimum."""
    cm = _cost_model(HYBRID_MODEL, nodes=1, per_node=8, ulysses_degree=4)
    s = Strategy(tp=1, pp=1, dp=1, cp=8, cp_algo="hybrid_cp_algo", mbs=1)
    check_strategy(s, HYBRID_MODEL, cluster(1, 8), 16)
    space = SearchSpace(max_mbs=1, tp=(1,), cp=(8,), cp_algos=("hybrid_cp_algo",))
    result = search(cm, solver="cpsat", cpus=1, top_k=1, space=space, time_limit_s=60)
    assert result.status == "optimal" and result.best.strategy.cp_algo == "hybrid_cp_algo"
    assert cm.evaluate(result.best.strategy).time_ns_x_vpp == result.best.time_ns_x_vpp


def test_solvers_agree_with_hybrid_and_unaligned_ulysses():
    """cpsat, milp and enum find brute force's optimum when hybrid and unaligned Ulysses are in."""
    from model_support import solvers_agree

    cm = _cost_model(UNALIGNED_MODEL, nodes=1, per_node=8, ulysses_degree=2)
    algos = ("hybrid_cp_algo", "ulysses_cp_algo", "megatron_cp_algo")
    space = SearchSpace(max_mbs=1, tp=(1,), cp=(4, 8), cp_algos=algos)
    results = solvers_agree(cm, space)
    assert results  # something fits
