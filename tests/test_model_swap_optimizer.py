"""Swap optimizer in the cost model: one chunk of the states on the device, both host copies in
the tail, only with the distributed optimizer; the solvers still agree."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from model_support import HARDWARE, cluster, dense_model, moe_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.job import JobOptions
from tinker_opt.errors import ConfigError, InfeasibleError
from tinker_opt.hardware import DEFAULT_HOST_LINK_GBS, HardwareSpec
from tinker_opt.solve.enumerate import brute_force
from tinker_opt.solve.search import _outers, search
from tinker_opt.solve.space import SearchSpace
from tinker_opt.strategy import Strategy

MODEL = moe_model(num_layers=4, hidden=512, heads=4, seq=512, experts=4, first_dense=1)
PROFILE = synthetic_profile(MODEL, tps=(1, 2), cps=(1,), eps=(1, 2), mbss=(1, 2))
OUTER = Strategy(tp=2, pp=2, dp=2, ep=2, sp=True, zero=1)


def cost_model(
    swap: int | None,
    memory_mb: float = 60000,
    model=MODEL,
    profile=PROFILE,
    per_node=8,
    hardware=HARDWARE,
) -> CostModel:
    return CostModel.from_profile(
        profile,
        model,
        cluster(1, per_node, memory_mb),
        16,
        hardware=hardware,
        job=JobOptions(swap_optimizer_times=swap),
    )


def test_device_holds_one_chunk_of_the_states():
    """With 16 chunks the per-layer optimizer bytes are the ceiling of 1/16 of the unswapped."""
    plain, swapped = (cost_model(t).coefficients(OUTER) for t in (None, 16))
    assert np.array_equal(swapped.layer_optimizer_bytes, np.ceil(plain.layer_optimizer_bytes / 16))
    assert swapped.layer_optimizer_bytes.sum() < plain.layer_optimizer_bytes.sum()
    static_drop = plain.layer_static_bytes - swapped.layer_static_bytes
    assert np.array_equal(static_drop, plain.layer_optimizer_bytes - swapped.layer_optimizer_bytes)


def test_tail_pays_both_host_copies():
    """The step tail grows by 2 x local state bytes / host link, and the gradient sync does not."""
    plain, swapped = (cost_model(t).coefficients(OUTER) for t in (None, 16))
    assert np.array_equal(plain.layer_tail_sync_ns, swapped.layer_tail_sync_ns)
    # dense layer 0: all params local / (dp*cp) = 1/2, 12 B each, both directions, 25 GB/s = 25e3 B/us
    params = int(
        PROFILE.blocks.query("block == 'layer.dense' and tp == 2 and sp == 1 and mbs == 1")[
            "param_count"
        ].iloc[0]
    )
    expected_us = 2 * (params / 2) * 12 / (DEFAULT_HOST_LINK_GBS * 1e3)
    assert swapped.layer_tail_ns[0] - plain.layer_tail_ns[0] == pytest.approx(
        expected_us * 1e3, abs=1
    )


def test_faster_host_link_shrinks_the_tail():
    """A hardware host_link_gbs of 100 costs less tail than the 25 GB/s default."""
    fast = dataclasses.replace(HARDWARE, host_link_gbs=100.0)
    slow_tail = cost_model(16).coefficients(OUTER).layer_tail_ns.sum()
    fast_tail = cost_model(16, hardware=fast).coefficients(OUTER).layer_tail_ns.sum()
    assert fast_tail < slow_tail


def test_without_distributed_optimizer_nothing_is_swapped():
    """MindSpeed's swap optimizer needs dist_opt: plain-optimizer coefficients are unchanged."""
    outer = OUTER.replace(zero=0)
    plain, swapped = (cost_model(t).coefficients(outer) for t in (None, 16))
    assert np.array_equal(plain.layer_optimizer_bytes, swapped.layer_optimizer_bytes)
    assert np.array_equal(plain.layer_tail_ns, swapped.layer_tail_ns)


def test_swapping_makes_a_tight_budget_feasible():
    """A budget between the swapped and unswapped needs of the leanest strategy fits only swapped."""
    model = dense_model(num_layers=4, hidden=1024, heads=8, seq=256)
    profile = synthetic_profile(model, tps=(1,), cps=(1,), eps=(1,), mbss=(1,))
    space = SearchSpace(max_mbs=1, tp=(1,), cp=(1,), ep=(1,), allow_vpp=False)
    lean = Strategy(
        tp=1,
        pp=1,
        dp=2,
        zero=1,
        recompute="full",
        recompute_method="block",
        recompute_num_layers=4,
    )
    need_plain, need_swapped = (
        cost_model(t, 60000, model, profile, 2).evaluate(lean).peak_memory_mb for t in (None, 16)
    )
    limit = (need_plain + need_swapped) / 2
    with pytest.raises(InfeasibleError):
        search(cost_model(None, limit, model, profile, 2), solver="enum", space=space, cpus=1)
    found = search(cost_model(16, limit, model, profile, 2), solver="enum", space=space, cpus=1)
    assert found.top[0].strategy.dist_opt and found.top[0].peak_memory_mb <= limit


@pytest.mark.parametrize("memory_mb", [150, 400, 1500])
def test_solvers_agree_with_swapping(memory_mb):
    """cpsat, milp and enum reach the brute-force optimum with the swap optimizer on."""
    model = moe_model(num_layers=5, hidden=256, heads=4, seq=256, experts=4, first_dense=1)
    profile = synthetic_profile(model, tps=(1, 2), cps=(1, 2), eps=(1, 2), mbss=(1, 2))
    cm = CostModel.from_profile(
        profile, model, cluster(2, 2, memory_mb), 8, job=JobOptions(swap_optimizer_times=4)
    )
    space = SearchSpace(max_mbs=2, tp=(1, 2), cp=(1, 2), ep=(1, 2))
    brute = brute_force(cm, _outers(cm, space))
    assert brute, "the case should have a feasible strategy"
    for solver in ("cpsat", "milp", "enum"):
        result = search(cm, solver=solver, cpus=1, top_k=2, space=space, time_limit_s=30)
        assert result.objective_ms == pytest.approx(brute[0].time_ns / 1e6, rel=1e-12), solver
        assert cm.evaluate(result.top[0].strategy).time_ns_x_vpp == result.top[0].time_ns_x_vpp


def test_hardware_host_link_default_and_override():
    """host_link_gbs is optional (25 GB/s), read from a file, and must be positive."""
    data = HARDWARE.to_dict()
    data.pop("host_link_gbs")
    assert HardwareSpec.from_dict(data).host_link_gbs == DEFAULT_HOST_LINK_GBS
    assert HardwareSpec.from_dict({**data, "host_link_gbs": 50}).host_link_gbs == 50.0
    with pytest.raises(ConfigError, match="host_link_gbs"):
        HardwareSpec.from_dict({**data, "host_link_gbs": 0})
