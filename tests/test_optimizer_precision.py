"""Megatron's precision-aware optimizer: the dtypes read from the script and the gradient and
optimizer-state bytes they give in the cost model."""

from __future__ import annotations

import numpy as np
import pytest
from model_support import HARDWARE, cluster, dense_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.job import JobOptions
from tinker_opt.errors import ConfigError, ScriptError
from tinker_opt.optimizer_precision import OptimizerPrecision
from tinker_opt.script.reader import read_script_text
from tinker_opt.strategy import Strategy

SCRIPT = """#!/bin/bash
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\
    --num-layers 4 --hidden-size 1024 --ffn-hidden-size 4096 --num-attention-heads 16 \\
    --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 \\
    --micro-batch-size 1 --global-batch-size 16 --use-distributed-optimizer --bf16 {flags}
"""
BF16_STATES = (
    "--use-precision-aware-optimizer --main-grads-dtype bf16 --exp-avg-dtype bf16 "
    "--exp-avg-sq-dtype bf16"
)
MODEL = dense_model(num_layers=2)
PROFILE = synthetic_profile(MODEL, tps=(1,), cps=(1,), mbss=(1,))


def test_reader_takes_the_dtypes_only_with_the_switch():
    """The dtypes apply with --use-precision-aware-optimizer (the DeepSeek-V3 recipe's bf16
    moments; bf16 training keeps the fp32 master as 16-bit remainders, 2 + 2 + 2 B); without the
    switch they stay fp32, as in Megatron."""
    tuned = read_script_text(SCRIPT.format(flags=BF16_STATES), "a.sh").train.optimizer_precision
    assert tuned == OptimizerPrecision(
        main_grads="bf16", exp_avg="bf16", exp_avg_sq="bf16", param_remainders=True
    )
    assert (tuned.grad_bytes, tuned.state_bytes) == (2, 6)
    ignored = BF16_STATES.replace("--use-precision-aware-optimizer ", "")
    plain = read_script_text(SCRIPT.format(flags=ignored), "b.sh").train.optimizer_precision
    assert (plain.grad_bytes, plain.state_bytes) == (4, 12)
    reduce = read_script_text(SCRIPT.format(flags="--grad-reduce-in-bf16"), "d.sh").train
    assert (reduce.optimizer_precision.grad_bytes, reduce.optimizer_precision.state_bytes) == (
        2,
        12,
    )


def test_unknown_dtype_is_a_one_line_script_error():
    """A dtype outside fp32 / fp16 / bf16 / fp8 is a ScriptError naming it."""
    flags = "--use-precision-aware-optimizer --exp-avg-dtype int4"
    with pytest.raises(ScriptError, match="int4"):
        read_script_text(SCRIPT.format(flags=flags), "c.sh")
    with pytest.raises(ConfigError):
        OptimizerPrecision(main_params="tf32")


def _coefficients(precision: OptimizerPrecision):
    cost = CostModel.from_profile(
        PROFILE,
        MODEL,
        cluster(1, 8, 60000),
        8,
        hardware=HARDWARE,
        job=JobOptions(optimizer_precision=precision),
    )
    return cost.coefficients(Strategy(tp=1, pp=1, dp=8, zero=1))


def test_bf16_states_and_gradients_shrink_memory_and_the_reduce():
    """bf16 moments: 8 of 12 optimizer bytes per parameter (sharded alike); bf16 main gradients:
    half the gradient buffer and half the reduce-scatter bytes."""
    fp32, bf16 = (
        _coefficients(OptimizerPrecision()),
        _coefficients(OptimizerPrecision(main_grads="bf16", exp_avg="bf16", exp_avg_sq="bf16")),
    )
    assert np.allclose(bf16.layer_optimizer_bytes, fp32.layer_optimizer_bytes * 8 / 12, atol=1)
    assert np.array_equal(bf16.layer_grad_bytes * 2, fp32.layer_grad_bytes)
    assert (bf16.layer_tail_ns < fp32.layer_tail_ns).all()


@pytest.mark.parametrize(
    ("flags", "state_bytes"),
    [
        ("--use-precision-aware-optimizer", 2 + 4 + 4),
        ("--use-precision-aware-optimizer --no-store-param-remainders", 4 + 4 + 4),
        ("--use-precision-aware-optimizer --main-params-dtype fp16", 2 + 4 + 4),
        ("--use-precision-aware-optimizer --fp8-format hybrid --fp8-recipe delayed", 2 + 4 + 4),
        ("--use-precision-aware-optimizer --fp8-format hybrid --fp8-recipe tensorwise", 4 + 4 + 4),
    ],
)
def test_master_weights_kept_as_remainders(flags, state_bytes):
    """Megatron-Core's store_param_remainders (default on): with bf16 training, fp32 main params
    and no FP8 or delayed-scaling FP8 the master weight is its 16-bit remainder (2 B) beside the
    bf16 weight (optimizer_config.py use_precision_aware_optimizer_no_fp8_or_ds_fp8;
    distrib_optimizer.py int16 master_param); `--no-store-param-remainders` and current-scaling
    FP8 keep 4 B."""
    info = read_script_text(SCRIPT.format(flags=flags), "r.sh")
    assert info.train.optimizer_precision.state_bytes == state_bytes
