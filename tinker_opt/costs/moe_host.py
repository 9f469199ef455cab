"""MoE host operators: a Megatron-Core MoE layer's time is at least the host's time to issue it.

Every Megatron-Core token dispatcher makes the host wait for the GPU once per MoE layer forward:

* all-to-all: `MoEAlltoAllTokenDispatcher.preprocess` sets `cuda_sync_point` to
  "before_ep_alltoall" (dropless, ep or tp > 1: the all-to-all's input / output splits are read on
  the host) or "before_permutation_1" (capacity factor: `num_out_tokens`), and
  `_maybe_dtoh_and_synchronize` copies the counts to the host on a side stream and calls
  `d2h_event.synchronize()` there (NVIDIA/Megatron-LM megatron/core/transformer/moe/
  token_dispatcher.py);
* flex (DeepEP): `FusedDispatch.forward` (megatron/core/transformer/moe/fused_a2a.py) calls DeepEP's
  `buffer.dispatch`, where "the CPU will wait for GPU's signal to arrive" and returns the received
  tokens per expert as a host list;
* allgather: `MoEAllGatherTokenDispatcher.dispatch_postprocess` reads
  `local_map.sum(dim=0).long().cpu()`.

After the wait the GPU's queue is empty: it runs each of the layer's remaining operators only
once the host has issued it, so the layer forward takes at least the host's time for it. The
backward has no such wait, but every layer of a chunk is alike, so its backward takes at least
the host's time too (the pipeline's send / receive ends each chunk). The one host-time rule,
costs/fixed_costs.py `layer_host_time`, prices per MoE layer and micro-batch max(0, host time -
modelled GPU time), forward and backward apart, with the operators counted here.

Host time = operators x `host_op_us` (the hardware description's host time to issue one eager
PyTorch operator: Python, the dispatcher, the launch). The operators that grow with the strategy
are the local experts' (num_experts / ep): Transformer Engine's GroupedLinear runs one cuBLASLt
GEMM per expert (NVIDIA/TransformerEngine transformer_engine/pytorch/module/grouped_linear.py,
`_GroupedLinear`, through `general_grouped_gemm`): forward, per expert and linear (fc1, fc2), the
input's `torch.split` piece and the GEMM (2); backward, the gradient's split piece, the dgrad and
the wgrad GEMMs, the dummy weight gradient `handle_custom_ddp_from_mcore` allocates, and
Megatron's per-parameter backward hook (megatron/core/distributed/distributed_data_parallel.py
`_make_backward_post_hook`, registered on each parameter's gradient accumulator) (5). The rest of
the layer (norms, attention, router, permute, dispatch) issues a fixed number of operators.
"""

from __future__ import annotations

from tinker_opt.costs.term_context import TermContext
from tinker_opt.strategy import Strategy

EXPERT_FWD_OPS = 4
"""Host operators per local expert in the forward: (split piece + GEMM) x (fc1, fc2)."""
EXPERT_BWD_OPS = 10
"""Per local expert in the backward: (split piece, dgrad, wgrad, dummy wgrad, DDP hook) x 2."""
LAYER_FWD_OPS = 47
"""The rest of an MoE layer's forward. ASSUMPTION: the unfused operators of the analytic trace of
a Qwen3 MoE layer (tinker_opt/profile/analytic.py; benchmarks/host_launches.py counts them): TE
fuses some into one kernel but spends its own Python per module, so the count stands for the
host's operators."""
LAYER_BWD_OPS = 84
"""The rest of an MoE layer's backward, counted the same way (ASSUMPTION as LAYER_FWD_OPS)."""


def host_ops(ctx: TermContext, s: Strategy) -> tuple[int, int]:
    """(forward, backward) host operators of one MoE layer and micro-batch (module docstring)."""
    local = max((ctx.model.num_experts or 1) // max(s.ep, 1), 1)
    return LAYER_FWD_OPS + EXPERT_FWD_OPS * local, LAYER_BWD_OPS + EXPERT_BWD_OPS * local
