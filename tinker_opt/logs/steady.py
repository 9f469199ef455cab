"""The steady state of a run: which logged iterations to trust, and what they measure.

Rule (stated in every `check` result): drop the first `skip_first` logged records (default 1:
the first interval holds the start-up, i.e. CUDA/CANN context and NCCL/HCCL communicator
creation, allocator growth, kernel autotuning and the first data loads; the shared examples show
it, 995 ms vs ~450 ms on the V100 log, 50724 ms vs ~1030 ms on the MindSpeed CI log), and every
interval in which all iterations skipped the optimizer step (fp16 loss-scale overflow: no
optimizer step, so not a training iteration). The measured iteration time is the median of what
remains (robust to a checkpoint save or a garbage-collection pause inside one interval), each
record weighted once whatever its log interval.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from tinker_opt.errors import LogError
from tinker_opt.logs.record import Iteration, TrainingLog

DEFAULT_SKIP_FIRST = 1


@dataclass(frozen=True, kw_only=True)
class SteadyState:
    """The iterations used and what they measure."""

    used: tuple[Iteration, ...]
    dropped: tuple[int, ...]
    """Iteration numbers of the records left out."""
    rule: str
    iteration_time_ms: float
    """Median elapsed time per iteration over `used`."""
    tflops_per_device: float | None
    """Median of the logged TFLOP/s per device over `used`, None when not logged."""


def steady_state(log: TrainingLog, skip_first: int = DEFAULT_SKIP_FIRST) -> SteadyState:
    """Apply the rule above; a LogError when no iteration is left."""
    records = log.iterations
    if not records and log.stopped_at:
        raise LogError(
            f"{log.source}: no iteration line holds a whole time ({log.form}); stopped at "
            f"{log.stopped_at}: no `elapsed time per iteration (ms): X |` field"
        )
    if not records:
        raise LogError(f"{log.source} holds no iteration time ({log.form}); is it a training log?")
    if skip_first < 0:
        raise LogError(f"--skip-first must be >= 0, got {skip_first}")
    keep = [r for index, r in enumerate(records) if index >= skip_first and r.skipped < r.interval]
    if not keep:
        raise LogError(
            f"{log.source}: all {len(records)} logged iteration(s) are warm-up or skipped steps; "
            f"a longer run is needed (or lower --skip-first, now {skip_first})"
        )
    used_numbers = {r.iteration for r in keep}
    tflops = [r.tflops_per_device for r in keep if r.tflops_per_device is not None]
    return SteadyState(
        used=tuple(keep),
        dropped=tuple(r.iteration for r in records if r.iteration not in used_numbers),
        rule=(
            f"median of {len(keep)} logged record(s) after dropping the first {skip_first} "
            "(start-up) and those whose optimizer steps were all skipped"
        ),
        iteration_time_ms=statistics.median(r.time_ms for r in keep),
        tflops_per_device=statistics.median(tflops) if tflops else None,
    )
