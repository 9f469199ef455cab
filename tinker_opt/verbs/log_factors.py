"""Which factors a set of training logs determines, and their fit (`calibrate --log`).

Each log gives one number, its steady-state iteration time; the prediction of the same job splits
into the part that runs at the device's efficiency (`device`), the exposed communication
(`comm`), the description's fixed time per micro-batch (`fixed`) and nothing else. The factors:

* `device` (always): how much slower the device runs than its efficiency curves say;
* `fixed` (two or more logs of jobs that differ in size: model shape or tokens per iteration):
  the time per micro-batch and stage that does not shrink with the work (host launches, data
  loading, schedule bookkeeping), in ms; its column is the iteration time one ms of it adds to
  each log's job (measured by pricing the job again with it, so the pipeline schedule's count of
  micro-batch slots is the cost model's own);
* `comm` (logs of different layouts, when a log is left over after the others): how much slower
  the links run than described. Where the logs do not determine it, the links follow the device
  factor: one time cannot say whether the described device or the described links are off, and
  the logs of one machine say they are off alike (the Megatron CI 7B job on GB200 and on H100,
  laid out tp 1 pp 4 (no tensor-parallel traffic) and tp 4 pp 1 (a quarter of its predicted time
  in tensor-parallel collectives), is predicted 55 % / 54 % and 12 % / 10 % too fast on the two
  machines: the same share whatever the communication share), so a factor on the device alone
  would carry to a job of another communication share wrongly (GB200: +13 % / -13 %).

Never more factors than logs, and a factor only where the logs' columns are not alike
(hardware/fit.py well_conditioned); what is not fitted is kept as the description has it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tinker_opt.hardware.fit import FitResult, fit_factors, well_conditioned

DEVICE_TERMS = ("compute_ms", "recompute_ms", "bubble_ms", "optimizer_ms")
"""Breakdown terms (costs/evaluate.py _breakdown) that run at the device's efficiency."""
COMM_TERMS = ("comm_ms", "dp_sync_ms")
"""Breakdown terms of exposed communication (the links' factor)."""
FIXED_COST_TERMS = ("fixed_ms",)
"""Breakdown terms of fixed time (the description's fixed_ms_per_microbatch)."""
HOST_TERMS = ("host_ms",)
"""The host's issue time above the GPU's, dense and MoE layers alike (costs/fixed_costs.py
layer_host_time): priced from operator counts, at neither the device's efficiency nor a fitted
figure, so kept as it is."""


@dataclass(frozen=True)
class LogSplit:
    """One log's measured time and its prediction split by what scales it."""

    device_ms: float
    comm_ms: float
    fixed_ms: float
    measured_ms: float
    size: str
    """The job's size (model shape, tokens per iteration) as a comparable key."""
    host_ms: float = 0.0
    """The host's issue time above the GPU's, kept as priced."""


@dataclass(frozen=True)
class Factors:
    """The fitted factors (None: not fitted, the description's value kept) and what fixed them."""

    scale: float
    comm: float | None
    fixed_ms: float | None
    fit: FitResult
    fitted: tuple[str, ...] = field(default=())
    """One line per factor: its value and the logs that determined it."""
    links_follow_device: bool = False
    """No communication factor of its own: the links are slowed by the device factor."""


def split_of(result: dict[str, Any]) -> LogSplit:
    """The split of one `check` result (its breakdown, measured time and job size)."""
    parts = result["predicted"]["time_breakdown_ms"]
    return LogSplit(
        device_ms=sum(parts.get(k, 0.0) for k in DEVICE_TERMS),
        comm_ms=sum(parts.get(k, 0.0) for k in COMM_TERMS),
        fixed_ms=sum(parts.get(k, 0.0) for k in FIXED_COST_TERMS),
        host_ms=sum(parts.get(k, 0.0) for k in HOST_TERMS),
        measured_ms=result["measured"]["iteration_time_ms"],
        size=json.dumps(result["job"].get("size", {}), sort_keys=True),
    )


def sizes_differ(splits: list[LogSplit]) -> bool:
    """Whether two or more of the logs ran jobs of different size."""
    return len({split.size for split in splits}) > 1


def _columns(splits: list[LogSplit], fixed_slots: list[float] | None) -> dict[str, Sequence[float]]:
    """The factor columns the logs determine, in order of preference (device, fixed, comm)."""
    measured = [s.measured_ms for s in splits]
    chosen: dict[str, Sequence[float]] = {"device": [s.device_ms for s in splits]}
    candidates: dict[str, Sequence[float]] = {"comm": [s.comm_ms for s in splits]}
    if fixed_slots is not None:
        candidates = {"fixed": fixed_slots, **candidates}
    for name, column in candidates.items():
        if len(chosen) >= len(splits) or not any(column):
            continue
        if well_conditioned([*chosen.values(), column], measured):
            chosen[name] = column
    return chosen


def fit_logs(
    splits: list[LogSplit], sources: list[str], fixed_slots: list[float] | None
) -> Factors:
    """Fit what the logs determine. `fixed_slots`: per log, the iteration time one ms of fixed
    time per micro-batch adds (None: the jobs are of one size, no fixed cost is fitted). Where the
    logs do not determine a communication factor of its own, the links follow the device factor
    (module docstring)."""
    columns = _columns(splits, fixed_slots)
    tied = "comm" not in columns
    if tied:
        columns["device"] = [s.device_ms + s.comm_ms for s in splits]
    kept = [(0.0 if "fixed" in columns else s.fixed_ms) + s.host_ms for s in splits]
    measured = [s.measured_ms for s in splits]
    values, fit = fit_factors(columns, kept, measured)
    names = ", ".join(sources)
    what = {
        "device": "device time x {:.4f}" + (" and communication with it" if tied else ""),
        "comm": "communication x {:.4f}",
        "fixed": "fixed time {:.2f} ms per micro-batch and stage",
    }
    fitted = tuple(
        f"{what[name].format(value)} (from {len(splits)} log(s): {names})"
        for name, value in values.items()
    )
    return Factors(
        scale=values["device"],
        comm=values.get("comm"),
        fixed_ms=values.get("fixed"),
        fit=fit,
        fitted=fitted,
        links_follow_device=tied,
    )
