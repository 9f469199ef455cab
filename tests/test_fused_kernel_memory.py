"""The fused kernels a launch runs (ModelSpec.fused_kernels): read from the script, and counted by
the analytic device as the fused kernels save for backward (profile/kernels.py FUSED_SAVES)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.profile_support import llama_model
from tinker_opt.profile.analytic import trace_block
from tinker_opt.profile.shape import Shape
from tinker_opt.script.reader import read_script_text
from tinker_opt.specs import ModelSpec

SEQ, HIDDEN, FFN = 32, 32, 64


def _activation_bytes(model: ModelSpec) -> int:
    return trace_block(model, "layer", Shape(tp=1, mbs=1)).memory.activation_bytes


def test_fused_rmsnorm_and_swiglu_save_less_by_the_hand_count():
    """A bf16 LLaMA layer, 32 tokens, h 32, ffn 64. Per RMSNorm the reference keeps the fp32 copy
    of its input (4 B x s x h) and the normalised bf16 tensor (2 B x s x h); the fused kernel keeps
    its bf16 input (2 B x s x h); both keep 1/rms and the GEMM input: 4 s h less per norm, two
    norms. The reference SwiGLU also keeps silu(gate) (2 B x s x ffn): the fused one keeps only its
    input, the fc1 output that both keep."""
    model = llama_model(seq=SEQ, hidden=HIDDEN, heads=4, groups=2, ffn=FFN, vocab=256)
    reference = _activation_bytes(model)
    fused = _activation_bytes(dataclasses.replace(model, fused_kernels=("rmsnorm", "swiglu")))
    assert reference - fused == 2 * 4 * SEQ * HIDDEN + 2 * SEQ * FFN  # 8192 + 4096 bytes


def test_fused_rope_saves_as_the_reference():
    """The reference rotate-half keeps only cos / sin (constants), as the fused kernels keep only
    the angles: no change in bytes."""
    model = llama_model(seq=SEQ, hidden=HIDDEN, heads=4, groups=2, ffn=FFN, vocab=256)
    assert _activation_bytes(dataclasses.replace(model, fused_kernels=("rope",))) == (
        _activation_bytes(model)
    )


def test_unknown_fused_kernel_is_refused():
    with pytest.raises(Exception, match="fused_kernels must be among"):
        dataclasses.replace(llama_model(), fused_kernels=("layernorm",))


MEGATRON = (
    "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 "
    "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --vocab-size 256 "
    "--micro-batch-size 1 --global-batch-size 8 --normalization RMSNorm --swiglu "
    "--position-embedding-type rope --bf16 {extra}\n"
)


@pytest.mark.parametrize(
    ("extra", "ops"),
    [
        ("--transformer-impl transformer_engine", ("rmsnorm", "rope", "swiglu")),
        ("--use-mcore-models", ("rmsnorm", "rope", "swiglu")),
        ("--use-mcore-models --no-rope-fusion", ("rmsnorm", "swiglu")),
        ("--use-mcore-models --no-bias-swiglu-fusion", ("rmsnorm", "rope")),
        ("--transformer-impl local", ()),
        ("", ()),
    ],
)
def test_megatron_core_runs_transformer_engine_fused_kernels(extra, ops):
    """Megatron-Core with Transformer Engine fuses RMSNorm (TE), SwiGLU (bias_swiglu_fusion) and
    rotary (apply_rope_fusion) unless the script turns them off (megatron/training/arguments.py)."""
    assert read_script_text(MEGATRON.format(extra=extra)).model.fused_kernels == ops


def test_mindspeed_flags_name_the_fused_kernels():
    """MindSpeed-LLM fuses only what its `--use-fused-*` flags ask for."""
    text = MEGATRON.format(extra="--use-fused-rmsnorm --use-fused-swiglu") + "# ASCEND\n"
    assert read_script_text(text).model.fused_kernels == ("rmsnorm", "swiglu")


def test_an_older_meta_without_fused_kernels_is_the_same_model():
    """A profile folder written before the field existed (no `fused_kernels` key) resumes for a
    model without fused kernels, and is another model's for one with them."""
    from tinker_opt.profile.runner import _same_model

    model = llama_model()
    older = {k: v for k, v in model.to_dict().items() if k != "fused_kernels"}
    assert _same_model(older, model)
    assert not _same_model(older, dataclasses.replace(model, fused_kernels=("rmsnorm",)))
