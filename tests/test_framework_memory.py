"""Framework memory (costs/framework_memory.py): the terms, their place in evaluate, the default budget."""

from __future__ import annotations

import dataclasses

import pytest
from model_support import cluster, dense_model, synthetic_profile

from tinker_opt import config
from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.framework_memory import (
    COMM_BUFFER_MB,
    CONTEXT_MB,
    TINKER_DEFAULT_LIMIT_MB,
    first_iteration_peak_mb,
    framework_memory,
    launch_budget_mb,
)
from tinker_opt.strategy import Strategy
from tinker_opt.verbs.common import memory_limit_for

MODEL = dense_model()
PROFILE = synthetic_profile(MODEL)


def _evaluate(strategy: Strategy, accelerator: str = "cuda"):
    context = CostModel.from_profile(PROFILE, MODEL, cluster(1, 8, 60000), 64).context
    rates = dataclasses.replace(context.rates, accelerator=accelerator)
    return CostModel(dataclasses.replace(context, rates=rates)).evaluate(strategy)


def test_stages_carry_allocated_reserved_and_device_peaks():
    """Each stage: allocated = modelled (the head's fp32 logits are in it), reserved > allocated,
    device > reserved."""
    evaluation = _evaluate(Strategy(tp=2, pp=2, dp=2, sp=True))
    assert all(stage.allocated_mb == stage.memory_mb for stage in evaluation.stages)
    assert "fp32_logits_mb" not in evaluation.framework_memory
    for stage in evaluation.stages:
        assert stage.memory_mb <= stage.allocated_mb < stage.reserved_mb < stage.device_mb
    summary = evaluation.framework_memory
    assert summary["peak_allocated_mb"] == max(s.allocated_mb for s in evaluation.stages)
    assert summary["num_communicators"] == 4  # world, tp, dp, pp


def test_comm_buffers_follow_the_groups_and_the_library():
    """One buffer set per group of more than one rank plus the world; HCCL's 2 x 200 MB on NPUs."""
    alone = framework_memory(Strategy(tp=1, pp=1, dp=8), "npu")
    spread = framework_memory(Strategy(tp=2, pp=2, dp=2, sp=True), "npu")
    assert alone.num_communicators == 2 and spread.num_communicators == 4
    assert spread.comm_buffers_mb == pytest.approx(4 * 2 * 200e6 / 2**20)
    assert framework_memory(Strategy(dp=8), "cuda").context_mb == CONTEXT_MB["cuda"]


def test_first_iteration_peak_leaves_out_the_adam_moments():
    """After iteration 1 the peak is the larger of forward/backward without the moments and the step."""
    stage = _evaluate(Strategy(dp=8)).stages[0]
    stage = dataclasses.replace(stage, weights_mb=100.0, gradients_mb=200.0, optimizer_mb=600.0)
    # 12 B of state per parameter, 8 B of them the moments: 400 MB not there before the step.
    assert first_iteration_peak_mb(stage, 1500.0, 12.0) == 1100.0
    assert first_iteration_peak_mb(stage, 1000.0, 12.0) == 900.0  # the step is the peak


def test_default_memory_limit_is_the_device_less_the_framework():
    """No --memory-limit: the description's memory less context, buffers and reserve."""
    settings = config.resolve("search", {"hardware": "910b"}, {})
    limit, note = memory_limit_for(settings, PROFILE)
    expected = (64 * 1024 - CONTEXT_MB["npu"] - 6 * COMM_BUFFER_MB["npu"] - 20) / 1.01
    assert launch_budget_mb(64 * 1024, "npu") == pytest.approx(expected)
    assert limit == int(expected)
    assert "64 GB" in note


def test_explicit_memory_limit_and_the_fallback():
    """An explicit --memory-limit is kept as given; no device memory anywhere: Tinker's 57000."""
    explicit = config.resolve("search", {"memory_limit": 400}, {})
    assert memory_limit_for(explicit, PROFILE) == (400, None)
    bare = dataclasses.replace(PROFILE, meta=dataclasses.replace(PROFILE.meta, hardware=None))
    limit, note = memory_limit_for(config.resolve("search", {}, {}), bare)
    assert limit == TINKER_DEFAULT_LIMIT_MB and "--memory-limit" in note


@pytest.mark.parametrize("accelerator", ["cuda", "npu"])
def test_what_fits_the_budget_fits_the_device(accelerator):
    """One definition of what fits: a stage at the default budget (the modelled memory `fits`
    compares) has a device peak within the device's memory, with every group a rank can have."""
    device_mb = 80 * 1024
    budget = launch_budget_mb(device_mb, accelerator)
    fm = framework_memory(Strategy(tp=2, pp=2, dp=2, cp=1, ep=1), accelerator)
    reserved = fm.reserved_mb(budget)
    assert fm.device_mb(reserved) <= device_mb
    worst = reserved + CONTEXT_MB[accelerator] + 6 * COMM_BUFFER_MB[accelerator]
    assert worst == pytest.approx(device_mb)


@pytest.mark.parametrize("vpp", [1, 2])
def test_head_activations_are_held_for_one_micro_batch(vpp):
    """The final norm's and head's activations (the loss's fp32 softmax) count once on the
    last stage, not once per in-flight chunk micro-batch: 1F1B holds one there anyway, the
    interleaved schedule runs the last chunk's backward right after its forward."""
    cost_model = CostModel.from_profile(PROFILE, MODEL, cluster(1, 8, 60000), 64)
    s = Strategy(tp=2, pp=2, dp=2, sp=True, vpp=vpp)
    c = cost_model.coefficients(s)
    head = cost_model.blocks.cost("head", tp=2, sp=True, cp=1, ep=1, etp=1, mbs=1)
    norm = cost_model.blocks.cost("final_norm", tp=2, sp=True, cp=1, ep=1, etp=1, mbs=1)
    assert c.stage_act_bytes[1] == 0
    held = head.activation_bytes + norm.activation_bytes
    assert c.stage_transient_bytes[1] - c.stage_transient_bytes[0] >= held > 0
    assert c.stage_inflight_x_v[1] == (1 if vpp == 1 else 2 * 0 + (vpp - 1) * 2 + 1)
