"""Communication overlap: the part of each collective that cannot hide behind the compute it runs with.

Every rule returns the *exposed* time of a collective, never more than the collective itself and
never less than zero, so switching an overlap on can never make a modelled iteration slower
(tests/test_model_overlap.py checks it on every outer configuration of random instances). The
hidden part is `comm - exposed`; `simulate --detail` prints both per stage.

Rules and their sources:

* TP communication overlap (`tp_comm_overlap`: MindSpeed `--use-ascend-mc2`, Megatron
  `--tp-comm-overlap`). MC2 fuses the all-gather / reduce-scatter of sequence parallelism with the
  matmul that consumes / produces it, splits both into smaller sub-tasks and pipelines them so the
  communication sub-tasks hide behind the compute sub-tasks (Ascend/MindSpeed docs/zh/features/mc2.md,
  Ascend/MindSpeed-LLM docs/zh/pytorch/features/mcore/mc2.md; CANN "MC2 operators" guide). Megatron's
  TE userbuffers overlap splits the same collective into tp ring steps pipelined with tp GEMM
  chunks (NVIDIA/Megatron-LM megatron/core/model_parallel_config.py tp_comm_overlap). Modelled: the
  collective is split into tp chunks; one chunk cannot overlap (the first all-gather chunk before
  any GEMM can start, the last reduce-scatter chunk after the last GEMM), the other (tp-1)/tp hide
  behind the layer's matmul time: exposed = comm/tp + max(0, comm (tp-1)/tp - matmul). The matmul
  time is the layer's compute times the share of its flops in the linear layers (`matmul_share`;
  ASSUMPTION: compute time splits like the flops). MoE layers: MindSpeed does not use MC2 in the MLP
  of mcore MoE models (mc2.md, "注意事项"), so only their attention part (1 of their TP pairs) hides.
* Ring attention (context parallelism `megatron_cp_algo`, and the ring of `hybrid_cp_algo`, always
  on): each of the r-1 K/V hops of the forward (and the K/V + dK/dV hops of the backward) is sent
  while the previous block's attention runs (NVIDIA/Megatron-LM / TransformerEngine attention with
  cp_comm_type p2p; Ascend/MindSpeed mindspeed/core/context_parallel/ring_context_parallel.py).
  Exposed per hop = max(0, hop - one block's attention), one block being the layer's attention-core
  compute / r, r the ring size (cp; cp / u for hybrid). The Ulysses all-to-all (ulysses_cp_algo and
  hybrid's inner one) has no compute to hide behind: it is exposed in full.
* MoE all-to-all overlap (`overlap_moe_comm`: MindSpeed `--moe-alltoall-overlap-comm`, Megatron
  `--overlap-moe-expert-parallel-comm`): the token dispatch / combine runs asynchronously with
  independent compute (Ascend/MindSpeed mindspeed/features_manager/moe/moe_alltoall_overlap.py:
  "async communication & swap to overlap compute"; Megatron-Bridge docs
  training/communication-overlap.md: dispatch/combine concurrent with expert compute). Modelled,
  conservatively: the forward all-to-all stays exposed (the experts need the dispatched tokens),
  the backward one hides behind the weight-gradient half of the layer's backward (ASSUMPTION:
  wgrad = half of the backward, which needs no data from the all-to-all).
* Gradient reduce (`overlap_grad_reduce`) and parameter gather (`overlap_param_gather`, distributed
  optimizer only): Megatron groups gradients in buckets of max(40M, 1M x dp) parameters
  (NVIDIA/Megatron-LM megatron/core/distributed/distributed_data_parallel_config.py bucket_size) and
  launches a bucket's all-reduce / reduce-scatter as soon as the last micro-batch's backward has
  produced it (megatron/core/distributed/param_and_grad_buffer.py, distributed_data_parallel.py);
  with the distributed optimizer the all-gather of the updated bf16 parameters is launched per
  bucket in the forward pre-hooks of the next iteration (megatron/core/optimizer/distrib_optimizer.py,
  overlap_param_gather). Modelled per layer: exposed = max(0, sync - the layer's backward) for the
  gradients and max(0, gather - the layer's forward) for the parameters, plus per stage the last
  bucket (the first for the gather), which has no compute after it: min(bucket's sync, the smallest
  layer's sync, the smallest layer's compute), so the stage never pays more than without overlap
  (every stage has at least one layer). Collective latencies and the embedding / head parameters
  stay exposed (conservative).
* MoE forward/backward overlap (`moe_fb_overlap`: MindSpeed `--moe-fb-overlap`, Ascend/MindSpeed
  docs/features/megatron_moe/megatron-moe-fb-overlap.md; DeepSeek-V3 technical report section
  3.2.1 and the DualPipe README): in the steady 1F1B phase the forward of one micro-batch runs
  with the backward of another, so the dispatch / combine all-to-all of each hides behind the
  other's compute (attention(F) hides combine(B), MLP(B) dispatch(F), MLP(F) dispatch(B),
  attention(B) combine(F)): exposed = max(0, all-to-all - the partner direction's compute). In
  warmup and cooldown there is no partner and MindSpeed hides half of it ("warmup/cooldown阶段
  A2A通信50%掩盖，1F1B阶段A2A通信100%掩盖"). Those phases are the (p - 1) first forwards and last
  backwards of rank 0 out of its m (one each without a pipeline): a share min(1, max(p - 1, 1) / m).
* Shared-expert overlap (`moe_shared_expert_overlap`: Megatron-LM `--moe-shared-expert-overlap`,
  megatron/core/transformer/moe/shared_experts.py: the shared expert runs on its own stream, its
  fc1 alongside the token dispatch and its fc2 alongside the combine, in the forward and the
  backward): exposed = max(0, all-to-all - the shared expert's compute), the shared expert's
  share of the layer's compute taken as its share of the flops (`shared_expert_share`;
  ASSUMPTION, as matmul_share). With another MoE overlap on, the smaller exposed part counts.
* Pipeline send/recv in the interleaved schedule (`TrainSpec.overlap_p2p_comm`, default by version:
  script/versions.py p2p_overlap_default): Megatron posts the next chunk's receive and this chunk's
  send asynchronously and runs the next chunk meanwhile (megatron/core/pipeline_parallel/schedules.py,
  forward_backward_pipelining_with_interleaving, overlap_p2p_comm). Exposed per hop = max(0, hop -
  one chunk's forward (backward) compute), the chunk timed with its cheapest layer kind
  (conservative). The 1F1B schedule does not overlap p2p (exposed in full).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tinker_opt.choices import Dispatcher

BUCKET_MIN_PARAMS = 40_000_000
"""Megatron's default bucket: max(40M, 1M x dp) parameters (distributed_data_parallel_config.py)."""
BUCKET_PARAMS_PER_DP = 1_000_000


