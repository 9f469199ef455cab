"""Communication overlap (costs/overlap.py): the rules, never slower than without, the hidden /
exposed split in the Evaluation, the solvers' agreement with the knobs in play, and MindSpeed's
--reuse-fp32-param memory."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_support import cluster, dense_model, moe_model, solvers_agree, synthetic_profile

from tinker_opt.costs import overlap
from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.job import JobOptions
from tinker_opt.knobs import ModelFacts
from tinker_opt.solve.search import _outers
from tinker_opt.solve.space import SearchSpace, overlap_choices
from tinker_opt.strategy import OVERLAP_KEYS, Strategy


def test_chunked_rule_keeps_one_chunk_exposed():
    """MC2 / userbuffers: comm/tp exposed, the rest up to the matmul time hidden."""
    assert overlap.chunked_exposed(80.0, 1000.0, 8) == pytest.approx(10.0)
    assert overlap.chunked_exposed(80.0, 30.0, 8) == pytest.approx(10.0 + 40.0)
    assert overlap.chunked_exposed(80.0, 0.0, 8) == pytest.approx(80.0)
    assert overlap.chunked_exposed(0.0, 5.0, 8) == 0.0


def test_exposed_rule_and_bucket():
    """max(0, comm - compute); Megatron's bucket is max(40M, 1M x dp) parameters."""
    assert overlap.exposed(5.0, 3.0) == 2.0 and overlap.exposed(5.0, 9.0) == 0.0
    assert overlap.bucket_params(8) == 40_000_000 and overlap.bucket_params(128) == 128_000_000


@st.composite
def instances(draw):
    layers = draw(st.integers(2, 8))
    kind = draw(st.sampled_from(["dense", "moe"]))
    seq = draw(st.sampled_from([256, 512]))
    if kind == "moe":
        model = moe_model(num_layers=layers, hidden=512, heads=4, seq=seq, experts=4)
    else:
        model = dense_model(num_layers=layers, hidden=512, heads=4, seq=seq)
    nodes, per_node = draw(st.sampled_from([(1, 2), (1, 4), (2, 2), (1, 8), (2, 4)]))
    gbs = draw(st.sampled_from([4, 8, 16]))
    memory_mb = draw(st.integers(60, 1500))
    profile = synthetic_profile(model, tps=(1, 2), cps=(1, 2), eps=(1, 2), mbss=(1, 2))
    return CostModel.from_profile(
        profile,
        model,
        cluster(nodes, per_node, memory_mb),
        gbs,
        job=JobOptions(overlap_p2p_comm=draw(st.booleans())),
    )


def _even(cost_model, s: Strategy):
    layers = cost_model.model.num_layers
    if layers % s.pp:
        return None
    return (layers // s.pp,) * s.pp


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.sets(st.sampled_from(OVERLAP_KEYS)))
def test_an_overlap_never_makes_an_iteration_slower(cost_model, keys):
    """Every outer configuration, every set of knobs: time with <= time without, same memory,
    and the same exposed + hidden communication."""
    space = SearchSpace(max_mbs=2, tp=(1, 2), cp=(1, 2), ep=(1, 2), overlaps=())
    for outer in _outers(cost_model, space):
        layers = _even(cost_model, outer)
        if layers is None:
            continue
        for on, r in itertools.product(
            [
                outer.replace(**k)
                for k in overlap_choices(
                    outer, True, tuple(keys), facts=ModelFacts.of(cost_model.model)
                )
            ],
            (1,) if outer.recompute == "full" else (0,),
        ):
            off_c, on_c = cost_model.coefficients(outer), cost_model.coefficients(on)
            off_st, on_st = off_c.stage_costs(layers, r), on_c.stage_costs(layers, r)
            assert on_c.iteration_time_ns_x_v(on_st) <= off_c.iteration_time_ns_x_v(off_st), (
                on.label()
            )
            for a, b in zip(off_st, on_st, strict=True):
                assert b.memory_bytes_x_v == a.memory_bytes_x_v
                assert b.time_ns <= a.time_ns and b.tail_ns <= a.tail_ns
                assert b.hidden_comm_ns >= 0 and b.hidden_sync_ns >= 0
                # Ring attention always overlaps, so "off" has hidden traffic too: the totals agree.
                slack = 2 * (b.layers + 2)
                assert abs(b.comm_ns + b.hidden_comm_ns - a.comm_ns - a.hidden_comm_ns) <= slack
                assert (
                    abs(b.tail_sync_ns + b.hidden_sync_ns - a.tail_sync_ns - a.hidden_sync_ns)
                    <= slack
                )


