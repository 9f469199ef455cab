"""Least-squares fits of a hardware description's parameters to measured times (numpy only).

* `fit_efficiency`: the saturating matmul and memory curves (efficiency.py) from measured block
  times and the traced ops of each block. With the op class (compute- or memory-bound) fixed, a
  block's modelled time is linear in four unknowns,

      t = u1 * sum_C flops/peak + u2 * sum_C 1/peak + v1 * sum_M bytes/bw + v2 * sum_M 1/bw,
      u1 = 1/max_eff_matmul, u2 = half_size_matmul/max_eff_matmul, v1, v2 likewise for memory,

  so the fit alternates: classify each op under the current curves, solve the bounded linear
  least squares (efficiency <= 1, half sizes >= 0), repeat until the classes stop changing.
  Residuals are relative (each row weighted by 1/measured), so small blocks count as much as big
  ones.
* `fit_link`: latency and bandwidth of one network level from measured collectives, with the
  alpha-beta ring formulas of comm_cost (time = steps x latency + traffic / bandwidth);
  regime_fit.py fits the same lines in a library's size regimes.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tinker_opt.comm_cost import latency_steps, traffic_factor
from tinker_opt.hardware.efficiency import DeviceEfficiency, EfficiencyCurve

MAX_ROUNDS = 30


@dataclass(frozen=True)
class TimedOps:
    """One measured time and the ops that produced it (arrays aligned per op)."""

    flops: np.ndarray
    bytes_moved: np.ndarray
    peak_flops_per_us: np.ndarray
    measured_us: float


@dataclass(frozen=True)
class FitResult:
    """Fitted values and how well they explain the data."""

    values: tuple[float, ...]
    mean_abs_rel_error: float
    max_abs_rel_error: float
    num_samples: int


def bounded_lstsq(a: np.ndarray, b: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """min ||a x - b|| subject to x >= lower, exactly, by trying every set of bound-active variables.

    Fine for the handful of unknowns here (2^n small solves); the optimum satisfies the KKT
    conditions with some subset of variables at their bounds and the rest a free LS solution."""
    n = a.shape[1]
    best, best_cost = lower.copy(), np.inf
    for active in itertools.product((False, True), repeat=n):
        x = lower.copy()
        free = [i for i in range(n) if not active[i]]
        if free:
            rhs = (
                b
                - a[:, [i for i in range(n) if active[i]]]
                @ lower[[i for i in range(n) if active[i]]]
            )
            x[free] = np.linalg.lstsq(a[:, free], rhs, rcond=None)[0]
        if np.all(x >= lower - 1e-12):
            cost = float(np.sum((a @ x - b) ** 2))
            if cost < best_cost:
                best, best_cost = x, cost
    return best


def _curves(u: np.ndarray) -> tuple[EfficiencyCurve, EfficiencyCurve]:
    return (
        EfficiencyCurve(max_efficiency=float(1 / u[0]), half_size=float(u[1] / u[0])),
        EfficiencyCurve(max_efficiency=float(1 / u[2]), half_size=float(u[3] / u[2])),
    )


def _design_row(
    s: TimedOps, matmul: EfficiencyCurve, memory: EfficiencyCurve, bw: float
) -> np.ndarray:
    compute = matmul.time_us(s.flops, s.peak_flops_per_us)
    mem = memory.time_us(s.bytes_moved, bw)
    is_c = (compute >= mem) & (s.flops > 0)
    is_m = ~is_c & (s.bytes_moved > 0)
    return np.array(
        [
            np.sum(s.flops[is_c] / s.peak_flops_per_us[is_c]),
            np.sum(1 / s.peak_flops_per_us[is_c]),
            np.sum(s.bytes_moved[is_m]) / bw,
            np.sum(is_m) / bw,
        ]
    )


def fit_efficiency(
    samples: Sequence[TimedOps],
    memory_bytes_per_us: float,
    start: DeviceEfficiency | None = None,
) -> tuple[DeviceEfficiency, FitResult]:
    """Fit both saturating curves to measured times; returns the curves and the fit's errors."""
    samples = [s for s in samples if s.measured_us > 0 and len(s.flops)]
    if not samples:
        raise ValueError("no measured sample with ops to fit")
    start = start or DeviceEfficiency()
    matmul, memory = start.matmul, start.memory
    weights = np.array([1 / s.measured_us for s in samples])
    target = np.ones(len(samples))  # measured / measured
    lower = np.array([1.0, 0.0, 1.0, 0.0])
    u = None
    for _ in range(MAX_ROUNDS):
        a = (
            np.array([_design_row(s, matmul, memory, memory_bytes_per_us) for s in samples])
            * weights[:, None]
        )
        # A column with no data (e.g. no compute-bound op anywhere) keeps its starting value.
        start_u = np.array(
            [
                1 / matmul.max_efficiency,
                matmul.half_size / matmul.max_efficiency,
                1 / memory.max_efficiency,
                memory.half_size / memory.max_efficiency,
            ]
        )
        empty = ~np.any(a > 0, axis=0)
        fixed_lower = np.where(empty, start_u, lower)
        new_u = bounded_lstsq(
            np.where(empty, 0.0, a), target - a[:, empty] @ start_u[empty], fixed_lower
        )
        new_u[empty] = start_u[empty]
        if u is not None and np.allclose(new_u, u, rtol=1e-9):
            break
        u = new_u
        matmul, memory = _curves(u)
    fitted = DeviceEfficiency(matmul=matmul, memory=memory)
    return fitted, _efficiency_errors(
        samples, fitted, memory_bytes_per_us, tuple(float(x) for x in u)
    )