def bucket_params(dp_size: int) -> int:
    """Parameters per gradient bucket of Megatron's DDP for a data-parallel group of dp_size."""
    return max(BUCKET_MIN_PARAMS, BUCKET_PARAMS_PER_DP * dp_size)


def chunked_exposed(comm_us: float, compute_us: float, chunks: int) -> float:
    """Exposed part of a collective pipelined in `chunks` pieces with `compute_us` of compute:
    one piece cannot overlap, the rest hides behind the compute (MC2 / TE userbuffers)."""
    if comm_us <= 0:
        return 0.0
    chunks = max(chunks, 1)
    head = comm_us / chunks
    return min(comm_us, head + max(0.0, comm_us - head - compute_us))


def exposed(comm_us: float, compute_us: float) -> float:
    """Exposed part of a collective that runs alongside `compute_us` of independent compute."""
    return max(0.0, comm_us - max(compute_us, 0.0))


def matmul_share(model, tp: int, tokens: int, dense_params: int) -> float:
    """Share of a layer's forward flops in its linear layers (the rest: attention core).

    Linear: 2 x tokens x the rank's dense parameters. Attention core (causal, flash): about
    2 x tokens x seq x heads x head_dim / tp (QK^T and PV, half of the square under the mask)."""
    linear = 2.0 * tokens * dense_params
    attention = 2.0 * tokens * model.seq_length * model.num_attention_heads * model.kv_channels / tp
    total = linear + attention
    return linear / total if total > 0 else 0.0


