"""Size regimes of measured collectives (comm_cost.Regime): where a library switches protocol.

A link's curves (each op and group size of one tier) are fitted together: each curve is one
alpha-beta line (hardware/fit.py relative_line, relative least squares), or, where the transport
switches protocol at a buffer size, two lines split there. The switch is the tier's (one place
for every curve of the tier: the transport's eager / rendezvous limit, NCCL's protocol
thresholds, the socket buffer of gloo's TCP pairs, comm_cost.Regime) and is kept only where an
F-test says curves without a switch would rarely fit as well (`SWITCH_SIGNIFICANCE`): a switch
must pay for its figures. `calibrate --comm` (comm_fit.py) and the cost model's fit of a
comm.csv (costs/comm_model.py) both call `fit_curves`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tinker_opt.comm_cost import Regime
from tinker_opt.hardware.fit import FitResult, fit_result, link_columns, relative_line

MIN_REGIME_SIZES = 3
"""Distinct buffer sizes a regime needs on each side of a switch: its two figures and at least
one size more to check them (no regime is an exact interpolation of two points)."""

SWITCH_SIGNIFICANCE = 0.01
"""Chance, on curves with no switch, that fit_curves places one anyway (its F-test's level over
all the splits it tries, Bonferroni). ASSUMPTION: a conventional 1 % level, not a sourced figure."""


@dataclass(frozen=True)
class Curve:
    """One measured curve: an op's rows on a tier (its group sizes, each row's share of the link)."""

    ops: Sequence[str]
    group_sizes: Sequence[int]
    nbytes: Sequence[float]
    times_us: Sequence[float]
    shares: Sequence[float] | None = None


@dataclass(frozen=True)
class RegimeFit:
    """A curve's size regimes and how well they explain it."""

    regimes: tuple[Regime, ...]
    result: FitResult
    parameters: int
    """Figures fitted to the curve: a latency and a bandwidth per regime (the tier's switch is
    counted once, by the caller)."""


@dataclass(frozen=True)
class _Rows:
    steps: np.ndarray
    traffic: np.ndarray
    times: np.ndarray
    sizes: np.ndarray


def _rows(curve: Curve) -> _Rows:
    steps, traffic, t, keep = link_columns(
        curve.ops, curve.group_sizes, curve.nbytes, curve.shares, curve.times_us
    )
    return _Rows(steps, traffic, t, np.asarray(curve.nbytes, dtype=float)[keep])


def _one(rows: _Rows, mask: np.ndarray, start: int) -> tuple[Regime, np.ndarray]:
    latency, inverse, rel = relative_line(rows.steps[mask], rows.traffic[mask], rows.times[mask])
    return Regime(start, 1 / inverse, latency), rel


def _split(rows: _Rows, split: float) -> tuple[tuple[Regime, ...], np.ndarray]:
    low = rows.sizes < split
    small, rel_low = _one(rows, low, 0)
    large, rel_high = _one(rows, ~low, int(split))
    return (small, large), np.concatenate([rel_low, rel_high])


def _can_split(rows: _Rows, split: float) -> bool:
    sizes = np.unique(rows.sizes)
    return (sizes < split).sum() >= MIN_REGIME_SIZES and (sizes >= split).sum() >= MIN_REGIME_SIZES


EXACT = 1e-4
"""Largest relative residual of a curve the single line fits exactly: rows computed from a
description (hardware.comm_table, times rounded to 1e-3 us), which need no switch."""


def fit_curves(
    curves: Sequence[Curve], significance: float = SWITCH_SIGNIFICANCE
) -> list[RegimeFit]:
    """Each curve's regimes: one line each, or two split at the tier's switch, the split (between
    two consecutive measured sizes) that explains the curves best; a curve with fewer than
    MIN_REGIME_SIZES sizes on a side of it, or that one line fits exactly (EXACT), keeps its
    line. The switch is kept where switch_p_value times the splits tried is below
    `significance` (infinite: always, for a report of what the test turned down)."""
    rows = [_rows(curve) for curve in curves]
    lines = [_one(r, np.ones(len(r.times), dtype=bool), 0) for r in rows]
    fits: list[tuple[tuple[Regime, ...], np.ndarray]] = [((regime,), rel) for regime, rel in lines]
    bends = [i for i, (_, rel) in enumerate(lines) if np.max(np.abs(rel)) > EXACT]
    line_rss = {i: float(np.sum(lines[i][1] ** 2)) for i in bends}
    splits = sorted({float(s) for i in bends for s in rows[i].sizes})
    trials = {s: {i: _split(rows[i], s) for i in bends if _can_split(rows[i], s)} for s in splits}
    trials = {s: trial for s, trial in trials.items() if trial}
    if not trials:
        return _fits(fits)

    def gain(split: float) -> float:
        return sum(line_rss[i] - float(np.sum(rel**2)) for i, (_, rel) in trials[split].items())

    split = max(trials, key=gain)
    switched = trials[split]
    before = sum(line_rss[i] for i in switched)
    after = sum(float(np.sum(rel**2)) for _, rel in switched.values())
    count = sum(len(rows[i].times) for i in switched)
    if switch_p_value(before, after, count, len(switched)) * len(trials) < significance:
        fits = [switched.get(i, fit) for i, fit in enumerate(fits)]
    return _fits(fits)


def _fits(fits: list[tuple[tuple[Regime, ...], np.ndarray]]) -> list[RegimeFit]:
    out = []
    for regimes, rel in fits:
        values = tuple(v for r in regimes for v in (r.latency_us, r.bandwidth_gbs))
        out.append(RegimeFit(regimes, fit_result(values, rel), 2 * len(regimes)))
    return out


def fit_regimes(
    ops: Sequence[str],
    group_sizes: Sequence[int],
    nbytes: Sequence[float],
    times_us: Sequence[float],
    shares: Sequence[float] | None = None,
) -> RegimeFit:
    """One curve's regimes (fit_curves of that curve alone)."""
    return fit_curves([Curve(ops, group_sizes, nbytes, times_us, shares)])[0]


def switch_p_value(rss_one: float, rss_two: float, rows: int, curves: int = 1) -> float:
    """The F-test of each curve's two regimes against its one line (nested least squares over
    `rows` rows of `curves` curves: 2 more figures a curve, 4 a curve in all; the switch's place
    is paid for by the caller's Bonferroni factor): P(F(2c, rows - 4c) >= observed) for curves
    with no switch."""
    extra, left = 2 * curves, rows - 4 * curves
    if left <= 0 or rss_two <= 0:
        return 0.0 if rss_two <= 0 < rss_one else 1.0
    f = (rss_one - rss_two) / extra / (rss_two / left)
    return _beta_regularized(left / 2, extra / 2, left / (left + extra * f)) if f > 0 else 1.0


def _beta_regularized(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function (Press et al., "Numerical Recipes",
    3rd ed., section 6.4: the continued fraction on the side where it converges)."""
    if x <= 0 or x >= 1:
        return float(x >= 1)
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1 - math.exp(log_front) * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), evaluated by the modified Lentz method (NR 6.4)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-12:
            break
    return h
