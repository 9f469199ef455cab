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
(arXiv 2601.21824, abstract): in FlashAttention-3 "the deterministic backward pass can incur up
to a 37.9 % throughput reduction relative to its non-deterministic counterpart". So the
attention backward takes 1 / (1 - 0.379) = 1.61x its time: the extra is the kernel's time (its
FLOPs under the description's `attention_bwd` curve, the curve the analytic profile times it
at, profile/op_timing.py) x 0.61, GPU work added to the layer's backward (costs/terms.py
`_extra_us`). ASSUMPTION: cuDNN's deterministic backward (the kernel TE runs on Hopper and, from
cuDNN 9.18.1, Blackwell: TransformerEngine PR 2584) pays what FA3's does; DASH's "up to" is its
long-sequence end, the regime where the attention backward is a visible share of the layer.

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
"""The deterministic attention backward's throughput loss (DASH, arXiv 2601.21824, abstract)."""
EXTRA_FACTOR = 1.0 / (1.0 - THROUGHPUT_LOSS) - 1.0
"""The deterministic backward's time above the non-deterministic one, per unit of the latter."""
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
    flops = attention_backward_flops(ctx, s)
    return ctx.rates.attention_bwd_us(flops) * EXTRA_FACTOR
