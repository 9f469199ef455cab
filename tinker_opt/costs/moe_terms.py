"""MoE token dispatch: the collectives of one MoE layer by dispatcher type, the part that leaves
the node on the inter-node link. Free functions of a TermContext (costs/term_context.py), like
cp_terms.py; the overlap of the all-to-all is costs/overlap.py's rule.

Per rank and micro-batch the layer routes T tokens (s*b/cp, / tp under sequence parallel) to
topk experts each; R = T * topk * h * bpe bytes leave for the experts, times the busiest rank's
load (profile/shape.py expert_load: imbalance, capped by a capacity factor, or the padded
capacity), since the exchange waits for the rank that receives the most. Dispatchers (NVIDIA/
Megatron-LM megatron/core/transformer/moe/token_dispatcher.py; moe/README.md "Token Dispatcher
Choices"):

* `alltoall` / `alltoall_seq` (and ModelLink's legacy GShard MoE, DeepSpeed sharded_moe.py
  _AllToAll of the padded [E, C, M] buffer): one all-to-all of R over the EP group to dispatch
  and one to combine, plus the all-gather / reduce-scatter over the expert-tensor-parallel group.
  Each rank sends R / ep to every EP peer; of an EP group spread over nodes with e_node ranks per
  node, (ep - e_node) / ep of R crosses nodes on the inter-node link and (e_node - 1) / ep stays
  on the intra-node one. NCCL / HCCL post all peer sends of an all-to-all at once, so the two
  parts run concurrently: the exchange takes the longer of the two.
* `allgather`: all-gather of the rank's T tokens (T * h * bpe, not times topk) over the
  expert-tensor x expert-parallel group, each rank keeps its experts' tokens, and a
  reduce-scatter of the same size combines them (MoEAllGatherTokenDispatcher, tp_ep_group).
* `flex` (DeepEP, `--moe-enable-deepep`): a token crosses to each remote node that holds one of
  its experts once, on the inter-node link, and is forwarded to the expert's GPU inside that node
  on the intra-node link (DeepSeek-V3 technical report, arXiv:2412.19437, section 3.2.2; the
  DeepEP README's "NVLink and RDMA forwarding" kernels). With n nodes in the EP group and topk
  experts chosen uniformly, a token reaches (n - 1) (1 - (1 - 1/n)^topk) remote nodes on average
  (ASSUMPTION: uniform routing; node-limited routing `--moe-router-group-topk` is not read).
"""

from __future__ import annotations

from tinker_opt.costs.term_context import TermContext
from tinker_opt.costs.units import m_tokens
from tinker_opt.profile.shape import expert_load
from tinker_opt.strategy import Strategy


def ranks_per_node(ctx: TermContext, stride: int, size: int) -> int:
    """Ranks of a group (`size` ranks `stride` apart) that share one node."""
    per_node = max(1, ctx.cluster.devices_per_node // max(stride, 1))
    return max(1, min(size, per_node))


def split_all_to_all_us(ctx: TermContext, size: int, stride: int, nbytes: float) -> float:
    """One all-to-all of `nbytes` per rank over `size` ranks `stride` apart: the intra-node and
    inter-node parts concurrently (module docstring)."""
    if size <= 1:
        return 0.0
    local = ranks_per_node(ctx, stride, size)
    intra = ctx.comm.time_us("all_to_all", local, "intra_node", nbytes * local / size)
    if local == size:
        return intra
    whole = ctx.comm.time_us("all_to_all", size, "inter_node", nbytes)
    return max(intra, whole * (size - local) / (size - 1))


def _etp_us(ctx: TermContext, s: Strategy, nbytes: float) -> float:
    """All-gather + reduce-scatter of the dispatched tokens over the expert-tensor group."""
    etp = s.expert_tp
    scope = ctx.scope(1, etp)
    return ctx.comm.time_us("all_gather", etp, scope, nbytes * etp) + ctx.comm.time_us(
        "reduce_scatter", etp, scope, nbytes * etp
    )


def moe_comm_us(ctx: TermContext, s: Strategy) -> float:
    """Token dispatch + combine of one MoE layer and micro-batch, one direction (the backward
    mirrors it), by the model's dispatcher type."""
    m = ctx.model
    tokens = m_tokens(m, s) // (s.tp if s.sp else 1)  # SP: each TP rank routes its slice
    token_bytes = tokens * m.hidden_size * ctx.bpe
    etp = s.expert_tp
    if m.moe_token_dispatcher_type == "allgather":
        group = s.ep * etp
        scope = ctx.scope(1, group)
        return ctx.comm.time_us("all_gather", group, scope, token_bytes * group) + (
            ctx.comm.time_us("reduce_scatter", group, scope, token_bytes * group)
        )
    load = expert_load(m)
    routed = token_bytes * m.moe_router_topk * load
    if m.moe_token_dispatcher_type == "flex":
        return 2 * _deepep_us(ctx, s, token_bytes * load) + _etp_us(ctx, s, routed)
    return 2 * split_all_to_all_us(ctx, s.ep, etp, routed) + _etp_us(ctx, s, routed)


def _deepep_us(ctx: TermContext, s: Strategy, token_bytes: float) -> float:
    """DeepEP's dispatch (or combine): each token once per remote node, then NVLink forwarding."""
    m, etp = ctx.model, s.expert_tp
    local = ranks_per_node(ctx, etp, s.ep)
    nodes = s.ep // local
    k = m.moe_router_topk
    routed = token_bytes * k
    intra = ctx.comm.time_us("all_to_all", local, "intra_node", routed * local / s.ep)
    if nodes <= 1:
        return intra
    remote = (nodes - 1) * (1 - (1 - 1 / nodes) ** k)  # distinct remote nodes per token
    inter = ctx.comm.time_us("send_recv", 2, "inter_node", token_bytes * remote)
    return max(intra, inter)
