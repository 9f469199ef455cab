"""Transformer Engine's cross entropy (costs/loss_terms.py): the head keeps the logits in their
own dtype, not the fp32 softmax, and the reader and the cost model both see it."""

from __future__ import annotations

import dataclasses

from model_support import HARDWARE, cluster, dense_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.loss_terms import te_loss_saving_bytes
from tinker_opt.script.reader import read_script_text
from tinker_opt.strategy import Strategy

SCRIPT = """#!/bin/bash
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\
    --num-layers 4 --hidden-size 1024 --ffn-hidden-size 4096 --num-attention-heads 16 \\
    --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 \\
    --micro-batch-size 1 --global-batch-size 16 --bf16 --cross-entropy-loss-fusion {flags}
"""
MODEL = dense_model(num_layers=2)
PROFILE = synthetic_profile(MODEL, tps=(1, 2), cps=(1, 2), mbss=(1, 2))


def test_reader_takes_te_only_with_its_impl():
    """`--cross-entropy-fusion-impl te` switches it on; the native fusion alone does not."""
    te = read_script_text(SCRIPT.format(flags="--cross-entropy-fusion-impl te"), "a.sh")
    native = read_script_text(SCRIPT.format(flags=""), "b.sh")
    assert te.model.te_cross_entropy and not native.model.te_cross_entropy


def test_saving_is_two_bytes_per_logit_by_hand():
    """seq 2048 / cp 2 x mbs 2 = 2048 tokens, vocab 32000 padded to 32000 (a multiple of 128 x 2)
    over tp 2 = 16000 logits each: 2048 x 16000 x (4 - 2) B = 65,536,000 B; none without TE."""
    te = dataclasses.replace(MODEL, te_cross_entropy=True)
    s = Strategy(tp=2, cp=2, mbs=2, dp=2)
    assert te_loss_saving_bytes(te, s, 2) == 2048 * 16000 * 2 == 65_536_000
    assert te_loss_saving_bytes(MODEL, s, 2) == 0
    assert te_loss_saving_bytes(te, s, 4) == 0  # fp32 training keeps fp32 logits either way


def test_cost_model_lowers_the_head_stage_by_the_saving():
    """The last stage's memory drops by the saving (the synthetic head keeps more than it: its
    fp32 logits); the first stage and the time do not change."""
    te = dataclasses.replace(MODEL, te_cross_entropy=True)
    s = Strategy(tp=2, pp=2, dp=2, mbs=1)

    def evaluate(model):
        cost = CostModel.from_profile(PROFILE, model, cluster(1, 8, 60000), 16, hardware=HARDWARE)
        return cost.evaluate(s)

    base, fused = evaluate(MODEL), evaluate(te)
    saving = te_loss_saving_bytes(te, s, 2)
    drop_mb = base.stages[-1].memory_mb - fused.stages[-1].memory_mb
    assert abs(drop_mb - saving / 2**20) < 0.01
    assert base.stages[0].memory_mb == fused.stages[0].memory_mb
    assert base.iteration_time_ms == fused.iteration_time_ms
