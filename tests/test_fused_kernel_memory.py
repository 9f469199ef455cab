"""The fused kernels a launch runs (ModelSpec.fused_kernels): read from the script, and counted by
the analytic device as the fused kernels save for backward (profile/kernels.py FUSED_SAVES)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.profile_support import llama_model
from tinker_opt.profile.accounting import LiveBytesTracker
from tinker_opt.profile.analytic import trace_block
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.tp_emulation import FusedScaleMaskSoftmax
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


def _softmax_reference(scores: torch.Tensor, scale: float) -> torch.Tensor:
    upper = torch.ones(scores.shape[-2:], dtype=torch.bool).triu_(1)
    return torch.softmax((scores.double() * scale).masked_fill(upper, float("-inf")), dim=-1)


def test_fused_softmax_computes_the_causal_softmax_and_its_gradient():
    """FusedScaleMaskSoftmax (in place, as the fused kernel) against autograd's causal softmax."""
    torch.manual_seed(0)
    scores = torch.randn(3, 16, 16, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(3, 16, 16, dtype=torch.float64)
    reference = _softmax_reference(scores, 0.3)
    (expected,) = torch.autograd.grad(reference, scores, grad)
    probs = FusedScaleMaskSoftmax.apply(scores * 1, 0.3, True)  # the bmm's output, dead after
    (got,) = torch.autograd.grad(probs, scores, grad.clone())
    torch.testing.assert_close(probs, reference)
    torch.testing.assert_close(got, expected)


def test_fused_softmax_holds_what_the_fused_kernel_holds():
    """Forward and backward of the causal softmax on 16-bit scores hold the scores, the new 16-bit
    output and the incoming gradient (plus the s x s bool mask): the fused kernel keeps its fp32
    math in registers and writes the input gradient over the output gradient. The fp32 form held
    5 more score-sized tensors (fp32 logits and softmax, 16-bit temporaries in the backward)."""
    scores = torch.randn(8, 64, 64, dtype=torch.bfloat16, requires_grad=True)
    size = scores.numel() * scores.element_size()
    with LiveBytesTracker() as tracker:
        probs = FusedScaleMaskSoftmax.apply(scores * 1, 0.125, True)
        probs.backward(torch.ones_like(probs))
    assert tracker.peak_bytes <= 3 * size + 64 * 64 + 8 * 64 * 4  # + mask + row sums


def test_loss_backward_works_in_the_saved_softmax():
    """Megatron-Core's VocabParallelCrossEntropy.backward writes the logits' gradient into the
    saved fp32 softmax (`grad_input = softmax`, prepare_gradient_calculation_operands): above what
    the head saves, its peak holds the bf16 logits (forward) or their bf16 gradient, not a second
    fp32 copy of the logits. Head of a bf16 model, 32 tokens x vocabulary 256, h 32."""
    model = llama_model(seq=SEQ, hidden=HIDDEN, heads=4, groups=2, ffn=FFN, vocab=256)
    memory = trace_block(model, "head", Shape(tp=1, mbs=1)).memory
    logits = SEQ * 256
    assert memory.activation_bytes >= 4 * logits  # the fp32 softmax
    assert logits < memory.transient_bytes < 4 * logits  # about the bf16 logits (2 B each)
