"""CostModel.evaluate: the one definition of modelled time and memory."""

from __future__ import annotations

import pytest
from model_support import cluster, dense_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.errors import ProfileDataError, StrategyError
from tinker_opt.strategy import Strategy

MODEL = dense_model(num_layers=8, hidden=1024, heads=16, seq=2048)
PROFILE = synthetic_profile(MODEL)
STAGE_KEYS = {
    "stage",
    "layers",
    "recompute_layers",
    "time_ms",
    "memory_mb",
    "compute_ms",
    "comm_ms",
    "weights_mb",
    "gradients_mb",
    "optimizer_mb",
    "activations_mb",
    "transient_mb",
    "recompute_work_mb",
}


def _model(nodes=1, per_node=8, memory_mb=60000, gbs=64, profile=PROFILE, **kwargs):
    return CostModel.from_profile(
        profile, MODEL, cluster(nodes, per_node, memory_mb), gbs, **kwargs
    )


def test_to_dict_has_the_interface_keys():
    """Evaluation.to_dict() carries exactly the documented top-level keys and the stage keys."""
    out = _model().evaluate(Strategy(tp=2, pp=2, dp=2, sp=True)).to_dict()
    assert set(out) == {
        "strategy",
        "iteration_time_ms",
        "peak_memory_mb",
        "tokens_per_s_per_device",
        "stages",
        "time_breakdown_ms",
        "fits",
        "estimated",
        "in_block_times",
        "framework_memory",
        "precision",
    }
    assert out["precision"] == {"dtype": MODEL.precision, "fp8_format": None, "fp8_recipe": None}
    assert len(out["stages"]) == 2 and all(set(stage) >= STAGE_KEYS for stage in out["stages"])


MEMORY_PARTS = (
    "weights_mb",
    "gradients_mb",
    "optimizer_mb",
    "activations_mb",
    "transient_mb",
    "recompute_work_mb",
)


@pytest.mark.parametrize(
    "strategy",
    [
        Strategy(
            tp=2,
            pp=4,
            dp=1,
            sp=True,
            recompute="full",
            recompute_num_layers=1,
            num_layer_list=(3, 2, 2, 1),
        ),
        Strategy(tp=1, pp=2, dp=4, zero=1, recompute="selective"),
        Strategy(tp=2, pp=4, dp=1, vpp=2, recompute="full", recompute_num_layers=1),
    ],
    ids=["full-uneven", "distopt-selective", "vpp-full"],
)
def test_memory_parts_add_up_to_the_stage_memory(strategy):
    """Weights, gradients, optimizer, activations, transient and recompute working set are separate
    non-negative terms whose sum is each stage's memory."""
    for stage in _model().evaluate(strategy).stages:
        assert all(getattr(stage, part) >= 0 for part in MEMORY_PARTS)
        assert sum(getattr(stage, part) for part in MEMORY_PARTS) == pytest.approx(
            stage.memory_mb, rel=1e-12
        )
        assert stage.gradients_mb > 0 and stage.weights_mb > 0 and stage.transient_mb > 0


def test_gradients_are_fp32_per_weight():
    """fp32 main gradients: 4 bytes per parameter, twice the bf16 weights' 2 bytes."""
    stage = _model().evaluate(Strategy(tp=1, pp=2, dp=4)).stages[0]
    assert stage.gradients_mb == pytest.approx(2 * stage.weights_mb, rel=1e-9)


def test_breakdown_adds_up_to_the_iteration_time():
    """Compute, recompute, comm of the slowest stage x m, bubble, sync and optimizer add up."""
    strategy = Strategy(
        tp=2,
        pp=4,
        dp=1,
        sp=True,
        recompute="full",
        recompute_num_layers=1,
        num_layer_list=(3, 2, 2, 1),
    )
    evaluation = _model().evaluate(strategy)
    assert sum(evaluation.time_breakdown_ms.values()) == pytest.approx(evaluation.iteration_time_ms)


def test_single_device_has_no_communication():
    """tp = pp = dp = cp = 1: no collective at all."""
    evaluation = _model(per_node=1).evaluate(Strategy())
    assert evaluation.stages[0].comm_ms == 0
    assert evaluation.time_breakdown_ms["dp_sync_ms"] == 0


def test_distributed_optimizer_shards_states_and_is_not_slower():
    """dist_opt divides optimizer states by dp*cp and its reduce-scatter + all-gather is no slower."""
    plain = _model().evaluate(Strategy(dp=8))
    sharded = _model().evaluate(Strategy(dp=8, zero=1))
    assert sharded.stages[0].optimizer_mb == pytest.approx(
        plain.stages[0].optimizer_mb / 8, rel=1e-6
    )
    assert sharded.iteration_time_ms <= plain.iteration_time_ms


