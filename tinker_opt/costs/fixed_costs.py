"""Costs that do not shrink with the job: the host's time to issue a layer's operators.

An eager PyTorch training step issues every operator from the host (Python, the dispatcher,
autograd, then the kernel launch); the GPU runs behind it. While the GPU work of a stretch is
longer than the host's issue time, the host stays ahead and costs nothing; when it is shorter
(small layers: a small hidden size, a high tp, a micro-batch of 1) the GPU waits for the host, and
the stretch takes the host's time (Holistic Trace Analysis, facebookresearch/HolisticTraceAnalysis
docs/source/features/cuda_kernel_launch_stats.rst: "short GPU kernels ... the CPU is the
bottleneck"). So per layer and micro-batch each pass costs

    max(GPU time of the pass, host ops of the pass x host_op_us)

and the term is the part above the GPU time, `exposed = max(0, host - gpu)`: zero for layers
whose GPU work hides the host (large models), so large jobs are priced as before.

* Host ops of a pass, dense layers: the operators the analytic trace records for the block
  (blocks.csv `fwd_host_ops` / `bwd_host_ops`, the aten ops of the reference layer's forward and
  backward, profile/analytic.py block_row), plus the pass's tensor-parallel collectives
  (Megatron's RowParallelLinear / ColumnParallelLinear mappings,
  megatron/core/tensor_parallel/mappings.py: one all-reduce per attention and per MLP each way,
  an all-gather and a reduce-scatter each with sequence parallelism), each issued like one
  operator (ASSUMPTION). Measured and Tinker profiles carry no op count (0): their block times ran
  on the device with the host in them.
* Host ops of a pass, MoE layers: costs/moe_host.py `host_ops` (the layer's operators and the
  local experts' grouped-GEMM pieces); the dispatcher's per-layer host sync empties the GPU's queue
  there, so the layer's time is at least the host's (moe_host.py's docstring). None where the
  profile's block times ran the experts for real (Tinker folders, `ep_comm_in_times`).
* A full-recompute layer reruns its forward inside the backward (Megatron's
  `CheckpointFunction`): its host time again, exposed the same way.
* GPU time of a pass: the block's time plus the layer's extras (costs/terms.py `_extra_us`: the
  unaligned pace, the dispatcher's local sorts, the unfused weight-gradient add) and its exposed
  collectives (NCCL / HCCL kernels run on the device).
* `host_op_us`: the hardware description's (hardware/__init__.py DEFAULT_HOST_OP_US and its
  source where the file states none; 0 prices no host time); the one figure a calibration from
  logs scales.

The exposed host time of every layer, dense or MoE, is the breakdown part `host_ms` of the
Evaluation (costs/evaluate.py; `calibrate --log` keeps it as priced, verbs/log_factors.py
HOST_TERMS) and part of the layer time the solvers' coefficients hold (costs/terms.py), so
`cpsat = milp = enum`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinker_opt.choices import Recompute
from tinker_opt.costs import moe_host

if TYPE_CHECKING:
    from tinker_opt.costs.profile_table import BlockCost
    from tinker_opt.costs.term_context import TermContext
    from tinker_opt.strategy import Strategy


@dataclass(frozen=True)
class HostTime:
    """Host time of one layer per micro-batch above its GPU time (microseconds)."""

    exposed_us: float
    """Forward + backward: the part of the host's issue time the GPU waits for."""
    recompute_exposed_us: float
    """The recomputed forward's (full recompute)."""


def tp_collectives_per_pass(ctx: TermContext, s: Strategy) -> int:
    """Tensor-parallel collectives one layer issues per pass: the attention's and the MLP's (one
    all-reduce each, or an all-gather and a reduce-scatter each with sequence parallelism); none
    where the block times include them (Tinker folders) or tp is 1."""
    if s.tp == 1 or ctx.tp_comm_in_times:
        return 0
    return 4 if s.sp else 2


def host_ops(ctx: TermContext, kind: str, s: Strategy, cost: BlockCost) -> tuple[int, int]:
    """(forward, backward) operators the host issues for one layer of `kind` and micro-batch
    (module docstring); (0, 0) where the profile's times hold the host (no op count, or a Tinker
    folder's MoE layers)."""
    if kind == "moe" and ctx.model.is_moe:
        return (0, 0) if ctx.ep_comm_in_times else moe_host.host_ops(ctx, s)
    if not (cost.fwd_host_ops or cost.bwd_host_ops):
        return 0, 0
    collectives = tp_collectives_per_pass(ctx, s)
    return cost.fwd_host_ops + collectives, cost.bwd_host_ops + collectives


def layer_host_time(
    ctx: TermContext,
    kind: str,
    s: Strategy,
    cost: BlockCost,
    gpu_fwd_us: float,
    gpu_bwd_us: float,
) -> HostTime:
    """Exposed host time of one layer of `kind` per micro-batch: host operators x `host_op_us`
    above the pass's GPU time `gpu_fwd_us` / `gpu_bwd_us` (block + extras + exposed
    collectives), forward and backward apart (module docstring)."""
    fwd_ops, bwd_ops = host_ops(ctx, kind, s, cost)
    per_op = ctx.rates.host_op_us
    fwd = max(0.0, fwd_ops * per_op - gpu_fwd_us)
    bwd = max(0.0, bwd_ops * per_op - gpu_bwd_us)
    return HostTime(fwd + bwd, fwd if s.recompute == Recompute.FULL else 0.0)
