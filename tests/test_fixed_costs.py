"""costs/fixed_costs.py: the host's issue time above the GPU's, per layer and micro-batch; zero
where the GPU hides it or the profile counts no ops; in the Evaluation's `host_ms`; the solvers
still agree with it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from model_support import cluster, dense_model, solvers_agree, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.fixed_costs import layer_host_time, tp_collectives_per_pass
from tinker_opt.costs.inputs import HardwareRates
from tinker_opt.costs.profile_table import BlockCost
from tinker_opt.hardware import DEFAULT_HOST_OP_US, load_hardware
from tinker_opt.solve.space import SearchSpace
from tinker_opt.strategy import Strategy

PER_OP = 10.0


def _ctx(tp_comm_in_times: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        rates=SimpleNamespace(host_op_us=PER_OP),
        tp_comm_in_times=tp_comm_in_times,
        model=SimpleNamespace(is_moe=False),
    )


def _cost(fwd_us: float, bwd_us: float, fwd_ops: int, bwd_ops: int) -> BlockCost:
    return BlockCost(
        fwd_us=fwd_us, bwd_us=bwd_us, param_count=1, expert_param_count=0, input_bytes=0,
        output_bytes=0, activation_bytes=0, transient_bytes=0, selective_activation_bytes=0,
        selective_recompute_us=0.0, estimated=False, fwd_host_ops=fwd_ops, bwd_host_ops=bwd_ops,
    )  # fmt: skip


def test_host_above_gpu_is_exposed_per_pass():
    """Forward: 50 ops x 10 us = 500 us against 200 us of GPU: 300 us exposed; backward: 100 ops
    = 1000 us against 1500 us: hidden. A full recompute reruns the forward's 300 us."""
    s = Strategy(tp=1, pp=1, dp=1, mbs=1, recompute="full")
    host = layer_host_time(_ctx(), "layer", s, _cost(200.0, 1500.0, 50, 100), 200.0, 1500.0)
    assert host.exposed_us == pytest.approx(300.0)
    assert host.recompute_exposed_us == pytest.approx(300.0)
    no_recompute = layer_host_time(
        _ctx(), "layer", s.replace(recompute="none"), _cost(200.0, 1500.0, 50, 100), 200.0, 1500.0
    )
    assert no_recompute.recompute_exposed_us == 0.0


def test_gpu_work_hides_the_host():
    """A large layer (GPU time above the host's) pays nothing: large jobs are priced as before."""
    s = Strategy(tp=1, pp=1, dp=1, mbs=1)
    host = layer_host_time(_ctx(), "layer", s, _cost(5000.0, 10000.0, 50, 100), 5000.0, 10000.0)
    assert host.exposed_us == 0.0


def test_profiles_without_op_counts_pay_nothing():
    """Measured and Tinker rows carry no op count: their block times ran with the host in them."""
    s = Strategy(tp=1, pp=1, dp=1, mbs=1)
    assert layer_host_time(_ctx(), "layer", s, _cost(1.0, 1.0, 0, 0), 0.0, 0.0).exposed_us == 0.0


def test_tensor_parallel_collectives_are_issued_by_the_host_and_run_on_the_gpu():
    """tp 2: two all-reduces per pass (four collectives with sequence parallelism), each one host
    op; their GPU time (in the pass's GPU time, 100 us block + 20 us) counts against the host's."""
    s = Strategy(tp=2, pp=1, dp=1, mbs=1)
    assert tp_collectives_per_pass(_ctx(), s) == 2
    assert tp_collectives_per_pass(_ctx(), s.replace(sp=True)) == 4
    assert tp_collectives_per_pass(_ctx(), s.replace(tp=1)) == 0
    assert tp_collectives_per_pass(_ctx(tp_comm_in_times=True), s) == 0
    host = layer_host_time(_ctx(), "layer", s, _cost(100.0, 100.0, 10, 10), 120.0, 120.0)
    assert host.exposed_us == pytest.approx(2 * ((10 + 2) * PER_OP - 120.0))


def test_every_description_prices_the_host():
    """A description that states no `host_op_us` prices the default; one that does, its own."""
    a100 = load_hardware("a100-40gb")
    assert a100.host_op_us is None
    assert HardwareRates.of(a100).host_op_us == DEFAULT_HOST_OP_US
    assert HardwareRates.of(dataclasses.replace(a100, host_op_us=7.5)).host_op_us == 7.5


def _host_bound_profile(model):
    """A synthetic profile whose layers issue many ops: tiny layers are host-bound."""
    profile = synthetic_profile(model, tps=(1, 2), cps=(1,), eps=(1,), mbss=(1, 2))
    blocks = profile.blocks.copy()
    layers = blocks["block"] == "layer"
    blocks.loc[layers, "fwd_host_ops"] = 40
    blocks.loc[layers, "bwd_host_ops"] = 90
    return dataclasses.replace(profile, blocks=blocks)


def test_evaluation_reports_host_ms_and_adds_it_to_the_time():
    """The same strategy with and without op counts: the difference is the host part."""
    model = dense_model(num_layers=4, hidden=256, heads=4, seq=256)
    plain = synthetic_profile(model, tps=(1, 2), cps=(1,), eps=(1,), mbss=(1, 2))
    s = Strategy(tp=1, pp=1, dp=2, mbs=1)
    base = CostModel.from_profile(plain, model, cluster(1, 2), 8).evaluate(s)
    host = CostModel.from_profile(_host_bound_profile(model), model, cluster(1, 2), 8).evaluate(s)
    assert base.time_breakdown_ms["host_ms"] == 0.0
    assert host.time_breakdown_ms["host_ms"] > 0.0
    assert host.iteration_time_ms == pytest.approx(
        base.iteration_time_ms + host.time_breakdown_ms["host_ms"], rel=1e-6
    )


def test_solvers_agree_on_a_host_bound_model():
    """cpsat = milp = enum = brute force with the host term in the layer coefficients."""
    model = dense_model(num_layers=4, hidden=256, heads=4, seq=256)
    cost_model = CostModel.from_profile(_host_bound_profile(model), model, cluster(1, 4), 8)
    results = solvers_agree(cost_model, SearchSpace(max_mbs=2, tp=(1, 2), cp=(1,), ep=(1,)))
    assert results
