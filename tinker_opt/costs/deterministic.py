"""The cost of Megatron-LM's `--deterministic-mode`: the fused attention's deterministic backward.

What the flag does (Megatron-LM megatron/training/arguments.py `validate_args`, "Deterministic
mode"): it asserts NCCL_ALGO is set to one fixed algorithm (Tree, Ring, ...) and calls
`torch.use_deterministic_algorithms(True)`; Megatron-Core's TEDotProductAttention
(megatron/core/extensions/transformer_engine.py) refuses to run unless
`NVTE_ALLOW_NONDETERMINISTIC_ALGO=0`, which makes Transformer Engine pick the deterministic
backward of its fused attention (cuDNN's, or flash-attn >= 2.4.1's: TransformerEngine PR 992's
support table).

The deterministic backward serializes the accumulation of dQ over the key blocks: Qiang et al.,
"DASH: Deterministic Attention Scheduling for High-throughput Reproducible LLM Training"
(arXiv 2601.21824, abstract): in FlashAttention-3 (Hopper) "the deterministic backward pass can
incur up to a 37.9 % throughput reduction relative to its non-deterministic counterpart". So the
attention backward takes `factor` = 1 / (1 - 0.379) = 1.61x its time: the extra is the kernel's
time (its FLOPs under the description's `attention_bwd` curve, the curve the analytic profile
times it at, profile/op_timing.py) x (factor - 1), GPU work added to the layer's backward
(costs/terms.py `_extra_us`).

The factor is the device's: a description states it as `deterministic_attention_bwd`, else
DEFAULT_FACTOR (DASH's Hopper figure). ASSUMPTION: cuDNN's deterministic backward on Hopper (the
kernel TE runs there) pays what FA3's does; before cuDNN 9.25 it materializes dP in a workspace
quadratic in the sequence (NVIDIA/cudnn-frontend PR 398, "SDPA bwd: linear-workspace deterministic
path on Hopper"), a serialization of the same order. Blackwell differs: from cuDNN 9.18.1 the
deterministic backward is a two-kernel algorithm (TransformerEngine PR 2584) that NVIDIA measured
"~1-3 % speedup for Blackwell" on DeepSeek-V3 against the default (NVIDIA-NeMo/Megatron-Bridge
issue 2340), so b200.json / gb200-nvl72.json state 1.0.

Not priced: the fill of uninitialized memory that `torch.use_deterministic_algorithms(True)`
adds to every `torch.empty` (torch.utils.deterministic.fill_uninitialized_memory; AMD's Primus
turns it off "to avoid calling extra fill kernel in deterministic mode"), and NCCL_ALGO's fixed
algorithm (the comm model prices ring collectives already). The layers without Transformer
Engine's attention (`--transformer-impl local`) run the unfused attention, deterministic already.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinker_opt.costs.units import m_tokens

if TYPE_CHECKING:
    from tinker_opt.costs.term_context import TermContext
    from tinker_opt.strategy import Strategy

THROUGHPUT_LOSS = 0.379
"""FlashAttention-3's deterministic backward's throughput loss on Hopper (DASH, arXiv 2601.21824,
abstract)."""
DEFAULT_FACTOR = 1.0 / (1.0 - THROUGHPUT_LOSS)
"""The deterministic backward's time per unit of the non-deterministic one, where a description
states none (module docstring)."""
BACKWARD_MATMULS = 5
"""The attention backward's matmuls of the score size (dV, dP, dS, dQ, dK; the forward has 2:
QK^T and PV), as torch's `sdpa_backward_flop_count` counts them."""


def attention_backward_flops(ctx: TermContext, s: Strategy) -> float:
    """FLOPs of one layer's fused attention backward per micro-batch on one rank: five matmuls of
    [q tokens x k tokens x head dim] per local head, causal halved (the analytic trace's count,
    profile/op_trace.py)."""
    model = ctx.model
    heads = model.num_attention_heads // s.tp
    q_tokens = m_tokens(model, s)  # this cp rank's queries (s*b/cp)
    k_tokens = model.seq_length  # against every key of the sequence
    if model.multi_latent_attention:
        qk_dim = (model.qk_head_dim or 0) + (model.qk_pos_emb_head_dim or 0)
        v_dim = model.v_head_dim or qk_dim
        head_dim = (3 * qk_dim + 2 * v_dim) / BACKWARD_MATMULS  # S, dQ, dK on qk; dV, dP on v
    else:
        head_dim = model.kv_channels
    return 2.0 * BACKWARD_MATMULS * heads * q_tokens * k_tokens * head_dim * 0.5


def deterministic_backward_us(ctx: TermContext, s: Strategy) -> float:
    """Microseconds the deterministic attention backward adds to one layer's backward per
    micro-batch (module docstring); 0 without `--deterministic-mode` or without a fused
    attention kernel (`ModelSpec.use_flash_attn`: Transformer Engine's, or flash attention)."""
    if not (ctx.job.step.deterministic and ctx.model.use_flash_attn):
        return 0.0
    factor = ctx.rates.deterministic_attention_bwd
    extra = (DEFAULT_FACTOR if factor is None else factor) - 1.0
    if extra <= 0:
        return 0.0
    return ctx.rates.attention_bwd_us(attention_backward_flops(ctx, s)) * extra
