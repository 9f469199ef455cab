"""The attention softmax of the materialised (non-flash) path: the fused kernel, or the framework's
unfused fallback where the fused kernel's shape conditions do not hold.

Megatron runs its fused causal softmax (`scaled_upper_triang_masked_softmax`, one kernel that
reads the 16-bit scores and writes the 16-bit probabilities) only when
`FusedScaleMaskSoftmax.is_kernel_available` holds (Megatron-LM
megatron/core/fusions/fused_softmax.py; megatron-core 0.16.1 as installed):

* the input is fp16 / bf16 and the fusion is on (`--masked-softmax-fusion`, the default);
* 16 < sk <= 4096 (Megatron-DeepSpeed's megatron/model/fused_softmax.py, which vTrain's measured
  runs used: sk <= 2048), sq % 4 == 0 and sk % 4 == 0;
* the attention batches b x heads/tp are a multiple of 4 and, causal, of the kernel's batches per
  block (`get_batch_per_block`, megatron/fused_kernels/scaled_masked_softmax.h: 128 threads a
  block, one warp of min(next power of two of sk, 32) threads a row, two rows a warp up to
  sk 128; so 8 for 16 < sk <= 128 and 4 above); not causal, sq a multiple of it.

Otherwise `forward_torch_softmax` runs eager torch ops: the scores cast to fp32, times the scale
(`apply_query_key_layer_scaling`, Megatron-DeepSpeed's fp16 default; the layer number in the
real run, the reference's scale here), the mask filled in place (`attention_mask_func`:
`masked_fill_(mask, -10000.0)`), `torch.nn.Softmax` in fp32, cast back to 16 bits: five kernels
over the b x np x s x s scores, each reading and writing them (fp32 in between), and autograd's
backward of each (softmax's saves its fp32 output). `UnfusedScaleMaskSoftmax` runs those ops
under `op_trace.unfused_kernels()`, so the analytic device times each as its own kernel and the
host rule counts each as an operator (costs/fixed_costs.py). With 16 heads, tp 8 and a
micro-batch of 1 (2 attention batches), vTrain's single-node runs take this path.
"""

from __future__ import annotations

import torch

from tinker_opt.profile.op_trace import unfused_kernels

FUSED_MAX_SK = 4096
"""Megatron-Core's `is_kernel_available` bound on the key length (16 < sk <= 4096)."""
THREADS_PER_BLOCK = 128
WARP_SIZE = 32
MASK_FILL = -10000.0
"""Megatron's `attention_mask_func` fill value."""


def batch_per_block(sk: int) -> int:
    """The fused kernel's rows per thread block (scaled_masked_softmax.h get_batch_per_block)."""
    next_power_of_two = 1 << max(sk - 1, 0).bit_length()
    warp = min(next_power_of_two, WARP_SIZE)
    return (THREADS_PER_BLOCK // warp) * (2 if next_power_of_two <= 128 else 1)


def fused_softmax_available(
    attn_batches: int, sq: int, sk: int, dtype: torch.dtype, causal: bool
) -> bool:
    """Megatron's `FusedScaleMaskSoftmax.is_kernel_available` (module docstring)."""
    if dtype not in (torch.float16, torch.bfloat16):
        return False
    if not (16 < sk <= FUSED_MAX_SK and sq % 4 == 0 and sk % 4 == 0 and attn_batches % 4 == 0):
        return False
    per_block = batch_per_block(sk)
    return attn_batches % per_block == 0 if causal else sq % per_block == 0


def causal_mask(logits: torch.Tensor) -> torch.Tensor:
    """The upper-triangular (future) positions of [.., sq, sk] scores, True where masked."""
    q_len, k_len = logits.shape[-2], logits.shape[-1]
    return torch.ones(q_len, k_len, dtype=torch.bool, device=logits.device).triu_(1 + k_len - q_len)


class UnfusedScaleMaskSoftmax(torch.autograd.Function):
    """Megatron's unfused softmax path (module docstring): fp32 cast, scale, in-place mask,
    softmax, cast back, each its own kernel; saves the fp32 probabilities as `torch.softmax`'s
    autograd node does (the mask is the batch's shared attention mask, not saved per layer)."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, scale: float, causal: bool):
        with unfused_kernels():
            logits = scores.float()
            if scale != 1.0:
                logits = logits * scale
            if causal:
                logits.masked_fill_(causal_mask(logits), MASK_FILL)
            probs = torch.softmax(logits, dim=-1)
            out = probs.to(scores.dtype)
        ctx.save_for_backward(probs)
        ctx.scale, ctx.causal, ctx.dtype = scale, causal, scores.dtype
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (probs,) = ctx.saved_tensors
        with unfused_kernels():
            grad = torch.ops.aten._softmax_backward_data(grad.float(), probs, -1, torch.float32)
            if ctx.causal:
                grad = grad.masked_fill(causal_mask(grad), 0.0)
            if ctx.scale != 1.0:
                grad = grad * ctx.scale
            grad = grad.to(ctx.dtype)
        return grad, None, None
