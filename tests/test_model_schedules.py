"""DualPipeV and the MoE forward/backward overlap: priced, never slower where they hide traffic,
searched, and the solvers agree with them in the space."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_support import cluster, moe_model, solvers_agree, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.errors import StrategyError
from tinker_opt.rules import check_outer
from tinker_opt.solve.search import _outers
from tinker_opt.solve.space import SearchSpace
from tinker_opt.strategy import Strategy

SCHEDULE_SPACE = SearchSpace(
    max_mbs=2, tp=(1, 2), cp=(1,), ep=(1, 2), schedules=("1f1b", "dualpipev"), fb_overlap=True
)


def _model(layers: int = 8, hidden: int = 512, seq: int = 512):
    base = moe_model(num_layers=layers, hidden=hidden, heads=4, seq=seq, experts=4)
    return dataclasses.replace(base, moe_token_dispatcher_type="alltoall", moe_grouped_gemm=True)


def _cost(model, nodes=2, per_node=4, memory_mb=60000, gbs=32):
    profile = synthetic_profile(model, tps=(1, 2), cps=(1,), eps=(1, 2, 4), mbss=(1, 2))
    return CostModel.from_profile(profile, model, cluster(nodes, per_node, memory_mb), gbs)


def test_fb_overlap_is_never_slower_than_without():
    """Every outer configuration of the space: the fb-overlap only hides all-to-all time."""
    cost = _cost(_model())
    checked = 0
    for outer in _outers(cost, SCHEDULE_SPACE):
        if not outer.moe_fb_overlap or outer.ep == 1:
            continue
        plain = outer.replace(moe_fb_overlap=False)
        with_fb = cost.evaluate(outer.replace(recompute="none"))
        without = cost.evaluate(plain.replace(recompute="none"))
        assert with_fb.iteration_time_ms <= without.iteration_time_ms
        checked += 1
    assert checked > 0


def test_dualpipev_with_fb_overlap_is_never_slower_than_1f1b():
    """DualPipeV hides its all-to-all and p2p with the fb-overlap: not slower than the 1F1B
    schedule it replaces, for each pipeline size it admits; its bubble is smaller."""
    cost = _cost(_model(layers=8))
    for pp in (2, 4):
        base = Strategy(tp=1, pp=pp, dp=8 // pp, ep=2, etp=1, mbs=1)
        v = base.replace(dualpipev=True, moe_fb_overlap=True)
        one_f_one_b, dualpipev = cost.evaluate(base), cost.evaluate(v)
        assert dualpipev.iteration_time_ms <= one_f_one_b.iteration_time_ms, pp
        assert dualpipev.time_breakdown_ms["bubble_ms"] < one_f_one_b.time_breakdown_ms["bubble_ms"]


def test_dualpipev_puts_the_head_on_the_first_rank_and_holds_pp_plus_one_chunks():
    """The V ends where it starts: embedding and output layer on rank 0; 2p + 1 chunk
    activations in flight on every rank (DualPipe README)."""
    cost = _cost(_model(layers=8))
    s = Strategy(tp=1, pp=2, dp=4, ep=2, etp=1, dualpipev=True)
    coefficients = cost.coefficients(s)
    assert coefficients.vpp == 2
    assert list(coefficients.stage_inflight_x_v) == [5, 5]
    assert coefficients.stage_act_bytes[0] > 0 and coefficients.stage_act_bytes[1] == 0


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (dict(dualpipev=True, pp=3), "multiple of 2\\*pp"),
        (dict(dualpipev=True, overlap_grad_reduce=True), "overlap_grad_reduce"),
        (dict(moe_fb_overlap=True, etp=2, tp=2, sp=True, dp=2), "etp 1"),
    ],
)
def test_schedule_rules(changes, match):
    """MindSpeed's constraints of DualPipeV and the fb-overlap are StrategyErrors."""
    s = Strategy(tp=1, pp=2, dp=4, ep=2, etp=1, mbs=1).replace(**changes)
    with pytest.raises(StrategyError, match=match):
        check_outer(s, _model(layers=8), s.world_size, 32)
    with pytest.raises(StrategyError, match="vpp must be 1"):
        Strategy(pp=2, vpp=2, dualpipev=True)


def test_search_considers_both_schedules():
    """The space holds DualPipeV and fb-overlap variants of an outer configuration."""
    outers = list(_outers(_cost(_model()), SCHEDULE_SPACE))
    assert any(o.schedule == "dualpipev" for o in outers)
    assert any(o.moe_fb_overlap for o in outers)
    assert any(o.schedule == "1f1b" and not o.moe_fb_overlap for o in outers)


@st.composite
def instances(draw):
    layers = draw(st.sampled_from([4, 8]))
    hidden = draw(st.sampled_from([256, 512]))
    nodes, per_node = draw(st.sampled_from([(1, 4), (2, 2), (1, 8), (2, 4)]))
    memory_mb = draw(st.integers(80, 1500))
    gbs = draw(st.sampled_from([8, 16, 32]))
    return _cost(_model(layers=layers, hidden=hidden, seq=256), nodes, per_node, memory_mb, gbs)


@pytest.mark.filterwarnings("error")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_solvers_agree_with_the_schedule_choices(cost_model):
    """cpsat, milp, enum and brute force find the same optimum with DualPipeV and the fb-overlap
    in the space."""
    solvers_agree(cost_model, SCHEDULE_SPACE)
