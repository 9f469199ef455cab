"""The modules of the reference sub-graphs: one tensor-parallel rank of a Megatron-style network.

Activations use Megatron's [sequence, batch, hidden] layout. Each module mirrors the per-rank
math and the saved-for-backward tensors of Megatron-LM's local (non-Transformer-Engine) layers:
LayerNorm (saves its input) or Megatron's unfused RMSNorm (fp32 input and normalised output),
column / row parallel linears, learned or rotary positions, attention with materialised scores
(GPT) or flash / scaled-dot-product attention, GeLU or SwiGLU MLPs, 1-byte dropout masks. The
collectives are emulated by shape only (`tp_emulation`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tinker_opt.profile.kernels import REFERENCE
from tinker_opt.profile.softmax import UnfusedScaleMaskSoftmax, fused_softmax_available
from tinker_opt.profile.tp_emulation import (
    CheckpointCore,
    FusedScaleMaskSoftmax,
    GatherLinear,
    RingAttentionSaves,
    ScatterToSequence,
)


def new_weight(*size: int, device, dtype) -> nn.Parameter:
    """A parameter with Megatron's default init (normal, std 0.02); a meta tensor (the analytic
    device) has no data to fill, and its `normal_` is a Python meta kernel, so it is skipped."""
    weight = torch.empty(*size, device=device, dtype=dtype)
    if weight.device.type != "meta":
        weight.normal_(0.0, 0.02)
    return nn.Parameter(weight)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Dropout keeping a 1-byte mask (torch.native_dropout), as the fused device kernels do."""
    if p <= 0.0 or not training:
        return x
    return torch.native_dropout(x, p, True)[0]