def _efficiency_errors(
    samples: Sequence[TimedOps], eff: DeviceEfficiency, bw: float, values: tuple[float, ...]
) -> FitResult:
    errors = []
    for s in samples:
        t = np.maximum(
            eff.matmul.time_us(s.flops, s.peak_flops_per_us), eff.memory.time_us(s.bytes_moved, bw)
        )
        errors.append(abs(float(t.sum()) / s.measured_us - 1))
    return FitResult(
        values=values,
        mean_abs_rel_error=float(np.mean(errors)),
        max_abs_rel_error=float(np.max(errors)),
        num_samples=len(samples),
    )


def link_columns(
    ops, group_sizes, nbytes, shares, times_us
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(latency steps, traffic over the link's share in bytes, time us, kept) of the measured
    collectives with a time and traffic (`kept`: their mask over the inputs)."""
    steps = np.array(
        [latency_steps(o, g) for o, g in zip(ops, group_sizes, strict=True)], dtype=float
    )
    traffic = np.array(
        [traffic_factor(o, g) * b for o, g, b in zip(ops, group_sizes, nbytes, strict=True)],
        dtype=float,
    ) / np.asarray(shares if shares is not None else [1.0] * len(steps), dtype=float)
    t = np.asarray(times_us, dtype=float)
    keep = (t > 0) & (traffic > 0)
    if keep.sum() < 2:
        raise ValueError("need at least two measured collectives with traffic to fit a link")
    return steps[keep], traffic[keep], t[keep], keep


def relative_line(
    steps: np.ndarray, traffic: np.ndarray, t: np.ndarray
) -> tuple[float, float, np.ndarray]:
    """(latency us, 1 / bandwidth, relative residuals): time = steps x latency + traffic /
    bandwidth, relative least squares (each row weighted by 1 / measured), latency >= 0."""
    w = 1 / t
    a = np.column_stack([steps, traffic / 1e3]) * w[:, None]
    lower = np.array([0.0, 1e-9])
    free = _two_column_lstsq(a)  # the optimum when within the bounds
    latency_us, inv_bw = free if np.all(free >= lower) else bounded_lstsq(a, np.ones(len(t)), lower)
    return float(latency_us), float(inv_bw), (steps * latency_us + traffic / 1e3 * inv_bw) / t - 1


def _two_column_lstsq(a: np.ndarray) -> np.ndarray:
    """min ||a x - 1|| for two columns, by the normal equations of the columns scaled to unit
    length (a 2 x 2 solve: the cost model fits every curve of a comm table this way, many times
    per search); lstsq where the columns are (nearly) parallel."""
    norms = np.linalg.norm(a, axis=0)
    if len(a) < 2 or not np.all(norms > 0):
        return np.linalg.lstsq(a, np.ones(len(a)), rcond=None)[0]
    u = a / norms
    g11, g12, g22 = float(u[:, 0] @ u[:, 0]), float(u[:, 0] @ u[:, 1]), float(u[:, 1] @ u[:, 1])
    det = g11 * g22 - g12 * g12
    if det < 1e-12:
        return np.linalg.lstsq(a, np.ones(len(a)), rcond=None)[0]
    b1, b2 = float(u[:, 0].sum()), float(u[:, 1].sum())
    return np.array([(g22 * b1 - g12 * b2) / det, (g11 * b2 - g12 * b1) / det]) / norms


def fit_result(values: tuple[float, ...], rel: np.ndarray) -> FitResult:
    rel = np.abs(rel)
    return FitResult(values, float(rel.mean()), float(rel.max()), len(rel))


def fit_link(
    ops: Sequence[str],
    group_sizes: Sequence[int],
    nbytes: Sequence[float],
    times_us: Sequence[float],
    shares: Sequence[float] | None = None,
) -> tuple[float, float, FitResult]:
    """Latency (us) and bandwidth (GB/s) of one network level from measured collectives.

    `shares`: the fraction of the link each measurement's group gets, as the cost model prices
    it (a full mesh's (g - 1) / mesh_links, the network cards per device; default 1)."""
    steps, traffic, t, _ = link_columns(ops, group_sizes, nbytes, shares, times_us)
    latency_us, inv_bw, rel = relative_line(steps, traffic, t)
    return latency_us, 1 / inv_bw, fit_result((latency_us, 1 / inv_bw), rel)


MIN_COMM_CONDITION = 0.05
"""Smallest ratio of the singular values of the logs' design (well_conditioned) at which they
determine one more factor (communication, fixed time) beside the device factor.
ASSUMPTION: a threshold of this code, not a sourced figure; below it the logs' communication
shares are too alike (the same layout twice) and only the device factor is fitted."""


MIN_FACTOR = 0.05
"""Lower bound of a fitted device or link factor."""


def fit_factors(
    columns: Mapping[str, Sequence[float]],
    kept_ms: Sequence[float],
    measured_ms: Sequence[float],
) -> tuple[dict[str, float], FitResult]:
    """measured ~ sum(factor[k] * columns[k]) + kept, relative least squares over the logs.

    `columns` are the parts of each log's modelled time a factor scales: `device` (time at the
    device's efficiency), `comm` (exposed communication) and `fixed` (the iteration time one
    millisecond of fixed time per micro-batch adds: the factor is then that time in ms, >= 0);
    `kept_ms` the rest, kept as described. The caller names at most as many columns as logs
    (verbs/calibrate_log.py chooses them); device and link factors are >= MIN_FACTOR."""
    measured = np.asarray(measured_ms, dtype=float)
    names = list(columns)
    design = np.column_stack([np.asarray(columns[n], dtype=float) for n in names])
    target = (measured - np.asarray(kept_ms, dtype=float)) / measured
    design = design / measured[:, None]
    lower = np.array([0.0 if name == "fixed" else MIN_FACTOR for name in names])
    values = bounded_lstsq(design, target, lower)
    rel = np.abs(design @ values - target)
    fit = FitResult(
        values=tuple(float(v) for v in values),
        mean_abs_rel_error=float(rel.mean()),
        max_abs_rel_error=float(rel.max()),
        num_samples=len(measured),
    )
    return {name: float(v) for name, v in zip(names, values, strict=True)}, fit


def well_conditioned(columns: Sequence[Sequence[float]], measured_ms: Sequence[float]) -> bool:
    """Whether the logs determine a factor per column: the smallest singular value of the
    relative design, each column scaled to unit length (a column's unit, ms of device time or
    iteration ms per ms of fixed time, says nothing of its direction), is above
    MIN_COMM_CONDITION times the largest (columns too alike across the logs, e.g. two logs of
    one job, determine only their sum)."""
    measured = np.asarray(measured_ms, dtype=float)
    design = np.column_stack([np.asarray(c, dtype=float) for c in columns]) / measured[:, None]
    if design.shape[0] < design.shape[1] or not np.all(np.linalg.norm(design, axis=0) > 0):
        return False
    design = design / np.linalg.norm(design, axis=0)
    singular = np.linalg.svd(design, compute_uv=False)
    return bool(singular[-1] > MIN_COMM_CONDITION * singular[0])
