"""Context-parallel terms: the Ulysses all-to-all, the ring attention K/V hops, hybrid (Ulysses
inside, ring across) and the pace of unaligned Ulysses. Free functions of a TermContext
(costs/term_context.py), like stage_terms.py; the overlap of the ring is costs/overlap.py's rule.
"""

from __future__ import annotations

from tinker_opt.choices import CpAlgo
from tinker_opt.costs.profile_table import BlockCost
from tinker_opt.costs.term_context import TermContext
from tinker_opt.costs.units import m_tokens
from tinker_opt.rules import hybrid_ulysses_degree, ulysses_heads_factor
from tinker_opt.strategy import Strategy


def cp_groups(ctx: TermContext, s: Strategy) -> tuple[int, int]:
    """(Ulysses all-to-all group u, ring r) of the context parallelism, u * r = cp.

    Ulysses: (cp, 1); ring attention: (1, cp); hybrid_cp_algo: Ulysses all-to-all inside
    groups of u consecutive cp ranks and ring attention across the cp / u groups (Ascend/MindSpeed
    mindspeed/core/context_parallel/model_parallel_utils.py
    initialize_context_parallel_group_for_hybrid_cp: the Ulysses ranks are adjacent, in one
    node where possible; u from rules.hybrid_ulysses_degree); kvallgather: (1, 1), neither."""
    if s.cp == 1 or s.cp_algo == CpAlgo.KV_ALLGATHER:
        return 1, 1
    if s.cp_algo == CpAlgo.ULYSSES:
        return s.cp, 1
    if s.cp_algo == CpAlgo.HYBRID:
        m = ctx.model
        u = hybrid_ulysses_degree(s.cp, s.tp, m.num_attention_heads, ctx.job.ulysses_degree)
        return u, s.cp // u
    return 1, s.cp


def kv_heads(ctx: TermContext, s: Strategy, u: int) -> int:
    """K / V heads per tp rank that enter the Ulysses all-to-all over u ranks: the query groups,
    repeated to the attention heads when fewer than u (MindSpeed-LLM's default
    `--kv-head-repeat-before-uly-alltoall`; Ascend/MindSpeed
    mindspeed/core/context_parallel/ulysses_context_parallel/ulysses_context_parallel.py
    UlyssesContextAttention.forward repeats K / V when the group outnumbers their heads)."""
    m = ctx.model
    groups = m.num_query_groups // s.tp
    return m.num_attention_heads // s.tp if groups < u else groups


def ulysses_bytes(ctx: TermContext, s: Strategy, u: int, heads_per_tp: int) -> float:
    """Bytes the busiest rank of a Ulysses group of u holds after the all-to-all of one
    [tokens, heads_per_tp, head_dim] tensor: u x tokens x ceil(heads_per_tp / u) heads (the
    uneven head split: rules.ulysses_heads_factor); tokens x heads_per_tp when u divides."""
    tokens = m_tokens(ctx.model, s)
    return tokens * u * -(-heads_per_tp // u) * ctx.model.kv_channels * ctx.bpe


def ulysses_a2a_us(ctx: TermContext, s: Strategy, u: int) -> float:
    """DeepSpeed-Ulysses all-to-all of one layer, one direction: q, k, v before attention and
    the output after, over u ranks (the backward mirrors it); the volume of the busiest rank."""
    if u == 1:
        return 0.0
    heads = ctx.model.num_attention_heads // s.tp
    scope = ctx.scope(s.tp, u)
    kv = kv_heads(ctx, s, u)
    qkv = ulysses_bytes(ctx, s, u, heads) + 2 * ulysses_bytes(ctx, s, u, kv)
    out = ulysses_bytes(ctx, s, u, heads)
    return ctx.comm.time_us("all_to_all", u, scope, qkv) + ctx.comm.time_us(
        "all_to_all", u, scope, out
    )


def ring_hop_us(ctx: TermContext, s: Strategy, u: int, r: int) -> float:
    """One K/V hop of ring attention over r ranks (stride tp * u): the K and V a rank holds
    after its Ulysses all-to-all (u = 1: its own slice of the sequence)."""
    kv_bytes = 2 * ulysses_bytes(ctx, s, u, kv_heads(ctx, s, u))
    return ctx.comm.time_us("send_recv", 2, ctx.scope(s.tp * u, r), kv_bytes)


def cp_fwd_bwd_us(ctx: TermContext, s: Strategy) -> tuple[float, float]:
    """Context-parallel attention traffic of one layer (forward, backward), none hidden:
    the Ulysses all-to-all each way, r - 1 ring hops forward and 2 (r - 1) backward (K/V and
    dK/dV circulate), or kvallgather's all-gather of K/V forward and reduce-scatter backward."""
    if s.cp == 1:
        return 0.0, 0.0
    if s.cp_algo == CpAlgo.KV_ALLGATHER:
        m, tokens = ctx.model, m_tokens(ctx.model, s)
        kv_bytes = 2 * tokens * (m.num_query_groups * m.kv_channels // s.tp) * ctx.bpe
        scope = ctx.scope(s.tp, s.cp)
        return (
            ctx.comm.time_us("all_gather", s.cp, scope, kv_bytes * s.cp),
            ctx.comm.time_us("reduce_scatter", s.cp, scope, kv_bytes * s.cp),
        )
    u, r = cp_groups(ctx, s)
    a2a = ulysses_a2a_us(ctx, s, u)
    hop = ring_hop_us(ctx, s, u, r) if r > 1 else 0.0
    return a2a + (r - 1) * hop, a2a + 2 * (r - 1) * hop


def ulysses_pace(ctx: TermContext, s: Strategy) -> float:
    """ulysses_heads_factor of the strategy's Ulysses group (1.0 without one, or aligned)."""
    u, _ = cp_groups(ctx, s)
    return ulysses_heads_factor(ctx.model.num_attention_heads, s.tp, u) if u > 1 else 1.0


def unaligned_extra(
    ctx: TermContext, s: Strategy, cost: BlockCost, share: float
) -> tuple[float, float, int]:
    """(forward us, backward us, activation bytes) the busiest rank of an unaligned Ulysses
    group adds to a layer (rules.ulysses_heads_factor f): the attention core (the layer's
    compute outside its matmuls, overlap.matmul_share) runs f times longer, and the tensors
    after the all-to-all (q, k, v, output) are larger by the uneven split. The profile's
    per-rank block shape (heads / tp on tokens / cp) cannot express the uneven split, so this
    is added here. Zero when aligned."""
    f = ulysses_pace(ctx, s)
    if f == 1.0:
        return 0.0, 0.0, 0
    u, _ = cp_groups(ctx, s)
    heads, kv = ctx.model.num_attention_heads // s.tp, kv_heads(ctx, s, u)
    tokens, d = m_tokens(ctx.model, s), ctx.model.kv_channels
    held = 2 * ulysses_bytes(ctx, s, u, heads) + 2 * ulysses_bytes(ctx, s, u, kv)
    even = tokens * (2 * heads + 2 * kv) * d * ctx.bpe
    attention = 1 - share
    return (
        (f - 1) * cost.fwd_us * attention,
        (f - 1) * cost.bwd_us * attention,
        int(held - even),
    )
