"""Multi-token prediction: its modules priced on the stage of the output layer."""

from __future__ import annotations

import dataclasses

import pytest
from model_support import cluster, moe_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.strategy import Strategy


def test_mtp_modules_cost_the_last_stage_only():
    """--mtp-num-layers 1: one more layer, norms, projection and head on the last stage."""
    base = moe_model(num_layers=4, hidden=512, heads=4, seq=256, experts=4)
    profile = synthetic_profile(base, tps=(1,), cps=(1,), eps=(1, 2), mbss=(1,))
    s = Strategy(tp=1, pp=2, dp=2, ep=2, etp=1)
    stages = {}
    for k in (0, 1):
        model = dataclasses.replace(base, mtp_num_layers=k)
        cost = CostModel.from_profile(profile, model, cluster(1, 4, 60000), 8)
        stages[k] = cost.evaluate(s).stages
    assert stages[1][0] == stages[0][0]
    assert stages[1][1].time_ms > stages[0][1].time_ms
    assert stages[1][1].weights_mb > stages[0][1].weights_mb
    # The MTP modules' activations, like the head's, are held for one micro-batch (transient).
    assert stages[1][1].transient_mb > stages[0][1].transient_mb
    assert stages[1][1].activations_mb == stages[0][1].activations_mb


def test_mtp_stage_holds_a_copy_of_the_word_embeddings():
    """Megatron-core builds the embedding on every stage with MTP modules (GPTModel:
    `pre_process or mtp_process`): an untied model's last stage holds vocab/tp x h more weights
    with MTP than the MTP modules' own; a tied one already holds that copy for its head."""
    base = moe_model(num_layers=4, hidden=512, heads=4, seq=256, experts=4)
    profile = synthetic_profile(base, tps=(1,), cps=(1,), eps=(1, 2), mbss=(1,))
    s = Strategy(tp=1, pp=2, dp=2, ep=2, etp=1)
    added = {}
    for untied in (False, True):
        weights = []
        for k in (0, 1):
            model = dataclasses.replace(
                base, mtp_num_layers=k, untie_embeddings_and_output_weights=untied
            )
            cost = CostModel.from_profile(profile, model, cluster(1, 4, 60000), 8)
            weights.append(cost.evaluate(s).stages[1].weights_mb)
        added[untied] = weights[1] - weights[0]
    copy_mb = base.vocab_size_for(1) * 512 * 2 / 2**20  # bf16 weights
    assert added[True] - added[False] == pytest.approx(copy_mb)
