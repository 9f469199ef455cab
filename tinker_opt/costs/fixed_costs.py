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

* Host ops of a pass: the operators the analytic trace records for the block (blocks.csv
  `fwd_host_ops` / `bwd_host_ops`, the aten ops of the reference layer's forward and backward,
  profile/analytic.py block_row), plus the pass's tensor-parallel collectives (Megatron's
  RowParallelLinear / ColumnParallelLinear mappings, megatron/core/tensor_parallel/mappings.py:
  one all-reduce per attention and per MLP each way, an all-gather and a reduce-scatter each with
  sequence parallelism), each issued like one operator (ASSUMPTION). Measured and Tinker
  profiles carry no op count (0): their block times ran on the device with the host in them.
* A full-recompute layer reruns its forward inside the backward (Megatron's
  `CheckpointFunction`): its host time again, exposed the same way.
* GPU time of a pass: the block's time plus its exposed collectives (NCCL kernels run on the GPU).
* `host_op_us`: the hardware description's (hardware/__init__.py DEFAULT_HOST_OP_US and its
  source where the file states none); the one figure a calibration from logs scales. The MoE
  layers' wait for the host (costs/moe_host.py) uses the same figure with its own operator count.

The exposed host time is a breakdown part of the Evaluation (`host_ms`, costs/evaluate.py) and
part of the layer time the solvers' coefficients hold (costs/terms.py), so `cpsat = milp = enum`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinker_opt.choices import Recompute

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


def layer_host_time(
    ctx: TermContext,
    kind: str,
    s: Strategy,
    cost: BlockCost,
    fwd_comm_us: float,
    bwd_comm_us: float,
) -> HostTime:
    """Exposed host time of one layer of `kind` per micro-batch (module docstring); MoE layers
    are priced by costs/moe_host.py (their host sync and expert operators), not here."""
    if not (cost.fwd_host_ops or cost.bwd_host_ops) or (kind == "moe" and ctx.model.is_moe):
        return HostTime(0.0, 0.0)
    per_op = ctx.rates.host_op_us
    collectives = tp_collectives_per_pass(ctx, s)
    host_fwd = (cost.fwd_host_ops + collectives) * per_op
    host_bwd = (cost.bwd_host_ops + collectives) * per_op
    fwd = max(0.0, host_fwd - cost.fwd_us - fwd_comm_us)
    bwd = max(0.0, host_bwd - cost.bwd_us - bwd_comm_us)
    return HostTime(fwd + bwd, fwd if s.recompute == Recompute.FULL else 0.0)
