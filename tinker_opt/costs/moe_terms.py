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
  Inside a node DeepEP also sends a token once per destination rank, not once per expert: its
  layout kernel gives `is_token_in_rank` [tokens, ranks] and the dispatch copies each token to
  every rank that holds one of its experts, the permute to local experts following on the
  receiver (deepseek-ai/DeepEP deep_ep/buffer.py get_dispatch_layout / dispatch; Megatron's GB200
  guide section 2.1.1: DeepEP "fuses the global permute into the communication kernel,
  eliminating the need to explicitly copy the tokens top-k times"); the combine sends back one
  locally reduced token per rank. With topk of E experts chosen uniformly without replacement
  and E / ep on each rank, a token reaches `distinct_ranks` = ep (1 - C(E - E/ep, k) / C(E, k))
  ranks of the EP group, and a node forwards distinct_ranks x e_node / ep copies of it over
  NVLink. DeepEP's intranode rate on H100 (TileScale's DeepEP example README, 8 x H100, 4096
  tokens, hidden 7168: 329 GB/s dispatch, 287 GB/s combine, counted on the bytes each rank
  receives, DeepEP tests/test_intranode.py `recv_x.numel() * 2`) is about the all-to-all's here
  (7/8 of those bytes at the H100 NVLink 292.5 GB/s = 334 GB/s): the link rate is kept.

Local chunk sort (`chunk_sort_us`, compute, not a collective): the all-to-all dispatcher receives
its tokens grouped by source rank and sorts them by local expert before the experts ("Permutation
2: Sort tokens by local expert", `sort_chunks_by_idxs` in MoEAlltoAllTokenDispatcher
.dispatch_postprocess, when num_local_experts > 1) and unsorts the experts' output before the
combine all-to-all (`restore_output_by_local_experts`, token_combine's preprocess); the backward
runs both copies again in reverse. Megatron's DeepSeek-V3 GB200 guide (docs/discussions/
deepseek-v3-gb200-optimization, section 2.1.1) states it: "The AlltoAll dispatcher using the NCCL
backend requires one global and one local permute before and after EP communication ... The Flex
Dispatcher of DeepEP or HybridEP fuses the global permute into the communication kernel". The
profiled MoE block (profile/moe.py) holds one permute and one unpermute, what every dispatcher
runs; its fused-kernel rule would merge a traced sort into the permute (the all-to-all between
them is not traced), so the sorts are priced here: each pass reads and writes the rank's
received tokens once, memory-bound at the HBM bandwidth (as grad_accumulation.py's add).
"""

from __future__ import annotations

import math

from tinker_opt.choices import Dispatcher
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


def distinct_ranks(num_experts: int, ep: int, topk: int) -> float:
    """Ranks of an EP group of `ep` that one token reaches when its `topk` experts are drawn
    uniformly without replacement from `num_experts`, num_experts / ep on each rank (module
    docstring): ep (1 - C(E - E/ep, k) / C(E, k)); topk when every expert is on its own rank."""
    if ep <= 1:
        return 1.0
    others = num_experts - num_experts // ep
    missed = math.comb(others, topk) / math.comb(num_experts, topk) if topk <= others else 0.0
    return ep * (1 - missed)


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
    if m.moe_token_dispatcher_type == Dispatcher.ALLGATHER:
        group = s.ep * etp
        scope = ctx.scope(1, group)
        return ctx.comm.time_us("all_gather", group, scope, token_bytes * group) + (
            ctx.comm.time_us("reduce_scatter", group, scope, token_bytes * group)
        )
    load = expert_load(m)
    routed = token_bytes * m.moe_router_topk * load
    if m.moe_token_dispatcher_type == Dispatcher.FLEX:
        return 2 * _deepep_us(ctx, s, token_bytes * load) + _etp_us(ctx, s, routed)
    return 2 * split_all_to_all_us(ctx, s.ep, etp, routed) + _etp_us(ctx, s, routed)


def _deepep_us(ctx: TermContext, s: Strategy, token_bytes: float) -> float:
    """DeepEP's dispatch (or combine): each token once per remote node, then NVLink forwarding."""
    m, etp = ctx.model, s.expert_tp
    local = ranks_per_node(ctx, etp, s.ep)
    nodes = s.ep // local
    k = m.moe_router_topk
    routed = token_bytes * distinct_ranks(m.num_experts or 1, s.ep, k)
    intra = ctx.comm.time_us("all_to_all", local, "intra_node", routed * local / s.ep)
    if nodes <= 1:
        return intra
    remote = (nodes - 1) * (1 - (1 - 1 / nodes) ** k)  # distinct remote nodes per token
    inter = ctx.comm.time_us("send_recv", 2, "inter_node", token_bytes * remote)
    return max(intra, inter)


SORTING_DISPATCHERS = frozenset({Dispatcher.ALLTOALL, Dispatcher.ALLTOALL_SEQ})
"""Dispatchers that sort the received tokens by local expert (module docstring)."""


def chunk_sort_us(ctx: TermContext, s: Strategy) -> tuple[float, float]:
    """(forward, backward) microseconds of the all-to-all dispatcher's local sort and unsort of
    one MoE layer and micro-batch (module docstring); 0 for one local expert, the other
    dispatchers, ModelLink's GShard path and profiles whose block times ran the dispatcher."""
    m = ctx.model
    local = (m.num_experts or 1) // max(s.ep, 1)
    if (
        m.moe_token_dispatcher_type not in SORTING_DISPATCHERS
        or m.moe_gshard_dispatch
        or ctx.ep_comm_in_times
        or s.ep <= 1
        or local <= 1
    ):
        return 0.0, 0.0
    tokens = m_tokens(m, s) // (s.tp if s.sp else 1)
    # The rank sorts what it received: its etp group's tokens x topk x the busiest load.
    received = tokens * s.expert_tp * m.moe_router_topk * expert_load(m) * m.hidden_size * ctx.bpe
    one_pass = 2 * received / (ctx.mem_bw_gbs * 1e3)  # read + write; 1 GB/s = 1e3 B/us
    return 2 * one_pass, 2 * one_pass
