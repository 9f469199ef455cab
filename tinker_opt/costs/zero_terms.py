"""ZeRO stages 2 and 3 in the cost model: what is sharded, what is gathered, and when it moves.

Sources: Rajbhandari et al. 2020 (ZeRO: stage 1 shards optimizer states, 2 also gradients, 3 also
parameters over the data-parallel group); PyTorch FSDP2 `fully_shard` docs (each wrapped unit's
parameters are all-gathered before its forward and, with `reshard_after_forward=True`, again
before its backward; its gradients are reduce-scattered in backward; the next unit's all-gather
is prefetched on a separate stream so it overlaps the current unit's compute); MindSpeed-LLM
docs/en/pytorch/features/fsdp2/arguments.md (`fsdp_modules` are the decoder layers, the
embedding and the head; `reshard_after_forward` True and `num_to_forward_prefetch` /
`num_to_backward_prefetch` 1 by default); Megatron-core's `--data-parallel-sharding-strategy
optim | optim_grads | optim_grads_params` (Megatron-FSDP) for the same three stages.

Rules (per rank; d dense and e expert parameters of a unit, sharded over the dense data-parallel
group dp*cp and the expert data-parallel group edp, as Megatron's distributed optimizer does):
* memory: stage >= 1 keeps 12 B/param of optimizer states sharded (as before); stage >= 2 keeps the
  4 B fp32 gradients sharded; stage 3 keeps the bpe weights sharded. Transient: stage >= 2 holds
  one unit's full gradients before their reduce-scatter; stage 3 also holds the gathered weights of
  the computing unit and of PREFETCH_UNITS prefetched ones. The largest unit (a decoder layer, or
  the embedding / head) sizes both, an upper bound for the smaller ones;
* time, per micro-batch and unit: stage 3 all-gathers the unit's weights before forward and again
  before backward and reduce-scatters its fp32 gradients in backward; stage 2 only reduce-scatters
  (every micro-batch, as DeepSpeed ZeRO-2 and Megatron-FSDP optim_grads do). With prefetch a
  decoder layer's traffic overlaps the layer's own time on the compute stream: exposed = max(0,
  gather - forward) forward and max(0, gather + reduce-scatter - backward) backward, where forward
  and backward are the compute plus the collectives the compute stream waits for (TP, EP, CP: the
  sharding traffic runs on its own stream meanwhile), and backward also holds the rerun forward
  under full recompute (torch.utils.checkpoint / Megatron's CheckpointFunction rerun the unit's
  forward inside its backward, after its parameters are gathered) (ASSUMPTION: one stream each
  way, no contention with the TP / EP collectives). The embedding and head units are the first and last
  to run, so their traffic is counted exposed. The step tail then has no gradient reduction left:
  stage 2 all-gathers the updated weights as stage 1 does, stage 3 gathers nothing (the next
  forward does).
"""

from __future__ import annotations

from tinker_opt.costs.units import data_groups
from tinker_opt.strategy import Strategy

FSDP_GRAD_BYTES = 4
"""Bytes per gradient element kept and reduced (fp32, as Megatron's main gradients and
MindSpeed-LLM FSDP2's default parallel.reduce_dtype)."""
PREFETCH_UNITS = 1
"""Units whose weights are gathered ahead of the computing one (MindSpeed-LLM FSDP2's default
num_to_forward_prefetch / num_to_backward_prefetch = 1)."""


def sharded_param_bytes(ctx, s: Strategy, dense: int, expert: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) bytes a rank keeps of these parameters (unrounded)."""
    dp_cp, edp = data_groups(s, ctx.model.is_moe)
    local = dense / dp_cp + expert / edp  # one rank's shard of the parameter elements
    full = dense + expert
    weights = ctx.bpe * (local if s.zero >= 3 else full)
    grads = ctx.grad_bytes * (local if s.zero >= 2 else full)  # fp32 unless --main-grads-dtype
    optimizer = ctx.opt_state_bytes * (local if s.zero >= 1 else full)
    return weights, grads, optimizer


def gathered_bytes(s: Strategy, unit_params: int, bpe: int) -> int:
    """Transient bytes of stages 2 and 3: one unit's full gradients, plus with stage 3 the gathered
    weights of the computing and the prefetched units (module docstring)."""
    if s.zero < 2:
        return 0
    grads = FSDP_GRAD_BYTES * unit_params
    weights = (1 + PREFETCH_UNITS) * bpe * unit_params if s.zero >= 3 else 0
    return grads + weights


def _unit_traffic_us(ctx, s: Strategy, dense: int, expert: int) -> tuple[float, float]:
    """(all-gather of the unit's weights, reduce-scatter of its gradients) in us, per micro-batch."""
    gather, scatter = 0.0, 0.0
    # Without an expert group (a dense model) only the dense parameters pair with a group.
    for (size, scope), params in zip(ctx.sync_groups(s), (dense, expert), strict=False):
        if size <= 1 or not params:
            continue
        if s.zero >= 3:
            gather += ctx.comm.time_us("all_gather", size, scope, ctx.bpe * params)
        scatter += ctx.comm.time_us("reduce_scatter", size, scope, FSDP_GRAD_BYTES * params)
    return gather, scatter


def layer_exposed_us(
    ctx, s: Strategy, dense: int, expert: int, fwd_us: float, bwd_us: float
) -> float:
    """Exposed ZeRO-2/3 traffic of one decoder layer per micro-batch, prefetch overlapping compute."""
    if s.zero < 2:
        return 0.0
    gather, scatter = _unit_traffic_us(ctx, s, dense, expert)
    return max(0.0, gather - fwd_us) + max(0.0, gather + scatter - bwd_us)


def unit_exposed_us(ctx, s: Strategy, params: int) -> float:
    """ZeRO-2/3 traffic of the embedding or head unit per micro-batch, fully exposed."""
    if s.zero < 2:
        return 0.0
    gather, scatter = _unit_traffic_us(ctx, s, params, 0)
    return 2 * gather + scatter


def tail_reduces_gradients(s: Strategy) -> bool:
    """Whether the step tail still reduces gradients (stages 0 and 1: they wait for the flush)."""
    return s.zero < 2


def tail_gathers_weights(s: Strategy) -> bool:
    """Whether the step tail all-gathers the updated weights (stages 1 and 2)."""
    return s.zero in (1, 2)
