"""The profile space and its out-of-memory order."""

from __future__ import annotations

import pytest

from tests.profile_support import gpt_model, llama_model, moe_model
from tinker_opt.errors import ConfigError
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.space import (
    OomFrontier,
    ProfilePoint,
    SpaceLimits,
    ep_values,
    expert_values,
    profile_space,
    tp_values,
)


def test_tp_divides_heads_groups_and_ffn():
    """tp candidates are divisors of max_npu that divide heads, groups and ffn."""
    assert tp_values(
        llama_model(heads=8, groups=2, ffn=344), SpaceLimits(max_npu=8, max_mbs=4)
    ) == [1, 2]
    assert tp_values(gpt_model(heads=8), SpaceLimits(max_npu=8, max_mbs=4)) == [1, 2, 4, 8]


def test_prof_tp_outside_the_valid_values_is_an_error():
    """A prof_tp value that does not divide the heads is a ConfigError listing the valid ones."""
    with pytest.raises(ConfigError, match=r"valid values up to max_npu are \[1, 2\]"):
        tp_values(llama_model(groups=2), SpaceLimits(max_npu=8, max_mbs=4, prof_tp=(4,)))


def test_prof_tp_above_a_node_is_profiled():
    """tp 16 on nodes of 8 (a multiple of max_npu the model allows) is kept: tensor parallelism across nodes."""
    assert tp_values(gpt_model(heads=16), SpaceLimits(max_npu=8, max_mbs=4, prof_tp=(8, 16))) == [
        8,
        16,
    ]


def test_prof_tp_that_does_not_tile_nodes_is_an_error():
    """tp 12 on nodes of 8 neither divides a node nor spans whole nodes."""
    with pytest.raises(ConfigError, match="multiple of it"):
        tp_values(gpt_model(heads=24), SpaceLimits(max_npu=8, max_mbs=4, prof_tp=(12,)))


def test_script_tp_above_max_npu_is_added_when_the_model_allows_it():
    """The script's own tp joins the divisors of max_npu; one the heads do not allow is left out."""
    assert tp_values(gpt_model(heads=16), SpaceLimits(max_npu=8, max_mbs=4, extra_tp=(16,))) == [
        1,
        2,
        4,
        8,
        16,
    ]
    assert tp_values(gpt_model(heads=8), SpaceLimits(max_npu=8, max_mbs=4, extra_tp=(16,))) == [
        1,
        2,
        4,
        8,
    ]


def test_moe_expert_tp_follows_a_tp_wider_than_a_node():
    """etp = tp stays a candidate when tp is above max_npu."""
    assert (1, 16) in expert_values(moe_model(experts=4), 16, SpaceLimits(max_npu=8, max_mbs=4))


def test_dense_space_size_and_order():
    """Every block at every (tp, sp, mbs); larger tp and sp on come first."""
    points = profile_space(gpt_model(heads=8), SpaceLimits(max_npu=4, max_mbs=2))
    shapes = {(p.shape.tp, p.shape.sp) for p in points}
    assert shapes == {(4, True), (4, False), (2, True), (2, False), (1, False)}
    assert len(points) == 5 * 2 * 4
    assert points[0].shape == Shape(tp=4, sp=True, mbs=1) and points[-1].shape == Shape(tp=1, mbs=2)


def test_moe_space_profiles_both_layer_kinds():
    """A first-k-dense MoE model profiles layer.dense at ep 1 and layer.moe over ep, with sp forced on."""
    points = profile_space(moe_model(), SpaceLimits(max_npu=2, max_mbs=1))
    moe = [p.shape for p in points if p.block == "layer.moe"]
    dense = [p.shape for p in points if p.block == "layer.dense"]
    expected = {(2, True, ep, etp) for ep in (1, 2, 4, 8) for etp in (1, 2)} | {
        (1, False, ep, 1) for ep in (1, 2, 4, 8)
    }
    assert {(s.tp, s.sp, s.ep, s.etp) for s in moe} == expected and len(moe) == len(expected)
    assert all(s.ep == 1 and s.etp == 1 for s in dense) and len(dense) == 2


def test_ep_is_not_bounded_by_the_node():
    """ep runs over every divisor of num_experts, beyond max_npu (expert groups span nodes)."""
    assert ep_values(moe_model(experts=64), SpaceLimits(max_npu=8, max_mbs=4)) == [
        64,
        32,
        16,
        8,
        4,
        2,
        1,
    ]


def test_max_ep_bounds_ep_but_keeps_the_scripts_own():
    """max_ep caps the divisors; extra_ep (the script's ep) is kept above it, if it divides num_experts."""
    limits = SpaceLimits(max_npu=8, max_mbs=4, max_ep=4, extra_ep=(16, 3))
    assert ep_values(moe_model(experts=64), limits) == [16, 4, 2, 1]


def test_etp_runs_over_one_and_tp():
    """At tp 4 a MoE layer is profiled at etp 4 and 1 for each ep, least memory (larger ep, etp) first."""
    pairs = expert_values(moe_model(experts=4), 4, SpaceLimits(max_npu=8, max_mbs=4))
    assert pairs == [(4, 4), (4, 1), (2, 4), (2, 1), (1, 4), (1, 1)]


def test_moe_space_is_least_memory_first():
    """No MoE row needs less memory than an earlier one of the same block (the OOM frontier's order)."""
    points = [
        p
        for p in profile_space(moe_model(), SpaceLimits(max_npu=2, max_mbs=2))
        if p.block == "layer.moe"
    ]
    for index, earlier in enumerate(points):
        assert not any(
            earlier.shape != p.shape and earlier.shape.needs_at_least_memory_of(p.shape)
            for p in points[index + 1 :]
        )


def test_mbs_includes_the_scripts_own():
    """The script's micro-batch size is profiled even when not a power of two."""
    points = profile_space(gpt_model(), SpaceLimits(max_npu=1, max_mbs=4, extra_mbs=(3,)))
    assert sorted({p.shape.mbs for p in points}) == [1, 2, 3, 4]


def test_context_parallel_only_when_asked():
    """cp > 1 rows appear only when asked for."""
    assert {p.shape.cp for p in profile_space(gpt_model(), SpaceLimits(max_npu=1, max_mbs=1))} == {
        1
    }
    asked = profile_space(gpt_model(), SpaceLimits(max_npu=1, max_mbs=1, prof_cp=(2,)))
    assert {p.shape.cp for p in asked} == {1, 2}


def test_oom_frontier_skips_larger_shapes_only():
    """After an OOM at (tp2, mbs4) the same block at tp1 / mbs8 is skipped, tp4 or mbs2 is not."""
    frontier = OomFrontier([ProfilePoint("layer", Shape(tp=2, mbs=4))])
    assert frontier.blocks(ProfilePoint("layer", Shape(tp=1, mbs=4)))
    assert frontier.blocks(ProfilePoint("layer", Shape(tp=2, mbs=8)))
    assert not frontier.blocks(ProfilePoint("layer", Shape(tp=4, mbs=8)))
    assert not frontier.blocks(ProfilePoint("layer", Shape(tp=1, mbs=2)))
    assert not frontier.blocks(ProfilePoint("head", Shape(tp=1, mbs=8)))
