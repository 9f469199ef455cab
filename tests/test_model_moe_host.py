"""The MoE layer's wait for the host (operators: costs/moe_host.py; the one rule:
costs/fixed_costs.py layer_host_time): hand-computed host operators and the wait beyond the GPU
time, reported as `host_ms`; the solvers keep agreeing with it priced."""

from __future__ import annotations

import dataclasses

import pytest
from model_support import HARDWARE, cluster, moe_model, solvers_agree, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.fixed_costs import layer_host_time
from tinker_opt.costs.moe_host import host_ops
from tinker_opt.costs.profile_table import BlockCost
from tinker_opt.hardware import HardwareSpec
from tinker_opt.solve.space import SearchSpace
from tinker_opt.strategy import Strategy

MODEL = moe_model(num_layers=4, hidden=1024, heads=16, experts=16, seq=2048, topk=8)
PROFILE = synthetic_profile(MODEL, tps=(1, 2), cps=(1,), eps=(1, 2, 4, 8), mbss=(1, 2))


def _block(fwd_ops: int = 0, bwd_ops: int = 0) -> BlockCost:
    """A block whose own op counts the MoE rule does not read (it counts moe_host.host_ops)."""
    return BlockCost(
        fwd_us=0.0, bwd_us=0.0, param_count=1, expert_param_count=0, input_bytes=0,
        output_bytes=0, activation_bytes=0, transient_bytes=0, selective_activation_bytes=0,
        selective_recompute_us=0.0, estimated=False, fwd_host_ops=fwd_ops, bwd_host_ops=bwd_ops,
    )  # fmt: skip


def _wait(ctx, kind: str, s: Strategy, gpu_fwd: float, gpu_bwd: float) -> float:
    return layer_host_time(ctx, kind, s, _block(), gpu_fwd, gpu_bwd).exposed_us


def _cost(host_op_us: float | None) -> CostModel:
    hardware = dataclasses.replace(HARDWARE, host_op_us=host_op_us)
    return CostModel.from_profile(PROFILE, MODEL, cluster(1, 8, 60000), 32, hardware=hardware)


def test_host_operators_grow_with_the_local_experts():
    """16 experts over ep 2 = 8 local: forward 47 + 4 x 8 = 79, backward 84 + 10 x 8 = 164;
    ep 8 = 2 local: 55 and 104."""
    ctx = _cost(20.0).context
    assert host_ops(ctx, Strategy(tp=1, pp=1, dp=8, ep=2, etp=1)) == (79, 164)
    assert host_ops(ctx, Strategy(tp=1, pp=1, dp=8, ep=8, etp=1)) == (55, 104)


def test_the_wait_is_host_time_beyond_the_gpu_time():
    """At 20 us per operator, ep 2: host 1580 us forward, 3280 us backward. Against 1000 us of
    GPU forward the layer waits 580 us; 5000 us of GPU backward hide the host's 3280 us. A dense
    layer of an MoE model counts the profile's operators (none here): no wait."""
    ctx = _cost(20.0).context
    s = Strategy(tp=1, pp=1, dp=8, ep=2, etp=1)
    host = layer_host_time(ctx, "moe", s, _block(), 1000.0, 5000.0)
    assert host.exposed_us == pytest.approx(79 * 20.0 - 1000.0)
    assert host.recompute_exposed_us == 0.0
    full = layer_host_time(ctx, "moe", s.replace(recompute="full"), _block(), 1000.0, 5000.0)
    assert full.recompute_exposed_us == pytest.approx(79 * 20.0 - 1000.0)
    assert _wait(ctx, "dense", s, 0.0, 0.0) == 0.0


def test_no_wait_where_the_host_figure_is_zero():
    """A description with `host_op_us` 0 prices no host time; one without it prices the default
    (hardware DEFAULT_HOST_OP_US: every description prices the host, issue 28)."""
    s = Strategy(tp=1, pp=1, dp=8, ep=2, etp=1)
    assert _wait(_cost(0.0).context, "moe", s, 0.0, 0.0) == 0.0
    assert _wait(_cost(None).context, "moe", s, 0.0, 0.0) > 0.0


def test_evaluate_adds_the_wait_where_the_host_is_slower():
    """A slow host (1 ms per operator) lengthens the iteration, more with more local experts, by
    its `host_ms` (the MoE wait is reported with the dense layers' host time, outside compute)."""
    s2 = Strategy(tp=1, pp=1, dp=8, ep=2, etp=1)
    s8 = Strategy(tp=1, pp=1, dp=8, ep=8, etp=1)
    fast, slow = _cost(0.0), _cost(1000.0)
    extra2 = slow.evaluate(s2).iteration_time_ms - fast.evaluate(s2).iteration_time_ms
    extra8 = slow.evaluate(s8).iteration_time_ms - fast.evaluate(s8).iteration_time_ms
    assert extra2 > extra8 > 0
    parts, base = slow.evaluate(s2).time_breakdown_ms, fast.evaluate(s2).time_breakdown_ms
    # The optimizer step's launches and host syncs (costs/step_costs.py) also take host time.
    step_ms = parts["optimizer_ms"] - base["optimizer_ms"]
    assert parts["host_ms"] == pytest.approx(extra2 - step_ms, rel=1e-6)
    assert parts["compute_ms"] == pytest.approx(base["compute_ms"], rel=1e-6)


def test_hardware_file_round_trips_host_op_us():
    """`host_op_us` is read from and written back to the description's JSON."""
    spec = dataclasses.replace(HARDWARE, host_op_us=12.5)
    assert HardwareSpec.from_dict(spec.to_dict()).host_op_us == 12.5
    assert "host_op_us" not in HARDWARE.to_dict()


def test_solvers_agree_with_the_host_wait():
    """cpsat = milp = enum = brute force with a host that binds some strategies and not others."""
    space = SearchSpace(max_mbs=2, tp=(1, 2), cp=(1,), ep=(1, 2, 4, 8))
    solvers_agree(_cost(30.0), space)  # binds ep 1-4, not ep 8
