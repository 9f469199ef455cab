"""What a rank keeps of its parameters and what the data-parallel group moves after the backward:
weight, gradient and optimizer-state bytes, the gradient synchronisation and the optimizer step.
Free functions of a TermContext (costs/term_context.py), like stage_terms.py and zero_terms.py.

Memory per parameter (Megatron mixed precision with Adam, cost-facts.md): bpe weight + 4 B fp32
gradient (Megatron accumulates and all-reduces bf16 gradients in fp32) + 12 B fp32 master weight
and two Adam moments (8 B without a master copy in fp32 training). With the distributed optimizer
the 12 B are sharded over the data-parallel group with context parallelism (dp*cp ranks, Megatron's
`data_parallel_group_with_cp`); expert parameters are sharded by ep*etp instead of tp and their
states by the expert-data-parallel group tp*cp*dp / (ep*etp).

Swap optimizer (MindSpeed `--swap-optimizer`, docs/features/swap-optimizer.md of Ascend/MindSpeed,
and mindspeed/features_manager/optimizer/swap_optimizer_feature.py): the fp32 master weights and
Adam moments of the distributed optimizer live in host memory between steps; the step copies
about numel // swap_optimizer_times elements (default 16 chunks) host->device, runs AdamW on them,
copies them back and frees them. The feature requires the distributed optimizer, so it applies
only to strategies with dist_opt. Modelled: the device holds one chunk of the states
(ASSUMPTION: one chunk in flight; the h2d of the next chunk may overlap the d2h of the previous,
which the model leaves out), and the step pays both copies of the rank's states at the host link
bandwidth, exposed (ASSUMPTION: conservative, MindSpeed overlaps the copies with the AdamW math on
separate streams).

Reuse of the fp32 parameters (MindSpeed `--reuse-fp32-param`, Ascend/MindSpeed
docs/features/reuse-fp32-param.md): the fp32 master copy is kept as the bf16 weight plus a 16-bit
residual, which "saves sizeof(bfloat16) x parameters of static memory" without the distributed
optimizer and "sizeof(bfloat16) x parameters / DP" with it; modelled as 2 B fewer optimizer-state
bytes per parameter (sharded like the other states), bf16 training only. Its time cost (< 1 % in
the same document) is left out.
"""

from __future__ import annotations

import numpy as np

from tinker_opt.costs.comm_model import GroupPlacement
from tinker_opt.costs.step_costs import step_kernels_us, stream_bytes_per_us
from tinker_opt.costs.term_context import TermContext
from tinker_opt.costs.units import data_groups
from tinker_opt.costs.zero_terms import (
    sharded_param_bytes,
    tail_gathers_weights,
    tail_reduces_gradients,
)
from tinker_opt.strategy import Strategy

ADAM_TOUCH_BYTES = 30
"""Bytes one Adam step moves per parameter: reads fp32 grad, master, m, v (16), writes master,
m, v (12) and the bf16 weight (2); the step is memory-bound, a streaming pass at the HBM
bandwidth (costs/step_costs.py stream_bytes_per_us)."""


def param_bytes(ctx: TermContext, s: Strategy, dense: int, expert: int) -> tuple[int, int]:
    """(weights + gradients, optimizer states) bytes of these parameters on one rank; with
    the swap optimizer only one of its swap_times chunks of the states is on the device."""
    weights, grads, optimizer = sharded_param_bytes(ctx, s, dense, expert)  # ZeRO stage s.zero
    chunks = (ctx.job.swap_optimizer_times or 1) if swaps(ctx, s) else 1  # swaps: a count is set
    return int(np.ceil(weights) + np.ceil(grads)), int(np.ceil(optimizer / chunks))


def grad_bytes(ctx: TermContext, s: Strategy, dense: int, expert: int) -> int:
    """The gradient part of `param_bytes` (sharded from ZeRO stage 2 on)."""
    return int(np.ceil(sharded_param_bytes(ctx, s, dense, expert)[1]))


def swaps(ctx: TermContext, s: Strategy) -> bool:
    """Whether the states are swapped to the host: MindSpeed's swap optimizer needs dist_opt."""
    return bool(ctx.job.swap_optimizer_times) and s.dist_opt


def sync_us(
    ctx: TermContext,
    s: Strategy,
    size: int,
    scope: str | GroupPlacement,
    params: float,
    slope_only: bool,
) -> float:
    """Gradient synchronisation of `params` (exposed, after the pipeline flush): fp32
    all-reduce, or reduce-scatter of gradients + all-gather of bf16 weights (dist. optimizer)."""

    def t(op: str, nbytes: float) -> float:
        if slope_only:
            return ctx.comm.transfer_us(op, size, scope, nbytes)
        return ctx.comm.time_us(op, size, scope, nbytes)

    if not tail_reduces_gradients(s):  # ZeRO 2/3 reduce-scatter in backward (zero_terms.py)
        return t("all_gather", ctx.bpe * params) if tail_gathers_weights(s) else 0.0
    if s.dist_opt:
        return t("reduce_scatter", ctx.grad_bytes * params) + t("all_gather", ctx.bpe * params)
    return t("all_reduce", ctx.grad_bytes * params)


def tail_slope_us(ctx: TermContext, s: Strategy, dense: int, expert: int) -> tuple[float, float]:
    """Per-parameter-set (sync, optimizer step) times without the collective latencies."""
    grad, gather, step = tail_parts_us(ctx, s, dense, expert)
    return grad + gather, step


def tail_parts_us(
    ctx: TermContext, s: Strategy, dense: int, expert: int
) -> tuple[float, float, float]:
    """(gradient reduce, parameter all-gather, optimizer step) of a parameter set without the
    collective latencies; the all-gather is 0 without the distributed optimizer and with ZeRO-3,
    the reduce 0 from ZeRO-2 on (zero_terms.py)."""
    (dense_size, dense_scope), *expert_group = ctx.sync_groups(s)
    groups = [(dense_size, dense_scope, dense)]
    if expert_group:
        groups.append((*expert_group[0], expert))
    grad = gather = 0.0
    for size, scope, params in groups:
        both = sync_us(ctx, s, size, scope, params, True)
        part = gather_us(ctx, s, size, scope, params) if tail_gathers_weights(s) else 0.0
        grad, gather = grad + both - part, gather + part
    dp_cp, edp = data_groups(s, ctx.model.is_moe)
    local = dense / (dp_cp if s.dist_opt else 1) + expert / (edp if s.dist_opt else 1)
    step_us = local * ADAM_TOUCH_BYTES / stream_bytes_per_us(ctx)
    step_us += step_kernels_us(ctx, dense + expert, local)  # zero grads, clip, logging passes
    if swaps(ctx, s):  # host->device and device->host copy of the rank's states (1 GB/s = 1e3 B/us)
        step_us += 2 * local * ctx.opt_state_bytes / (ctx.host_link_gbs * 1e3)
    return grad, gather, step_us


def gather_us(
    ctx: TermContext, s: Strategy, size: int, scope: GroupPlacement, params: float
) -> float:
    """The bf16 parameter all-gather of the distributed optimizer, without its latency."""
    return ctx.comm.transfer_us("all_gather", size, scope, ctx.bpe * params)
