"""The CI metrics files of Megatron-LM and MindSpeed-LLM (JSON, measured values of real runs).

* Megatron-LM functional tests (`tests/functional_tests/test_cases/**/golden_values_*.json`):
  `{metric: {"start_step", "end_step", "step_interval", "values": {step: value}}}` with the
  TensorBoard scalars `iteration-time` (seconds), `mem-allocated-bytes`,
  `mem-max-allocated-bytes` (and `mem-reserved-bytes` where logged), written by the rank that
  owns the TensorBoard writer (the last rank). Older files keep `values` as a list from
  `start_step` in steps of `step_interval`; a step not logged is "nan".
* MindSpeed-LLM CI baselines (`tests/pipeline/**/baseline/*.json`, written by
  tests/test_tools/acquire_json.py from the log): `"time info"` = the `elapsed time per
  iteration (ms)` values in order, `"memo info"` = one `{"rank", "allocated memory", "max
  allocated memory"}` per rank (MB), `"lm loss"` per iteration.
"""

from __future__ import annotations

import math
from typing import Any

from tinker_opt.errors import LogError
from tinker_opt.logs.record import Iteration, MemoryReport, TrainingLog

BYTES_PER_MB = 2**20
_MEGATRON_MEMORY = {
    "mem-allocated-bytes": "allocated_mb",
    "mem-max-allocated-bytes": "max_allocated_mb",
    "mem-reserved-bytes": "reserved_mb",
    "mem-max-reserved-bytes": "max_reserved_mb",
}


def is_megatron_ci(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("iteration-time"), dict)
        and "values" in data["iteration-time"]
    )


def is_mindspeed_ci(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("time info"), list)


def _number(value: Any) -> float | None:
    """A finite float, None for "nan", null or anything else."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def metric_steps(metric: dict[str, Any]) -> dict[int, float]:
    """{step: value} of one Megatron CI metric, both file layouts, logged steps only."""
    values = metric.get("values")
    if isinstance(values, dict):
        pairs = ((int(step), _number(v)) for step, v in values.items())
    elif isinstance(values, list):
        start, every = int(metric.get("start_step", 1)), int(metric.get("step_interval", 1))
        pairs = ((start + i * every, _number(v)) for i, v in enumerate(values))
    else:
        return {}
    return {step: value for step, value in pairs if value is not None}


def read_megatron_ci(data: dict[str, Any], source: str) -> TrainingLog:
    """A TrainingLog of a Megatron-LM CI golden-values file."""
    times = metric_steps(data["iteration-time"])
    steps = sorted(times)
    iterations = tuple(
        Iteration(iteration=step, time_ms=1000.0 * times[step], interval=1) for step in steps
    )
    memory_steps = {
        field: {step: v / BYTES_PER_MB for step, v in metric_steps(data[key]).items()}
        for key, field in _MEGATRON_MEMORY.items()
        if isinstance(data.get(key), dict)
    }
    memory = ()
    if memory_steps:
        last = max(max(values) for values in memory_steps.values() if values)
        # allocated / reserved at the last step; the max-* metrics are running peaks, so the
        # largest logged value is the peak of the run.
        memory = (
            MemoryReport(
                rank=None,
                after_iterations=last,
                **{
                    field: (max(values.values()) if field.startswith("max") else values.get(last))
                    for field, values in memory_steps.items()
                    if values
                },
            ),
        )
    return TrainingLog(source=source, form="megatron-ci-json", iterations=iterations, memory=memory)


def read_mindspeed_ci(data: dict[str, Any], source: str) -> TrainingLog:
    """A TrainingLog of a MindSpeed-LLM CI baseline (iterations numbered from 1)."""
    times = [_number(v) for v in data["time info"]]
    iterations = tuple(
        Iteration(iteration=i, time_ms=t, interval=1)
        for i, t in enumerate(times, start=1)
        if t is not None
    )
    memory = []
    for entry in data.get("memo info") or []:
        if not isinstance(entry, dict):
            raise LogError(f"{source}: 'memo info' entries must be objects, got {entry!r}")
        memory.append(
            MemoryReport(
                rank=int(entry["rank"]) if "rank" in entry else None,
                # One time per iteration means log-interval 1, and Megatron's memory report comes
                # after the first logged iteration with a learning rate > 0 (training_log):
                # iteration 1. ASSUMPTION: the warm-up starts above zero, as in the CI scripts.
                after_iterations=1,
                allocated_mb=_number(entry.get("allocated memory")),
                max_allocated_mb=_number(entry.get("max allocated memory")),
            )
        )
    warnings = ()
    if len(iterations) < len(times):
        warnings = (f"{source}: {len(times) - len(iterations)} 'time info' value(s) not numbers",)
    return TrainingLog(
        source=source,
        form="mindspeed-ci-json",
        iterations=iterations,
        memory=tuple(memory),
        warnings=warnings,
    )
