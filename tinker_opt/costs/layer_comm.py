"""The collectives of one decoder layer per micro-batch: TP / SP pairs (with MC2 fusion), the
MoE dispatch (moe_terms.py) and context parallelism (cp_terms.py), split into the exposed forward
and backward parts and the hidden rest by costs/overlap.py's rules. A term module: a function of
the TermContext (costs/term_context.py), used by terms.py for the layers and by stage_terms.py
for the MTP modules.
"""

from __future__ import annotations

from tinker_opt.costs import overlap
from tinker_opt.costs.cp_terms import cp_fwd_bwd_us, cp_groups, ring_hop_us, ulysses_a2a_us
from tinker_opt.costs.moe_terms import moe_comm_us
from tinker_opt.costs.profile_table import BlockCost
from tinker_opt.costs.term_context import TermContext
from tinker_opt.costs.units import m_tokens
from tinker_opt.strategy import Strategy


def layer_comm_us(
    ctx: TermContext, kind: str, s: Strategy, cost: BlockCost
) -> tuple[float, float, float]:
    """(forward, backward) exposed collectives of one layer and the hidden rest (costs/overlap.py);
    the backward mirrors the forward."""
    m = ctx.model
    tokens = m_tokens(m, s)
    act = tokens * m.hidden_size * ctx.bpe
    parts = 2 if kind == "dense" else 1 + bool(m.moe_shared_expert_intermediate_size)
    # Tinker folders' block times include the TP and expert collectives: none added.
    pair = ctx.tp_pair_us(s, act) if s.tp > 1 and not ctx.tp_comm_in_times else 0.0
    share = overlap.matmul_share(m, s.tp, tokens, cost.param_count - cost.expert_param_count)
    fwd_tp = bwd_tp = parts * pair
    if s.tp_comm_overlap and pair:
        # MoE layers: only the attention pair is fused (MindSpeed mc2.md: no MC2 in the MoE MLP).
        fused = parts if kind == "dense" else 1
        fwd_tp = (parts - fused) * pair + overlap.chunked_exposed(
            fused * pair, cost.fwd_us * share, s.tp
        )
        bwd_tp = (parts - fused) * pair + overlap.chunked_exposed(
            fused * pair, cost.bwd_us * share, s.tp
        )
    moe = moe_comm_us(ctx, s) if kind == "moe" and not ctx.ep_comm_in_times else 0.0
    moe_fwd = moe
    moe_bwd = overlap.exposed(moe, cost.bwd_us / 2) if moe and s.overlap_moe_comm else moe
    if moe and s.moe_fb_overlap:
        num_micro = max(ctx.gbs // (s.mbs * s.dp), 1)
        edge = min(1.0, max(s.pp - 1, 1) / num_micro)
        moe_fwd = overlap.fb_overlap_exposed(moe, cost.bwd_us, edge)
        moe_bwd = overlap.fb_overlap_exposed(moe, cost.fwd_us, edge)
    for key, rule in overlap.MOE_SWITCH_OVERLAPS.items():
        if moe and getattr(s, key):  # the smaller exposed part counts (costs/overlap.py)
            fwd_exposed, bwd_exposed = rule(m, s, cost, moe)
            moe_fwd, moe_bwd = min(moe_fwd, fwd_exposed), min(moe_bwd, bwd_exposed)
    cp_fwd, cp_bwd = cp_fwd_bwd_us(ctx, s)
    u, r = cp_groups(ctx, s)
    if r > 1:
        # Ring hops hide behind one block's attention (1/r of the rank's attention core);
        # hybrid's Ulysses all-to-all stays exposed (costs/overlap.py).
        a2a, hop = ulysses_a2a_us(ctx, s, u), ring_hop_us(ctx, s, u, r)
        cp_fwd = a2a + (r - 1) * overlap.exposed(hop, cost.fwd_us * (1 - share) / r)
        cp_bwd = a2a + 2 * (r - 1) * overlap.exposed(hop, cost.bwd_us * (1 - share) / r)
    full = 2 * parts * pair + 2 * moe + sum(cp_fwd_bwd_us(ctx, s))
    fwd, bwd = fwd_tp + moe_fwd + cp_fwd, bwd_tp + moe_bwd + cp_bwd
    return fwd, bwd, max(full - fwd - bwd, 0.0)
