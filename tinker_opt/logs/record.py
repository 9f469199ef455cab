"""What a training log says, whatever its form: iteration times, per-rank memory, the arguments.

Every reader (one module per log form) returns a `TrainingLog`; `steady.py` picks the steady-state
iterations and `measured()` sums them up. Times are milliseconds, memory MB (2**20 bytes, as
Megatron's memory report prints it: megatron/training/utils.py report_memory divides by 2**20).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class Iteration:
    """One logged iteration (or the average over a log interval, as Megatron prints it)."""

    iteration: int
    """The iteration number the line ends at (Megatron: `iteration N/ total`)."""
    time_ms: float
    """Elapsed time per iteration, averaged over the log interval when the log prints averages."""
    tflops_per_device: float | None = None
    """`throughput per GPU (TFLOP/s/GPU)` when the run logs it (--log-throughput)."""
    skipped: int = 0
    """Iterations of the interval whose optimizer step was skipped (fp16 loss-scale overflow)."""
    interval: int = 1
    """Iterations the line averages over (the difference to the previous logged iteration)."""
    memory_used_fraction: float | None = None
    """ROCm/Megatron-LM's `mem usages` (1 - free / total device memory after the interval)."""


@dataclass(frozen=True, kw_only=True)
class MemoryReport:
    """One `[Rank R] (after N iterations) memory (MB)` line, or one rank's memory metrics."""

    rank: int | None
    """The rank that printed it; None where the form does not say (Megatron CI: the last rank)."""
    after_iterations: int | None
    allocated_mb: float | None = None
    max_allocated_mb: float | None = None
    reserved_mb: float | None = None
    max_reserved_mb: float | None = None


@dataclass(frozen=True, kw_only=True)
class TrainingLog:
    """A parsed training log: its form, iterations, memory reports and argument dump."""

    source: str
    form: str
    """megatron-text | nemo-text | tensorboard | megatron-ci-json | mindspeed-ci-json."""
    iterations: tuple[Iteration, ...]
    memory: tuple[MemoryReport, ...] = ()
    arguments: dict[str, str] | None = None
    """Megatron's argument dump (`name ....... value`), None when the log has none."""
    warnings: tuple[str, ...] = field(default=())
    """What was skipped or assumed while reading (truncated lines, earlier runs, ...)."""
    stopped_at: str | None = None
    """The first iteration line that could not be read (`line N: text`), None when all were."""
