"""What the framework allocates and keeps beyond the modelled terms: memory you can launch on.

The modelled stage memory (weights, gradients, optimizer states, activations, transients;
terms.py / stage_terms.py) is what the blocks hold. A run also has, per rank:

* inside the caching allocator (in `max allocated`, Megatron's memory report): nothing beyond
  the modelled terms.
  - The fp32 logits of the loss are modelled already: Megatron computes
    `vocab_parallel_cross_entropy(logits.float(), labels)` (megatron/core/models/common/
    language_module/language_module.py, compute_language_model_loss), and the profiled head
    does the same (profile/tp_emulation.py VocabParallelCrossEntropy casts to fp32 and keeps the
    fp32 softmax for its backward), so the head's activation and transient bytes hold them;
    adding them here counted them twice (the GB200 CI log: 4100 MB too many on its last rank);
  - optimizer temporaries: none; Megatron's Adam is the fused multi-tensor kernel of TE / apex
    (megatron/core/optimizer/__init__.py), MindSpeed's torch_npu npu_apply_adam_w, both in place;
* the allocator's reserve above the allocated peak (`max reserved`): PyTorch's caching
  allocator rounds large blocks to 2 MiB and carves requests under 10 MiB from 20 MiB segments
  (c10/cuda/CUDACachingAllocator.cpp kRoundLarge, kLargeBuffer, kMinLargeAlloc).
  ASSUMPTION: one 20 MiB segment plus 1 % of the peak stay reserved and unused (the V100 log
  shows 19 MB, 0.7 %); expandable segments (PYTORCH_*_ALLOC_CONF) would lower it;
* outside the allocator (device memory nobody's `allocated` counts):
  - the device context: ASSUMPTION 500 MiB for a CUDA context with lazy module loading, cuBLAS
    and cuDNN handles; 1 GiB for the CANN runtime on Ascend (not measured here);
  - communication buffers, one set per communicator a rank uses: HCCL 2 x HCCL_BUFFSIZE
    (default 200 MB; CANN docs, HCCL_BUFFSIZE: "each communicator occupies 2 x HCCL_BUFFSIZE");
    NCCL NCCL_BUFFSIZE (4 MiB, NCCL docs env) per channel and direction, ASSUMPTION 16 channels
    x 2 directions = 128 MiB per communicator. The communicators: the world group (barriers,
    logging) and each parallel group of more than one rank (tp, cp, dp, pp, ep).

The first-iteration peak: Megatron prints its memory report once, after the first logged
iteration with a learning rate above zero (megatron/training/training.py training_log,
"Report memory after optimizer state has been initialized"). Adam's two moments are created at
the first optimizer step (torch.optim lazily; Megatron's optimizers alike), so a report after
iteration 1 holds max(forward/backward without the moments, the step with them), not the
steady-state peak of later iterations (`first_iteration_peak_mb`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tinker_opt.costs.breakdown import StageBreakdown

MIB = 2**20
ALLOCATOR_SEGMENT_MB = 20.0
ALLOCATOR_FRAGMENTATION = 0.01
CONTEXT_MB = {"cuda": 500.0, "npu": 1024.0}
COMM_BUFFER_MB = {"cuda": 16 * 2 * 4.0, "npu": 2 * 200 * 1e6 / MIB}
ADAM_MOMENT_BYTES = 8
"""Two fp32 moments per parameter (of the optimizer's state bytes per parameter)."""


@dataclass(frozen=True, kw_only=True)
class FrameworkMemory:
    """The framework's memory of one strategy on one kind of device, per rank, in MB."""

    accelerator: str
    """cuda | npu: which context and communication library."""
    context_mb: float
    comm_buffers_mb: float
    num_communicators: int

    @staticmethod
    def reserved_mb(allocated_mb: float) -> float:
        """`max reserved` of an allocated peak (the allocator's reserve; ASSUMPTION above)."""
        return allocated_mb * (1 + ALLOCATOR_FRAGMENTATION) + ALLOCATOR_SEGMENT_MB

    def device_mb(self, reserved_mb: float) -> float:
        """What the rank takes of the device: reserved + context + communication buffers."""
        return reserved_mb + self.context_mb + self.comm_buffers_mb

    def outside_allocator_mb(self) -> float:
        return self.context_mb + self.comm_buffers_mb


def accelerator_of(hardware_name: str | None, device_kind: str | None = None) -> str:
    """npu for Ascend descriptions / profiles, cuda otherwise."""
    text = f"{hardware_name or ''} {device_kind or ''}".lower()
    return "npu" if ("ascend" in text or "npu" in text or "910" in text) else "cuda"


def communicators(strategy) -> int:
    """The world group and every parallel group of more than one rank (Megatron's groups that
    run collectives; parallel_state.py)."""
    sizes = (strategy.tp, strategy.cp, strategy.dp, strategy.pp, strategy.ep)
    return 1 + sum(1 for size in sizes if size > 1)


def framework_memory(strategy, accelerator: str) -> FrameworkMemory:
    """The framework's terms for `strategy` (see the module docstring for each source)."""
    count = communicators(strategy)
    return FrameworkMemory(
        accelerator=accelerator,
        context_mb=CONTEXT_MB[accelerator],
        comm_buffers_mb=count * COMM_BUFFER_MB[accelerator],
        num_communicators=count,
    )


def first_iteration_peak_mb(
    stage: StageBreakdown, allocated_mb: float, bytes_per_state: float
) -> float:
    """A stage's peak over iteration 1 only: forward/backward before Adam's moments exist, or the
    step with them (the module docstring); `bytes_per_state` = optimizer bytes per parameter."""
    moments_mb = stage.optimizer_mb * min(1.0, ADAM_MOMENT_BYTES / bytes_per_state)
    static_mb = stage.weights_mb + stage.gradients_mb + stage.optimizer_mb
    return max(allocated_mb - moments_mb, static_mb)


def framework_stages(
    stages: tuple[StageBreakdown, ...], fm: FrameworkMemory
) -> tuple[StageBreakdown, ...]:
    """The stages with `allocated_mb` (the modelled peak: everything the allocator hands out is
    modelled), `reserved_mb` and `device_mb` filled in."""
    out = []
    for stage in stages:
        allocated = stage.memory_mb
        reserved = fm.reserved_mb(allocated)
        device = fm.device_mb(reserved)
        out.append(
            dataclasses.replace(
                stage, allocated_mb=allocated, reserved_mb=reserved, device_mb=device
            )
        )
    return tuple(out)


def framework_summary(stages: tuple[StageBreakdown, ...], fm: FrameworkMemory) -> dict:
    """The Evaluation's `framework_memory` entry: the terms and the peaks over the stages."""
    return {
        "accelerator": fm.accelerator,
        "peak_allocated_mb": max(s.allocated_mb or 0.0 for s in stages),
        "peak_reserved_mb": max(s.reserved_mb or 0.0 for s in stages),
        "peak_device_mb": max(s.device_mb or 0.0 for s in stages),
        "context_mb": fm.context_mb,
        "comm_buffers_mb": fm.comm_buffers_mb,
        "num_communicators": fm.num_communicators,
    }


MAX_COMMUNICATORS = 6
"""The world group and the five parallel groups (tp, cp, dp, pp, ep): the most a rank keeps."""
TINKER_DEFAULT_LIMIT_MB = 57000.0
"""Tinker's default budget for a 64 GB device (its docs), used when no device memory is known."""


def launch_budget_mb(device_memory_mb: float, accelerator: str) -> float:
    """The modelled memory a rank may use so that its device peak fits `device_memory_mb`:
    the device less the context, the communication buffers of every group a rank can have and
    the allocator's reserve (reserved = allocated x (1 + fragmentation) + one segment). The
    allocated peak is the modelled memory (fp32 logits included), so a strategy that `fits`
    this budget has a device peak (`device_mb`) within the device: one definition of what fits."""
    outside = CONTEXT_MB[accelerator] + MAX_COMMUNICATORS * COMM_BUFFER_MB[accelerator]
    return (device_memory_mb - outside - ALLOCATOR_SEGMENT_MB) / (1 + ALLOCATOR_FRAGMENTATION)