def test_full_recompute_trades_time_for_memory():
    """Each stage recomputes min(r, n_s) layers: less activation memory, more time."""
    base = Strategy(tp=1, pp=2, dp=4, num_layer_list=(5, 3))
    plain = _model().evaluate(base)
    full = _model().evaluate(base.replace(recompute="full", recompute_num_layers=4))
    assert [s.recompute_layers for s in full.stages] == [4, 3]
    assert full.peak_memory_mb < plain.peak_memory_mb
    assert full.iteration_time_ms > plain.iteration_time_ms


def test_first_stage_holds_the_most_micro_batches():
    """1F1B: stage s holds min(pp - s, m) micro-batches, so equal stages shrink along the pipe."""
    evaluation = _model().evaluate(Strategy(pp=4, dp=2))
    activations = [stage.activations_mb for stage in evaluation.stages]
    assert activations[0] > activations[1] > activations[2]


def test_interleaving_shrinks_the_bubble():
    """vpp = 2 halves the bubble (at twice the p2p traffic)."""
    plain = _model().evaluate(Strategy(pp=4, dp=2))
    interleaved = _model().evaluate(Strategy(pp=4, dp=2, vpp=2))
    assert interleaved.time_breakdown_ms["bubble_ms"] < plain.time_breakdown_ms["bubble_ms"]


def test_tied_embeddings_put_a_copy_on_the_last_stage():
    """With pp > 1 the last stage holds the word embeddings (vocab/tp x h) besides its layers."""
    evaluation = _model().evaluate(Strategy(pp=2, dp=4))
    first, last = evaluation.stages
    words_mb = MODEL.vocab_size_for(1) * MODEL.hidden_size * 6 / 2**20  # bf16 weight + fp32 grad
    assert last.weights_mb > first.weights_mb - words_mb * 0.01
    assert last.weights_mb == pytest.approx(first.weights_mb, rel=0.05)


def test_missing_inter_node_figures_warn_and_can_be_overridden():
    """Two nodes without inter-node rows: a prominent warning; a flag silences and overrides it."""
    profile = synthetic_profile(MODEL, inter_node=False)
    warned = _model(nodes=2, per_node=4, profile=profile)
    assert any("inter-node" in w and "default" in w for w in warned.warnings)
    given = _model(nodes=2, per_node=4, profile=profile, inter_node_bandwidth_gbs=5.0)
    assert not given.warnings
    strategy = Strategy(tp=2, pp=1, dp=4, sp=True)
    assert given.evaluate(strategy).iteration_time_ms > warned.evaluate(strategy).iteration_time_ms


def test_single_node_needs_no_inter_node_figures():
    """One node never warns about inter-node figures."""
    assert not _model(profile=synthetic_profile(MODEL, inter_node=False)).warnings


def test_unprofiled_tp_names_the_profile_to_run():
    """A tp that was never profiled is a ProfileDataError naming --max-npu."""
    profile = synthetic_profile(MODEL, tps=(1, 2))
    with pytest.raises(ProfileDataError, match=r"tp=4 was not profiled.*--max-npu 4"):
        _model(profile=profile).evaluate(Strategy(tp=4, pp=1, dp=2, sp=True))


def test_unprofiled_micro_batch_is_interpolated_and_marked():
    """mbs 3 between profiled 2 and 4 is estimated; a profiled mbs is not."""
    model = _model()
    assert model.evaluate(Strategy(dp=8, mbs=2)).estimated is False
    estimated = model.evaluate(Strategy(dp=8, mbs=8))
    assert estimated.estimated is True
    assert estimated.iteration_time_ms > 0


def test_invalid_strategy_is_rejected():
    """evaluate() applies the validity rules."""
    with pytest.raises(StrategyError, match="must equal"):
        _model().evaluate(Strategy(tp=2, pp=2, dp=1))


def test_integer_objective_matches_reported_time():
    """The reported time is the integer objective (ns x vpp) divided out."""
    evaluation = _model().evaluate(
        Strategy(pp=4, dp=2, vpp=2, recompute="full", recompute_num_layers=1)
    )
    assert evaluation.iteration_time_ms == pytest.approx(
        evaluation.time_ns_x_vpp / 2 / 1e6, rel=1e-15
    )


def test_mixed_stack_costs_follow_layer_positions():
    """Dense-then-MoE stacks: a stage's cost depends on which layers it holds, not only how many."""
    from model_support import moe_model

    model = moe_model(num_layers=6, hidden=256, heads=4, seq=512, experts=4, first_dense=2)
    profile = synthetic_profile(model, tps=(1, 2), cps=(1,), eps=(1, 2), mbss=(1,))
    cost_model = CostModel.from_profile(profile, model, cluster(1, 6, 60000), 16)
    base = Strategy(tp=2, pp=3, dp=1, ep=2, etp=1, sp=True)
    moe_middle = cost_model.evaluate(base.replace(num_layer_list=(2, 2, 2))).stages[1]
    mixed_middle = cost_model.evaluate(base.replace(num_layer_list=(1, 2, 3))).stages[1]
    assert moe_middle.layers == mixed_middle.layers == 2
    assert mixed_middle.memory_mb < moe_middle.memory_mb  # a dense layer holds no experts
    assert mixed_middle.time_ms != moe_middle.time_ms
