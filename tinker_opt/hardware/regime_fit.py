"""Size regimes of measured collectives (comm_cost.Regime): where a library switches protocol.

A link's curves (each op and group size of one tier) are fitted together: each curve is one
alpha-beta line (hardware/fit.py relative_line, relative least squares), or, where the transport
switches protocol at a buffer size, lines split there (at most MAX_REGIMES). The switch is first the tier's (one
place for every curve of the tier: the transport's eager / rendezvous limit, NCCL's protocol
thresholds, comm_cost.Regime), then an op's own where its curve bends elsewhere (the library
picks its protocol per op, or its algorithm cuts the buffer into other messages: _own_switches),
then a curve's further switch (_further_switches: NCCL's third protocol, gloo's ring past its
largest segment). Each is kept only where an F-test says curves without it would rarely fit as well
(`SWITCH_SIGNIFICANCE`): a switch must pay for its figures. `calibrate --comm` (comm_fit.py)
and the cost model's fit of a comm.csv (costs/comm_model.py) both call `fit_curves`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tinker_opt.comm_cost import Regime
from tinker_opt.hardware.f_test import f_survival
from tinker_opt.hardware.fit import FitResult, fit_result, link_columns, relative_line

MIN_REGIME_SIZES = 3
"""Distinct buffer sizes a regime needs on each side of a switch: its two figures and at least
one size more to check them (no regime is an exact interpolation of two points)."""

SWITCH_SIGNIFICANCE = 0.01
"""Chance, on curves with no switch, that fit_curves places one anyway (its F-tests' level over
all the splits they try: Bonferroni for the tier's switch, Holm for an op's own), and, for a
curve switched at the tier's switch, that it moves it elsewhere. ASSUMPTION: a conventional 1 %
level, not a sourced figure."""


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
    """Figures fitted to the curve: a latency and a bandwidth per regime, and each switch of its
    own (the tier's switch is counted once, by the caller)."""
    shared_switch: bool = False
    """Whether the curve is split at the tier's switch."""


@dataclass(frozen=True)
class _Rows:
    steps: np.ndarray
    traffic: np.ndarray
    times: np.ndarray
    sizes: np.ndarray
    ping_pong: bool = False
    """A send/recv curve: two ranks' messages timed one way, not a collective of the tier."""


_Regimes = tuple[tuple[Regime, ...], np.ndarray]
"""A curve's regimes and the relative residuals of its rows under them."""


def _rows(curve: Curve) -> _Rows:
    steps, traffic, t, keep = link_columns(
        curve.ops, curve.group_sizes, curve.nbytes, curve.shares, curve.times_us
    )
    sizes = np.asarray(curve.nbytes, dtype=float)[keep]
    return _Rows(steps, traffic, t, sizes, all(op == "send_recv" for op in curve.ops))


def _one(rows: _Rows, mask: np.ndarray, start: int) -> tuple[Regime, np.ndarray]:
    latency, inverse, rel = relative_line(rows.steps[mask], rows.traffic[mask], rows.times[mask])
    return Regime(start, 1 / inverse, latency), rel


def _piecewise(rows: _Rows, switches: Sequence[float]) -> _Regimes:
    """The curve's lines between its `switches` (the sizes where a regime starts, ascending)."""
    edges = [0.0, *switches, math.inf]
    parts = [
        _one(rows, (rows.sizes >= low) & (rows.sizes < high), int(low))
        for low, high in itertools.pairwise(edges)
    ]
    return tuple(r for r, _ in parts), np.concatenate([rel for _, rel in parts])


def _split(rows: _Rows, split: float) -> _Regimes:
    return _piecewise(rows, [split])


def _can_split(rows: _Rows, *switches: float) -> bool:
    """Whether every regime between `switches` (ascending) holds MIN_REGIME_SIZES sizes."""
    sizes = np.unique(rows.sizes)
    edges = [-math.inf, *switches, math.inf]
    return all(
        ((sizes >= low) & (sizes < high)).sum() >= MIN_REGIME_SIZES
        for low, high in itertools.pairwise(edges)
    )


EXACT = 1e-4
"""Largest relative residual of a curve the single line fits exactly: rows computed from a
description (hardware.comm_table, times rounded to 1e-3 us), which need no switch."""


def fit_curves(
    curves: Sequence[Curve],
    significance: float = SWITCH_SIGNIFICANCE,
    own: bool = True,
    further: bool = True,
) -> list[RegimeFit]:
    """Each curve's regimes: one line each, or two split at the tier's switch, the split (between
    two consecutive measured sizes) that explains the curves best, or at a switch of its own,
    and a third regime where a further switch of its own pays (_further_switches). A curve with
    fewer than MIN_REGIME_SIZES sizes in a regime, or that one line fits exactly (EXACT), keeps
    its line. The tier's switch (placed on its collectives: a ping-pong, timed otherwise, gets a
    switch of its own only, _variances) is kept where switch_p_value times the splits tried is
    below `significance` (infinite: always, for a report of what the test turned down); then
    _own_switches moves a curve's switch where its own pays for it (`own` False: the tier's
    switch only; `further` False: two regimes at most; both for a report of what they change)."""
    rows = [_rows(curve) for curve in curves]
    lines = [_one(r, np.ones(len(r.times), dtype=bool), 0) for r in rows]
    fits: list[_Regimes] = [((regime,), rel) for regime, rel in lines]
    bends = [i for i, (_, rel) in enumerate(lines) if np.max(np.abs(rel)) > EXACT]
    shared = _shared_switch(rows, fits, [i for i in bends if not rows[i].ping_pong], significance)
    fits = [shared.get(i, fit) for i, fit in enumerate(fits)]
    moved = _own_switches(rows, fits, bends, set(shared), significance) if own else {}
    fits = [moved.get(i, fit) for i, fit in enumerate(fits)]
    added = _further_switches(rows, fits, bends, significance) if further else {}
    fits = [added.get(i, fit) for i, fit in enumerate(fits)]
    return [
        _fit(regimes, rel, own=(i in moved) + (i in added), shared=i in shared and i not in moved)
        for i, (regimes, rel) in enumerate(fits)
    ]


def _rss(fit: _Regimes) -> float:
    return float(np.sum(fit[1] ** 2))


def _shared_switch(
    rows: list[_Rows], fits: list[_Regimes], bends: list[int], significance: float
) -> dict[int, _Regimes]:
    """The curves split at the tier's one switch (the split of the largest gain over the bending
    curves), or none where the F-test turns it down: its gain against the noise the curves leave
    once every switch is placed (_noise), so that a second bend (a third regime, an op's own
    switch elsewhere) does not hide the tier's."""
    splits = sorted({float(s) for i in bends for s in rows[i].sizes})
    trials = {s: {i: _split(rows[i], s) for i in bends if _can_split(rows[i], s)} for s in splits}
    trials = {s: trial for s, trial in trials.items() if trial}
    if not trials:
        return {}

    def gain(split: float) -> float:
        return sum(_rss(fits[i]) - _rss(fit) for i, fit in trials[split].items())

    switched = trials[max(trials, key=gain)]
    before = sum(_rss(fits[i]) for i in switched)
    after = sum(_rss(fit) for fit in switched.values())
    count = sum(len(rows[i].times) for i in switched)
    noise = [_noise(rows[i], fits[i]) for i in switched]
    left = (sum(r for r, _ in noise), sum(d for _, d in noise))
    if switch_p_value(before, after, count, len(switched), left) * len(trials) < significance:
        return switched
    return {}


def _own_switches(
    rows: list[_Rows],
    fits: list[_Regimes],
    bends: list[int],
    shared: set[int],
    significance: float,
) -> dict[int, _Regimes]:
    """Curves whose switch is their own. A library picks its protocol per operation: NCCL sends
    an all-to-all's peers (point-to-point) LL up to NCCL_P2P_LL_THRESHOLD each (enqueue.cc
    addP2pToPlan) while a ring's protocol comes from tuning.cc's per-algorithm cost table; gloo
    reaches a transport's switch at one message size with a buffer of another size per
    algorithm (alltoall.cc sends buffer / ranks to each peer, allreduce.cc and allgather.cc
    segments of buffer / (2 x ranks)). So an op's curve can bend at its own size.

    Each curve's best own split (the least residuals) is tested against its fit so far
    (own_switch_p_value) and kept where its p-value times the splits it was chosen from is
    below `significance`. A tier's switch moved is chosen from that curve's other splits (the
    switch is there, only its place is in question); a new switch from the splits of every
    curve without one, step-down (Holm: smallest p-value first, each kept one's splits leave
    the count, the first turned down ends it), so that, as the tier's test, at most
    `significance` of tiers without a switch get one. A switch of its own costs one figure, its
    place; from a line, its regimes' two more figures too. A curve its fit already prices
    exactly (EXACT: a description's own table) has nothing to gain."""
    tests = _own_tests(rows, fits, bends, shared)
    own = {
        i: fit for i, (p, count, fit) in tests.items() if i in shared and p * count < significance
    }
    new = {i: test for i, test in tests.items() if i not in shared}
    return own | {i: new[i][2] for i in _holm(new, significance)}


def _holm(tests: dict[int, tuple[float, int, _Regimes]], significance: float) -> list[int]:
    """The curves whose new switch is kept, step-down (Holm): smallest p-value first, each
    p-value times the splits of every curve still untested, each kept one's splits leaving the
    count, the first turned down ending it, so that at most `significance` of tiers with no
    such switch get one."""
    left = sum(count for _, count, _ in tests.values())
    kept = []
    for i, (p, count, _) in sorted(tests.items(), key=lambda test: test[1][0]):
        if p * left >= significance:
            break
        kept.append(i)
        left -= count
    return kept


MAX_REGIMES = 3
"""Most regimes a curve is fitted with: NCCL's three protocols (LL, LL128, Simple: tuning.cc
prices each, enqueue.cc runs the cheapest for the size, so a curve bends at most twice), and
gloo's ring all-reduce, whose transport switches at the socket's receive buffer (Linux tcp(7)
tcp_rmem) and whose steps grow with the buffer above 2 x ranks x maxSegmentSize
(gloo/allreduce.cc ring(): numSegments = max(ceil(bytes / maxSegmentSize), 2 x ranks), each
segment reduced into a buffer that then leaves a core's L2)."""


def _further_switches(
    rows: list[_Rows], fits: list[_Regimes], bends: list[int], significance: float
) -> dict[int, _Regimes]:
    """Curves with a further switch of their own: a curve split once already gets a third regime
    where its best further split (the first switch kept where it is) explains it better than
    its two regimes by an F-test (own_switch_p_value: three more figures, the regime's two and
    its place), Holm over the curves as a new switch of _own_switches. Only where every regime
    keeps MIN_REGIME_SIZES sizes: profile-comm's 16 KiB .. 16 MiB (11 sizes) leaves room for a
    switch near 256 KiB and one near 4 MiB; its 16 KiB .. 4 MiB, none."""
    best = {}
    for i in bends:
        have = [float(r.from_bytes) for r in fits[i][0][1:]]
        if not have or len(fits[i][0]) >= MAX_REGIMES or np.max(np.abs(fits[i][1])) <= EXACT:
            continue
        trials = [sorted([*have, float(s)]) for s in np.unique(rows[i].sizes) if s not in have]
        trials = [t for t in trials if _can_split(rows[i], *t)]
        if trials:
            best[i] = (min((_piecewise(rows[i], t) for t in trials), key=_rss), len(trials))
    noise = _variances(rows, fits, bends)
    tests = {
        i: (own_switch_p_value(_rss(fits[i]), _rss(fit), 3, noise[i]), count, fit)
        for i, (fit, count) in best.items()
    }
    return {i: tests[i][2] for i in _holm(tests, significance)}


def _own_tests(
    rows: list[_Rows], fits: list[_Regimes], bends: list[int], shared: set[int]
) -> dict[int, tuple[float, int, _Regimes]]:
    """(p-value, splits tried, fit) of each bending curve's best own split against its fit so
    far (own_switch_p_value, the variance pooled by _pooled)."""
    best = {}
    for i in bends:
        splits = [s for s in np.unique(rows[i].sizes) if _can_split(rows[i], s)]
        splits = [s for s in splits if s != _switch(fits[i])]
        if splits and np.max(np.abs(fits[i][1])) > EXACT:
            best[i] = (min((_split(rows[i], s) for s in splits), key=_rss), len(splits))
    noise = _variances(rows, fits, bends)
    tests = {}
    for i, (fit, count) in best.items():
        extra = 1 if i in shared else 3
        p = own_switch_p_value(_rss(fits[i]), _rss(fit), extra, noise[i])
        tests[i] = (p, count, fit)
    return tests


def _noise(rows: _Rows, fit: _Regimes) -> tuple[float, int]:
    """Residuals and degrees of freedom of a curve at the fit of its least residual variance
    (residuals / (rows - figures)) among its fit so far and its best split into two and into
    MAX_REGIMES regimes: the noise once every switch is placed. A curve bent twice then is not
    tested on a variance swollen by the bend its one switch leaves out, while a line keeps its
    line (a split of noise lowers the residuals less than it spends degrees of freedom)."""
    n = len(rows.times)
    options = [(_rss(fit), 3 * len(fit[0]) - 1)]
    sizes = np.unique(rows.sizes)
    for count in range(1, MAX_REGIMES):
        trials = [t for t in itertools.combinations(sizes, count) if _can_split(rows, *t)]
        if trials:
            options.append((min(_rss(_piecewise(rows, t)) for t in trials), 3 * count + 2))
    rss, figures = min(
        (o for o in options if n > o[1]), key=lambda o: o[0] / (n - o[1]), default=options[0]
    )
    return rss, n - figures


def _variances(
    rows: list[_Rows], fits: list[_Regimes], bends: list[int]
) -> dict[int, list[tuple[float, int]]]:
    """The noise each bending curve's switch is tested on (own_switch_p_value): a collective's
    own (_noise) and the tier's, its collectives' summed; a ping-pong's own alone. A ping-pong
    is timed otherwise (one pair's messages, half a round trip, profile/comm.py), so its noise
    is not the rings' (on loopback gloo several times theirs: benchmarks/results/comm_fit_*.md)
    and theirs would let its chance gains pass."""
    noise = {i: _noise(rows[i], fits[i]) for i in bends}
    collectives = [noise[i] for i in bends if not rows[i].ping_pong]
    pooled = (sum(r for r, _ in collectives), sum(d for _, d in collectives))
    return {i: [noise[i]] if rows[i].ping_pong else [noise[i], pooled] for i in bends}


def _switch(fit: _Regimes) -> float | None:
    """The size where the curve's second regime starts (None: one line)."""
    return float(fit[0][1].from_bytes) if len(fit[0]) > 1 else None


def own_switch_p_value(
    rss_before: float, rss_after: float, extra: int, noise: Sequence[tuple[float, int]]
) -> float:
    """The F-test of one curve's own switch (nested least squares: `extra` more figures):
    P(F(extra, dof) >= observed) for a curve the switch explains no better. `noise` is the
    curve's own (residuals, degrees of freedom) and the tier's pooled (_noise, _pooled). The
    test takes the tier's variance, whose many degrees of freedom give a curve of 11 sizes and 8
    figures its power, unless the curve's own is larger by more than chance
    (NOISIER_SIGNIFICANCE): a noisy curve is tested on its own noise (each op's is its own: a
    ping-pong's is not a ring's, and the tier's would let its chance gains pass)."""
    (own_rss, own_left), (pooled_rss, pooled_left) = noise[0], noise[-1]
    if own_left <= 0 and pooled_left <= 0:
        return 1.0
    variance, left = pooled_rss / max(pooled_left, 1), pooled_left
    if own_left > 0 and (
        pooled_left <= 0 or _noisier(own_rss / own_left, own_left, variance, left)
    ):
        variance, left = own_rss / own_left, own_left
    if variance <= 0:
        return 0.0 if rss_after < rss_before else 1.0
    return f_survival((rss_before - rss_after) / extra / variance, extra, left)


NOISIER_SIGNIFICANCE = 0.05
"""Chance that a curve whose noise is the tier's is taken for a noisier one (the F-test of its
variance against the tier's). ASSUMPTION: a conventional 5 % level, not a sourced figure."""


def _noisier(own: float, own_left: int, pooled: float, pooled_left: int) -> bool:
    """Whether a curve's variance is above the tier's by more than chance (F-test of the ratio)."""
    if pooled <= 0:
        return own > 0
    return f_survival(own / pooled, own_left, pooled_left) < NOISIER_SIGNIFICANCE


def _fit(regimes: tuple[Regime, ...], rel: np.ndarray, own: int, shared: bool) -> RegimeFit:
    values = tuple(v for r in regimes for v in (r.latency_us, r.bandwidth_gbs))
    return RegimeFit(regimes, fit_result(values, rel), 2 * len(regimes) + own, shared)


def fit_regimes(
    ops: Sequence[str],
    group_sizes: Sequence[int],
    nbytes: Sequence[float],
    times_us: Sequence[float],
    shares: Sequence[float] | None = None,
) -> RegimeFit:
    """One curve's regimes (fit_curves of that curve alone)."""
    return fit_curves([Curve(ops, group_sizes, nbytes, times_us, shares)])[0]


def switch_p_value(
    rss_one: float,
    rss_two: float,
    rows: int,
    curves: int = 1,
    noise: tuple[float, int] | None = None,
) -> float:
    """The F-test of each curve's two regimes against its one line (nested least squares over
    `rows` rows of `curves` curves: 2 more figures a curve, 4 a curve in all; the switch's place
    is paid for by the caller's Bonferroni factor): P(F(2c, dof) >= observed) for curves with no
    switch. The variance is the smaller of the two regimes' (rows - 4c degrees of freedom) and
    `noise`'s (residuals, degrees of freedom: what the curves leave once every switch is placed),
    with its degrees of freedom."""
    extra = 2 * curves
    options = [(rss_two, rows - 4 * curves), *([noise] if noise is not None else [])]
    options = [(rss, left) for rss, left in options if left > 0]
    if not options:
        return 1.0
    rss, left = min(options, key=lambda option: option[0] / option[1])
    if rss <= 0:
        return 0.0 if rss_two < rss_one else 1.0
    return f_survival((rss_one - rss_two) / extra / (rss / left), extra, left)
