"""Bounds, caps and the least-memory split of a uniform layer stack (every layer costs the same),
by water-filling on the scalar coefficients of layer_split.py; bounds.py says why each bound holds.
The mixed-stack counterparts are in mixed_split.py; stacks.py chooses between them.

The per-r quantities are computed for every recompute count at once, as (r, stage) arrays: the
memory caps of each r (`caps_by_r`), the packing of L layers into the largest caps (a cumulative
sum over the caps sorted per row) and the least bottleneck under caps (`least_max_rows`, a
bisection on the integer value run for every row together; the least feasible integer is a
stage's value at some layer count, the candidate the water-filling looks for).
"""

from __future__ import annotations

import numpy as np

from tinker_opt.choices import RecomputeMethod
from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.costs.pipeline import pipeline_bound_x_v
from tinker_opt.costs.recompute import piecewise
from tinker_opt.solve.layer_split import (
    Scalars,
    memory_caps,
    pack,
    piecewise_cap,
    recompute_range,
    shape_of,
)


def caps_by_r(c: SplitCoefficients, k: Scalars, rs: np.ndarray) -> np.ndarray:
    """(len(rs), p): memory_caps of each recompute count in `rs` (one array expression)."""
    rs = np.asarray(rs, dtype=np.int64)
    if c.method != RecomputeMethod.UNIFORM:
        return (
            np.stack([memory_caps(c, k, int(r)) for r in rs])
            if len(rs) < 2
            else _block_caps(c, k, rs)
        )
    kk = c.stage_inflight_x_v.astype(np.int64)[None, :]
    fixed = (c.stage_static_bytes + kk[0] * c.stage_act_bytes)[None, :]
    r = rs[:, None]

    def fits(n: np.ndarray) -> np.ndarray:
        # uniform: ceil(n / r) checkpoints and a min(r, n)-layer working set
        # (recompute.uniform_stage_memory)
        memory = (
            fixed
            + k.w * n
            + kk * (-(-n // r)) * c.checkpoint_bytes
            + np.minimum(r, n) * c.work_bytes
        )
        return memory <= c.memory_limit_bytes

    # The memory does not decrease in n (every byte count >= 0): bisect every (r, stage) at once
    # for the largest n in 0..L that fits (-1: none).
    lo = np.full((len(rs), c.num_stages), -1, dtype=np.int64)
    hi = np.full_like(lo, c.num_layers + 1)
    while (open_ := hi - lo > 1).any():
        mid = (lo + hi) // 2
        ok = fits(mid)
        lo = np.where(open_ & ok, mid, lo)
        hi = np.where(open_ & ~ok, mid, hi)
    return lo


def _block_caps(c: SplitCoefficients, k: Scalars, rs: np.ndarray) -> np.ndarray:
    """caps_by_r for `block` and for no full recompute (memory_caps with r as a column)."""
    kk = c.stage_inflight_x_v.astype(np.int64)
    work = np.where(rs > 0, c.work_bytes, 0)[:, None]
    budget = (
        c.memory_limit_bytes
        - c.stage_static_bytes[None, :]
        - work
        - (kk * c.stage_act_bytes)[None, :]
    )
    return piecewise_cap(budget, k.w + kk * k.inp, k.w + kk * k.act, rs[:, None], c.num_layers)


def count_tables(c: SplitCoefficients, k: Scalars, rs: np.ndarray):
    """(time, tail, fits) of each recompute count in `rs`, stage s and count n = 0..L, shape
    (len(rs), p, L+1): the integers of coefficients.stage_costs for a uniform stack (v = 1),
    where a stage's costs depend on its layer count alone (range_costs without positions)."""
    n = np.arange(c.num_layers + 1, dtype=np.int64)[None, None, :]
    r = rs[:, None, None]
    kk = c.stage_inflight_x_v.astype(np.int64)[None, :, None]
    fixed = c.stage_static_bytes[None, :, None] + kk * c.stage_act_bytes[None, :, None]
    recomputed = np.minimum(r, n)
    if (
        c.method == RecomputeMethod.UNIFORM
    ):  # ceil(n / r) group inputs, a min(r, n)-layer working set
        memory = (
            fixed
            + k.w * n
            + kk * (-(-n // np.maximum(r, 1))) * c.checkpoint_bytes
            + recomputed * c.work_bytes
        )
        time = np.broadcast_to((k.a + k.f) * n, memory.shape)
    else:  # block (r = 0: none): the first min(r, n) layers keep their input, one layer's working set
        work = np.where(recomputed > 0, c.work_bytes, 0)
        memory = fixed + k.w * n + work + kk * (k.inp * recomputed + k.act * (n - recomputed))
        time = k.a * n + (k.f * recomputed if c.method == RecomputeMethod.BLOCK else 0 * n)
    time = time + c.stage_time_ns[None, :, None]
    tail = np.broadcast_to(k.alpha * n + c.stage_tail_ns[None, :, None], memory.shape)
    return time, tail, (n > 0) & (memory <= c.memory_limit_bytes)


def loosest_caps(c: SplitCoefficients, k: Scalars) -> np.ndarray:
    """Per stage, the most layers it can hold under any recompute count: block's largest r (most
    recompute, least memory); uniform's memory is not monotone in r (fewer checkpoints, larger
    working set, costs/recompute.py), so the largest cap over every r."""
    if c.method == RecomputeMethod.UNIFORM:
        return caps_by_r(c, k, np.array(recompute_range(c))).max(axis=0)
    return memory_caps(c, k, recompute_range(c)[-1])


def packs(caps: np.ndarray, total: int) -> np.ndarray:
    """Per row of caps: whether `total` layers, at least one per stage, fit (layer_split.pack)."""
    return (caps.min(axis=-1) >= 1) & (caps.sum(axis=-1) >= total) & (total >= caps.shape[-1])


def packed_rows(caps: np.ndarray, total: int) -> np.ndarray:
    """Per row, layer_split.pack's counts in decreasing-cap order (one per stage, the rest into
    the largest caps first); a row that does not pack gives meaningless counts."""
    ordered = -np.sort(-caps, axis=-1)
    room = np.maximum(ordered - 1, 0)
    before = np.cumsum(room, axis=-1) - room
    return 1 + np.clip(total - caps.shape[-1] - before, 0, room)


def upper_caps(c: SplitCoefficients, k: Scalars) -> np.ndarray:
    """Per stage, the most layers a solver variable needs: the loosest memory cap, and room for
    one layer in every other stage."""
    return np.minimum(loosest_caps(c, k), c.num_layers - c.num_stages + 1)


def bounds_by_r(c: SplitCoefficients, k: Scalars, rs) -> dict[int, int]:
    """{r: sum + (m - 1) max + tail lower bound with r fixed} for each r in `rs` whose memory caps
    admit a split (all r at once: module docstring)."""
    rs = np.asarray(rs, dtype=np.int64)
    L = c.num_layers
    caps = caps_by_r(c, k, rs)
    ok = packs(caps, L)
    if not ok.any():
        return {}
    rs, caps = rs[ok], caps[ok]
    shapes = np.array([shape_of(c, k, int(r)) for r in rs], dtype=np.int64)
    low, high, knee = (shapes[:, j : j + 1] for j in range(3))
    least = np.minimum(knee, packed_rows(caps, L)).sum(axis=1)
    sum_lb = high[:, 0] * L + int(c.stage_time_ns.sum()) + (low - high)[:, 0] * least
    max_lb = least_max_rows(c.stage_time_ns, low, high, knee, caps, L)
    tail_lb = least_max_rows(c.stage_tail_ns, k.alpha, k.alpha, 0, caps, L)
    bounds = pipeline_bound_x_v(c, sum_lb, max_lb, tail_lb)
    return {int(r): int(b) for r, b in zip(rs, bounds, strict=True)}


def bound_terms(c: SplitCoefficients, k: Scalars, *, tight: bool = True) -> tuple[int, int, int]:
    """Lower bounds on (sum_s t_s, max_s t_s, max_s tail_s) of a v = 1 configuration."""
    L, p = c.num_layers, c.num_stages
    r_lo = recompute_range(c)[0]
    low, high, knee = shape_of(c, k, r_lo)  # times grow with r: the smallest r bounds them all
    sum_lb = high * L + int(c.stage_time_ns.sum()) + (low - high) * p * min(knee, 1)
    per = -(-L // p)
    max_lb = max(
        int(piecewise(per, low, high, knee)) + int(c.stage_time_ns.min()),
        int((int(piecewise(1, low, high, knee)) + c.stage_time_ns).max()),
    )
    tail_lb = max(
        k.alpha * per + int(c.stage_tail_ns.min()), int((k.alpha + c.stage_tail_ns).max())
    )
    if tight:
        caps = loosest_caps(c, k)
        max_lb = max(max_lb, _least_max(c.stage_time_ns, low, high, knee, caps, L))
        tail_lb = max(tail_lb, _least_max(c.stage_tail_ns, k.alpha, k.alpha, 0, caps, L))
    return int(sum_lb), int(max_lb), int(tail_lb)


def _least_max(
    offsets: np.ndarray, low: int, high: int, r: int, caps: np.ndarray, total: int
) -> int:
    """min over splits (n_s <= caps) of max_s offset_s + cost(n_s): water-filling on candidates."""
    return int(least_max_rows(offsets, low, high, r, caps[None, :], total)[0])


CANDIDATES = 4096
"""Up to this many candidate values (rows x stages x counts) least_max_rows bisects over the
sorted candidates; beyond, sorting them costs more than bisecting over the integers."""


def least_max_rows(
    offsets: np.ndarray, low, high, knee, caps: np.ndarray, total: int
) -> np.ndarray:
    """Per row of caps (rows x stages): min over splits (n_s <= caps_s) of max_s offset_s +
    cost(n_s), cost = piecewise(n, low, high, knee) (scalars or row columns). The least integer
    value whose caps pack: a bisection run for every row at once. A row that does not pack gives
    the largest value, max_s offset_s + cost(total).

    Whether a value v packs is monotone in v and changes only where v reaches a stage's value at
    some layer count, offset_s + cost(n) with 0 <= n <= total (piecewise_cap's counts step there
    alone), so the least such v is one of those candidates clipped to [lo, hi]. Where they are
    few (CANDIDATES: the walk's tight bound of one configuration), the bisection runs over each
    row's sorted candidates, about log2(p L) steps instead of about 40 over the integers from lo
    to hi, and finds the same value (issue 30)."""
    rows = caps.shape[0]
    low, high, knee = (
        np.broadcast_to(np.asarray(x, dtype=np.int64), (rows, 1)) for x in (low, high, knee)
    )
    lo = int(offsets.min()) + piecewise(1, low[:, 0], high[:, 0], knee[:, 0])  # a layer per stage
    hi = int(offsets.max()) + piecewise(total, low[:, 0], high[:, 0], knee[:, 0])
    lo = np.minimum(lo, hi)
    every = np.arange(rows)
    if rows * offsets.size * (total + 1) <= CANDIDATES:
        n = np.arange(total + 1, dtype=np.int64)[None, :]
        stage_values = (
            offsets.astype(np.int64)[None, :, None] + piecewise(n, low, high, knee)[:, None, :]
        )
        values = np.clip(stage_values.reshape(rows, -1), lo[:, None], hi[:, None])
        values = np.concatenate([np.sort(values, axis=1), hi[:, None]], axis=1)

        def value_at(index: np.ndarray) -> np.ndarray:
            return values[every, index]

        last = np.full(rows, values.shape[1] - 1, dtype=np.int64)
    else:

        def value_at(index: np.ndarray) -> np.ndarray:
            return lo + index  # every integer from lo to hi

        last = hi - lo
    first = np.zeros(rows, dtype=np.int64)
    while (first < last).any():  # the least index whose value packs (the last one: hi)
        mid = (first + last) // 2
        under = piecewise_cap(value_at(mid)[:, None] - offsets[None, :], low, high, knee, total)
        fit = packs(np.minimum(caps, under), total)
        last = np.where(fit, mid, last)
        first = np.where(fit, first, mid + 1)
    return value_at(last)


def least_peak_split(c: SplitCoefficients, k: Scalars, r: int) -> tuple[tuple[int, ...], int]:
    """(layers, peak bytes x v) of the v = 1 split with the smallest largest stage memory at r
    (block's formulas; infeasible.least_memory_split)."""
    L = c.num_layers
    kk = c.stage_inflight_x_v.astype(np.int64)
    fixed = c.stage_static_bytes + (c.work_bytes if r else 0) + kk * c.stage_act_bytes

    def split_under(limit: int):
        caps = piecewise_cap(limit - fixed, k.w + kk * k.inp, k.w + kk * k.act, r, L)
        return pack(caps, L)

    lo, hi = 0, int(fixed.max() + (k.w + kk.max() * max(k.act, k.inp)) * L)
    while lo < hi:  # the least per-stage limit under which some split exists
        mid = (lo + hi) // 2
        if split_under(mid) is not None:
            hi = mid
        else:
            lo = mid + 1
    return tuple(int(n) for n in split_under(lo)), lo * c.vpp