def fb_overlap_exposed(comm_us: float, partner_us: float, edge_share: float) -> float:
    """Exposed all-to-all under the MoE forward/backward overlap: half of it in the warmup and
    cooldown share `edge_share` of the micro-batches, the part the partner direction's compute
    cannot cover in the steady phase (module docstring)."""
    steady = exposed(comm_us, partner_us)
    return min(comm_us, edge_share * 0.5 * comm_us + (1.0 - edge_share) * steady)


def shared_expert_share(model, tp: int, ep: int, dense_params: int, expert_params: int) -> float:
    """Share of a MoE layer's compute in its shared expert (the compute the dispatch and combine
    hide behind under `--moe-shared-expert-overlap`).

    Per token the rank runs its dense parameters (attention, router, shared expert; `dense_params`)
    and topk experts' parameters (`expert_params` holds num_experts / ep of them); the shared
    expert holds (3 with SwiGLU, else 2) x hidden x its size / tp. Linear flops 2 x params per
    token, plus the attention core of matmul_share."""
    shared = model.moe_shared_expert_intermediate_size or 0
    if not shared or not model.num_experts:
        return 0.0
    shared_params = (3 if model.swiglu else 2) * model.hidden_size * shared / tp
    routed = model.moe_router_topk * expert_params * ep / model.num_experts
    linear = dense_params + routed
    if linear <= 0:
        return 0.0
    tokens = model.seq_length  # the share does not depend on the token count
    return shared_params / linear * matmul_share(model, tp, tokens, int(linear))


def shared_expert_exposed(model, s: Any, cost: Any, moe_us: float) -> tuple[float, float]:
    """(forward, backward) exposed MoE dispatch / combine under `--moe-shared-expert-overlap`:
    the part the shared expert's compute cannot hide (module docstring)."""
    dense = cost.param_count - cost.expert_param_count
    shared = shared_expert_share(model, s.tp, s.ep, dense, cost.expert_param_count)
    return exposed(moe_us, cost.fwd_us * shared), exposed(moe_us, cost.bwd_us * shared)


def allgather_overlap_exposed(model, s: Any, cost: Any, moe_us: float) -> tuple[float, float]:
    """(forward, backward) exposed MoE all-gather / reduce-scatter under MindSpeed's
    `--moe-allgather-overlap-comm` (Ascend/MindSpeed
    docs/features/megatron_moe/megatron-moe-allgather-overlap-comm.md: asynchronous communication
    against compute in the forward, the backward split into sub-graphs that overlap). Modelled as
    the all-to-all overlap, conservatively: the forward stays exposed (the experts need the
    gathered tokens), the backward hides behind the weight-gradient half of the layer's backward
    (ASSUMPTION, as for `overlap_moe_comm`). Other dispatchers: nothing hidden."""
    if model.moe_token_dispatcher_type != Dispatcher.ALLGATHER:
        return moe_us, moe_us
    return moe_us, exposed(moe_us, cost.bwd_us / 2)


MoeOverlap = Callable[[Any, Any, Any, float], tuple[float, float]]
"""rule(model, strategy, the layer's BlockCost, the MoE collective's time) -> the (forward,
backward) exposed parts with the switch on."""
MOE_SWITCH_OVERLAPS: dict[str, MoeOverlap] = {
    "moe_shared_expert_overlap": shared_expert_exposed,
    "moe_allgather_overlap_comm": allgather_overlap_exposed,
}
"""The cost terms of the registry's MoE overlap switches (knobs.py) that hide the dispatch /
combine: layer_comm.py applies each one that is on, keeping the smaller exposed part. A new
switch of this kind is its record and its entry here."""