class LayerNorm(nn.Module):
    """LayerNorm over the hidden dimension (saves its input, mean and rstd)."""

    def __init__(self, hidden: int, *, device, dtype, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(hidden, device=device, dtype=dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """RMSNorm: Megatron's local one (x * rsqrt(mean(x^2) + eps) in fp32, cast back, times the
    weight) or the device's fused kernel (`kernels.install_kernels`)."""

    kernel_op = "rmsnorm"

    def __init__(self, hidden: int, *, device, dtype, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden, device=device, dtype=dtype))
        self.eps = eps
        self.kernel = REFERENCE["rmsnorm"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel.fn(x, self.weight, self.eps)


def make_norm(kind: str, hidden: int, *, device, dtype) -> nn.Module:
    return (
        RMSNorm(hidden, device=device, dtype=dtype)
        if kind == "RMSNorm"
        else LayerNorm(hidden, device=device, dtype=dtype)
    )


class ColumnParallelLinear(nn.Module):
    """Output-sharded linear; under sequence parallel its input is the s/t shard (gathered inside)."""

    def __init__(
        self, in_features: int, out_local: int, *, bias: bool, gather: int, device, dtype
    ) -> None:
        super().__init__()
        self.weight = new_weight(out_local, in_features, device=device, dtype=dtype)
        self.bias = (
            nn.Parameter(torch.zeros(out_local, device=device, dtype=dtype)) if bias else None
        )
        self.gather = gather

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gather > 1:
            return GatherLinear.apply(x, self.weight, self.bias, self.gather)
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Input-sharded linear; its partial sums are reduce-scattered under sequence parallel.

    Returns the output without the bias; the bias is added by the caller's bias-dropout-add, as
    Megatron does (`skip_bias_add`)."""

    def __init__(
        self, in_local: int, out_features: int, *, bias: bool, scatter: int, device, dtype
    ) -> None:
        super().__init__()
        self.weight = new_weight(out_features, in_local, device=device, dtype=dtype)
        self.bias = (
            nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype)) if bias else None
        )
        self.scatter = scatter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight)
        return ScatterToSequence.apply(out, self.scatter) if self.scatter > 1 else out


def bias_dropout_add(
    x: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, p: float
) -> torch.Tensor:
    """residual + dropout(x + bias): Megatron's fused bias-dropout-add (saves only the mask)."""
    if bias is not None:
        x = x + bias
    return residual + dropout(x, p)


class RotaryEmbedding(nn.Module):
    """Rotary positions (mcore's unfused rotate-half form, or the device's fused kernel); cos / sin
    (and the angles, which the CUDA fused kernels take) are constant buffers."""

    kernel_op = "rope"

    def __init__(self, seq: int, head_dim: int, *, device, dtype, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / base ** (
            torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
        )
        freqs = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)  # [s, d]
        self.register_buffer("cos", emb.cos().to(dtype), persistent=False)
        self.register_buffer("sin", emb.sin().to(dtype), persistent=False)
        self.register_buffer("freqs", emb, persistent=False)
        self.kernel = REFERENCE["rope"]

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """t: [s, b, ..., d]; t * cos + rotate_half(t) * sin (the products keep only cos / sin)."""
        shape = (t.shape[0],) + (1,) * (t.dim() - 2) + (t.shape[-1],)
        return self.kernel.fn(t, self.cos.view(shape), self.sin.view(shape), self.freqs.view(shape))


def materialised_attention(q, k, v, *, scale: float, causal: bool, p: float) -> torch.Tensor:
    """Megatron's core attention with the scores in memory. q: [sq, b*np, d], k / v: [sk, b*np, d].

    Saves q, k (views of the QKV output), the softmax output, the dropout mask, the dropped
    probabilities and v: 5 a s^2 b bytes of scores in 16-bit (Korthikanti et al.). The softmax
    is Megatron's fused kernel where its shape conditions hold, else its unfused fp32 path
    (profile/softmax.py), which keeps the fp32 probabilities instead."""
    scores = torch.bmm(q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2))  # [b*np, sq, sk]
    fused = fused_softmax_available(q.shape[1], q.shape[0], k.shape[0], q.dtype, causal)
    softmax = FusedScaleMaskSoftmax if fused else UnfusedScaleMaskSoftmax
    probs = dropout(softmax.apply(scores, scale, causal), p)
    return torch.bmm(probs, v.transpose(0, 1))  # [b*np, sq, d]


class Attention(nn.Module):
    """Self-attention of one tensor-parallel rank (heads / tp, groups / tp); s is seq / cp."""

    def __init__(self, dims, model, *, gather: int, cp: int, device, dtype) -> None:
        super().__init__()
        self.heads, self.groups, self.head_dim = dims.heads, dims.groups, dims.head_dim
        width = self.groups * (self.heads // self.groups + 2) * self.head_dim
        self.qkv = ColumnParallelLinear(
            dims.hidden,
            width,
            bias=model.add_bias_linear,
            gather=gather,
            device=device,
            dtype=dtype,
        )
        self.proj = RowParallelLinear(
            self.heads * self.head_dim,
            dims.hidden,
            bias=model.add_bias_linear,
            scatter=gather,
            device=device,
            dtype=dtype,
        )
        self.rotary = (
            RotaryEmbedding(dims.seq, self.head_dim, device=device, dtype=dtype)
            if model.position_embedding_type == "rope"
            else None
        )
        self.flash = model.use_flash_attn
        self.attention_dropout = model.attention_dropout
        self.cp = cp
        self.softmax_scale = 1.0 / math.sqrt(self.head_dim)
        self.recompute_core = False
        """Megatron's selective recompute: the core attention is recomputed in backward."""

    kernel = REFERENCE["attention"]
    """The flash kernel (a class default, so subclasses such as LatentAttention have it too)."""

    @property
    def kernel_op(self) -> str | None:
        """Flash attention dispatches to the device's fused kernel; the materialised path does not."""
        return "attention" if self.flash else None

    def split_qkv(self, x: torch.Tensor):
        """QKV projection split as mcore does: q [s, b, np, d]; k, v [s, b, ng, d] (views when possible)."""
        per_group = self.heads // self.groups
        mixed = self.qkv(x)
        s, b = mixed.shape[0], mixed.shape[1]
        mixed = mixed.view(s, b, self.groups, (per_group + 2) * self.head_dim)
        q, k, v = mixed.split([per_group * self.head_dim, self.head_dim, self.head_dim], dim=-1)
        q = q.reshape(s, b, self.heads, self.head_dim)  # a view for MHA, a copy for GQA (as mcore)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        return q, k, v

    def core(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
    ) -> torch.Tensor:
        """Core attention: q [s, b, np, d], k [s, b, np|ng, d], v [s, b, np|ng, dv] in, [s, b, np * dv] out."""
        s, b, dv = q.shape[0], q.shape[1], v.shape[-1]
        if self.flash:  # the device's flash kernel (kernels.py: no s x s tensor, dropout not timed)
            return self.kernel.fn(q, k, v, causal, self.softmax_scale)
        if k.shape[2] != self.heads:  # legacy Megatron repeats the kv groups for the bmm path
            k = k.repeat_interleave(self.heads // k.shape[2], dim=2)
            v = v.repeat_interleave(self.heads // v.shape[2], dim=2)
        ctx = materialised_attention(
            q.reshape(s, b * self.heads, q.shape[-1]),
            k.reshape(k.shape[0], b * self.heads, k.shape[-1]),
            v.reshape(v.shape[0], b * self.heads, dv),
            scale=self.softmax_scale,
            causal=causal,
            p=self.attention_dropout,
        )
        return ctx.view(b, self.heads, s, dv).permute(2, 0, 1, 3).contiguous().view(s, b, -1)

    def run_core(self, q, k, v, causal: bool = True) -> torch.Tensor:
        if self.recompute_core:
            return CheckpointCore.apply(lambda *t: self.core(*t, causal=causal), q, k, v)
        return self.core(q, k, v, causal=causal)

    def ring_core(self, q, k, v) -> torch.Tensor:
        """Context parallel (load-balanced ring): a causal step on the local chunk, then cp - 1 steps
        against half a chunk each: s^2 / (2 cp) score pairs per rank, as Megatron's ring attention.
        Selective recompute checkpoints the whole ring (TE's DotProductAttention under Megatron's
        `_checkpointed_attention_forward`); with flash kernels the ring keeps what TE's ring
        keeps (tp_emulation.RingAttentionSaves), the materialised path each step's scores."""
        if self.recompute_core:
            return CheckpointCore.apply(self._ring_steps, q, k, v)
        if self.flash:
            return RingAttentionSaves.apply(self._ring_steps, q, k, v)
        return self._ring_steps(q, k, v)

    def _ring_steps(self, q, k, v) -> torch.Tensor:
        out = self.core(q, k, v, causal=True)
        half = max(k.shape[0] // 2, 1)
        for _ in range(self.cp - 1):
            out = out + self.core(q, k[:half], v[:half], causal=False)
        return out

    def core_forward(self, q, k, v) -> torch.Tensor:
        """The core attention of this rank: one causal call, or the context-parallel ring."""
        return self.ring_core(q, k, v) if self.cp > 1 else self.run_core(q, k, v)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split_qkv(x)
        return self.proj(self.core_forward(q, k, v))


class MLP(nn.Module):
    """Dense MLP of one rank: GeLU (h -> f/t -> h) or SwiGLU (h -> 2f/t, silu(a) * b -> h)."""

    def __init__(
        self, hidden: int, ffn_local: int, *, swiglu: bool, bias: bool, gather: int, device, dtype
    ) -> None:
        super().__init__()
        self.swiglu = swiglu
        self.fc1 = ColumnParallelLinear(
            hidden,
            ffn_local * (2 if swiglu else 1),
            bias=bias,
            gather=gather,
            device=device,
            dtype=dtype,
        )
        self.fc2 = RowParallelLinear(
            ffn_local, hidden, bias=bias, scatter=gather, device=device, dtype=dtype
        )
        self.kernel = REFERENCE["swiglu"]

    @property
    def kernel_op(self) -> str | None:
        return "swiglu" if self.swiglu else None

    def activation(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel.fn(x) if self.swiglu else F.gelu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation(self.fc1(x)))
