"""Memory you can launch on: the terms the shared logs showed off, each against its source.

* fp16 training keeps Megatron's gradient buffer in fp16 (2 B) unless
  `--accumulate-allreduce-grads-in-fp32` (bf16 always accumulates in fp32);
* Megatron-LM scripts that name Transformer Engine run TE's own fused attention (no s x s
  scores) unless `--attention-backend unfused|local`, except on devices below sm80 (V100).
"""

from __future__ import annotations

import pytest

from tinker_opt.hardware import load_hardware
from tinker_opt.script.reader import read_script_text
from tinker_opt.verbs.common import model_on_device

LAUNCH = """#!/bin/bash
torchrun --nproc_per_node 4 --nnodes 1 pretrain_gpt.py \\
    --num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 \\
    --max-position-embeddings 1024 --vocab-size 50257 --micro-batch-size 4 \\
    --global-batch-size 16 --tensor-model-parallel-size 4 --sequence-parallel {extra}
"""


def _read(extra: str):
    return read_script_text(LAUNCH.format(extra=extra), "job.sh")


@pytest.mark.parametrize(
    ("extra", "dtype"),
    [
        ("--fp16", "fp16"),
        ("--fp16 --accumulate-allreduce-grads-in-fp32", "fp32"),
        ("--bf16", "fp32"),
        ("--bf16 --grad-reduce-in-bf16", "bf16"),
    ],
)
def test_gradient_buffer_dtype(extra, dtype):
    """The gradient buffer's dtype as Megatron keeps it (param_and_grad_buffer.py, arguments.py)."""
    assert _read(extra).train.optimizer_precision.main_grads == dtype


@pytest.mark.parametrize(
    ("extra", "fused"),
    [
        ("--fp16", False),
        ("--fp16 --transformer-impl transformer_engine", True),
        ("--fp16 --use-mcore-models", True),
        ("--fp16 --use-mcore-models --transformer-impl local", False),
        ("--fp16 --transformer-impl transformer_engine --attention-backend unfused", False),
        ("--fp16 --transformer-impl transformer_engine --use-legacy-models", False),
        ("--fp16 --use-flash-attn", True),
    ],
)
def test_transformer_engine_scripts_price_fused_attention(extra, fused):
    """Naming Transformer Engine (or mcore models, its default impl) prices fused attention."""
    assert _read(extra).model.use_flash_attn is fused


def test_devices_below_sm80_keep_the_scores():
    """V100 (sm70) has no TE fused attention: the scores come back; H100 keeps fused."""
    model = _read("--fp16 --transformer-impl transformer_engine").model
    v100, h100 = load_hardware("v100-32gb"), load_hardware("h100-80gb")
    assert not v100.fused_attention and h100.fused_attention
    assert not model_on_device(model, v100).use_flash_attn
    assert model_on_device(model, h100) is model
    assert type(v100).from_dict(v100.to_dict()).fused_attention is False
