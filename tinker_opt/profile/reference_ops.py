"""The reference ops a block runs unfused (Megatron's local layers) and what the fused kernels
save for backward (FUSED_SAVES: the same math keeping only what the fused kernel keeps, for the
analytic device); `Impl` names one implementation of an op (kernels.py chooses among them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from tinker_opt.profile import cpu_on_meta


@dataclass(frozen=True)
class Impl:
    """One implementation of an op: its name as recorded in meta.json, whether it is fused, the function.

    Signatures by op: attention fn(q, k, v, causal, scale) with q [s, b, n, d], k / v [s, b, g, d]
    -> [s, b, n * dv]; rmsnorm fn(x, weight, eps); swiglu fn(x) -> silu(first half) * second half;
    rope fn(t, cos, sin, freqs) with cos / sin / freqs broadcastable to t [s, b, n, d]."""

    op: str
    name: str
    fused: bool
    fn: Callable | None = field(default=None, compare=False, repr=False)


# --- reference ops (Megatron's local, unfused layers) -----------------------------------------


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Megatron's local RMSNorm: x * rsqrt(mean(x^2) + eps) in fp32, cast back, times the weight."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return normed.type_as(x) * weight


def reference_swiglu(x: torch.Tensor) -> torch.Tensor:
    """Unfused SwiGLU: silu keeps its input, the product keeps both factors."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def reference_rope(
    t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, freqs: torch.Tensor
) -> torch.Tensor:
    """mcore's unfused rotate-half rotary: t * cos + rotate_half(t) * sin."""
    first, second = t.chunk(2, dim=-1)
    return t * cos + torch.cat((-second, first), dim=-1) * sin


def _sdpa(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    s, b, n, dv = q.shape[0], q.shape[1], q.shape[2], v.shape[-1]
    attention = cpu_on_meta.sdpa if q.device.type == "meta" else F.scaled_dot_product_attention
    out = attention(
        q.permute(1, 2, 0, 3),
        k.permute(1, 2, 0, 3),
        v.permute(1, 2, 0, 3),
        is_causal=causal,
        dropout_p=0.0,
        scale=scale,
        enable_gqa=k.shape[2] != n,
    )
    return out.permute(2, 0, 1, 3).reshape(s, b, n * dv)


def sdpa_attention(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    """torch SDPA with whichever backend torch picks (the CPU flash kernel on the CPU).

    Flash kernels regenerate the dropout mask in backward and keep no s x s tensor; torch's CPU /
    fake-tensor SDPA would take the materialising math path for dropout > 0, so the profile runs
    it without dropout: saved bytes as the fused kernel's, its elementwise dropout not timed."""
    return _sdpa(q, k, v, causal, scale)


class _SavingInputRMSNorm(torch.autograd.Function):
    """RMSNorm keeping what a fused kernel keeps for backward: its input, the weight and 1/rms per
    token (Transformer Engine's rmsnorm_fwd returns rsigma for rmsnorm_bwd; apex
    FusedRMSNormAffineFunction saves input, weight, invvar; torch_npu's npu_rms_norm returns rstd).
    The reference op keeps the fp32 copy of its input and the normalised bf16 tensor instead."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x32 = x.float()
        rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x32 * rstd).type_as(x) * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        normed = x.float() * rstd
        g = grad.float() * weight.float()
        grad_weight = (grad.float() * normed).sum(dim=tuple(range(grad.dim() - 1)))
        grad_x = rstd * (g - normed * (g * normed).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight.to(weight.dtype), None


class _SavingInputSwiGLU(torch.autograd.Function):
    """SwiGLU keeping only its input, as megatron-core's fused SwiGLUFunction does
    (megatron/core/fusions/fused_bias_swiglu.py: `ctx.save_for_backward(input)`, backward
    `swiglu_back(grad, input)`); the reference op also keeps silu(gate)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        gate, up = x.chunk(2, dim=-1)
        sig = torch.sigmoid(gate)
        return torch.cat((grad * up * sig * (1 + gate * (1 - sig)), grad * gate * sig), dim=-1)


FUSED_SAVES = {
    "rmsnorm": Impl(
        "rmsnorm",
        "fused RMSNorm (keeps input and 1/rms)",
        True,
        lambda x, w, eps: _SavingInputRMSNorm.apply(x, w, eps),
    ),
    "swiglu": Impl("swiglu", "fused SwiGLU (keeps its input)", True, _SavingInputSwiGLU.apply),
}
"""What the analytic device runs for an op the launch fuses (ModelSpec.fused_kernels): the same
math, saving for backward what the fused kernels save. Rotary embeddings need none: the
reference rotate-half already keeps only cos / sin (constants), as the fused kernels keep only
the angles."""


REFERENCE = {
    "attention": Impl("attention", "torch.sdpa", True, sdpa_attention),
    "rmsnorm": Impl("rmsnorm", "reference (unfused fp32 RMSNorm)", False, reference_rms_norm),
    "swiglu": Impl("swiglu", "reference (silu * up)", False, reference_swiglu),
    "rope": Impl("rope", "reference (rotate-half)", False, reference_rope),
    "mc2": Impl("mc2", "none (matmul and tp collective separate)", False, None),
}