@pytest.mark.filterwarnings("error")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.sets(st.sampled_from(OVERLAP_KEYS)))
def test_solvers_agree_with_overlap_choices(cost_model, keys):
    """cpsat, milp, enum and brute force find the same optimum with any set of overlap knobs,
    and evaluate() of each returned strategy equals its objective exactly."""
    space = SearchSpace(max_mbs=2, tp=(1, 2), cp=(1, 2), ep=(1, 2), overlaps=tuple(sorted(keys)))
    for result in solvers_agree(cost_model, space).values():
        for evaluation in result.top:
            assert evaluation.strategy.overlap_grad_reduce is ("overlap_grad_reduce" in keys)


def _tp_model():
    model = dense_model(num_layers=4, hidden=1024, heads=8, seq=1024)
    profile = synthetic_profile(model, tps=(1, 2, 4), cps=(1,), eps=(1,), mbss=(1,))
    return CostModel.from_profile(profile, model, cluster(1, 4, 60000), 8)


def test_tp_overlap_hides_all_but_one_chunk_when_the_matmul_covers_it():
    """tp 4 with SP: exposed TP traffic = 1/4 of it when the matmul is longer (synthetic profile)."""
    cost = _tp_model()
    base = Strategy(tp=4, dp=1, sp=True, mbs=1)
    off, on = (
        cost.evaluate(base.replace(tp_comm_overlap=False)),
        cost.evaluate(base.replace(tp_comm_overlap=True)),
    )
    layer_comm_off = off.stages[0].comm_ms
    assert on.stages[0].comm_hidden_ms > 0
    assert on.stages[0].comm_ms + on.stages[0].comm_hidden_ms == pytest.approx(
        layer_comm_off, abs=1e-5
    )
    assert on.iteration_time_ms < off.iteration_time_ms


def test_grad_reduce_overlap_keeps_the_last_bucket_exposed():
    """dp 4: the sync tail shrinks with --overlap-grad-reduce but stays above zero."""
    cost = _tp_model()
    base = Strategy(tp=1, dp=4, mbs=1)
    off = cost.evaluate(base.replace(overlap_grad_reduce=False))
    on = cost.evaluate(base.replace(overlap_grad_reduce=True))
    assert 0 < on.stages[0].sync_ms < off.stages[0].sync_ms
    assert on.stages[0].sync_hidden_ms > 0


def test_reuse_fp32_param_saves_two_bytes_per_parameter_of_states():
    """MindSpeed reuse-fp32-param.md: sizeof(bf16) x params (/ dp with dist-opt) less memory."""
    model = dense_model(num_layers=4, hidden=1024, heads=8, seq=1024)
    profile = synthetic_profile(model, tps=(1,), cps=(1,), eps=(1,), mbss=(1,))
    plain = CostModel.from_profile(profile, model, cluster(1, 2, 60000), 8)
    reuse = CostModel.from_profile(
        profile, model, cluster(1, 2, 60000), 8, job=JobOptions(reuse_fp32_param=True)
    )
    for zero in (0, 1):
        s = Strategy(dp=2, zero=zero)
        a, b = plain.evaluate(s).stages[0], reuse.evaluate(s).stages[0]
        assert b.optimizer_mb == pytest.approx(a.optimizer_mb * 10 / 12, rel=1e-6)
