"""Bounds, caps and the least-memory split of a uniform layer stack (every layer costs the same),
by water-filling on the scalar coefficients of layer_split.py; bounds.py says why each bound holds.
The mixed-stack counterparts are in mixed_split.py; stacks.py chooses between them.
"""

from __future__ import annotations

import numpy as np

from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.costs.pipeline import pipeline_bound_x_v
from tinker_opt.costs.recompute import piecewise
from tinker_opt.solve.layer_split import (
    Scalars,
    inverse_caps,
    memory_caps,
    min_feasible,
    pack,
    piecewise_cap,
    recompute_range,
    shape_of,
)


def loosest_caps(c: SplitCoefficients, k: Scalars) -> np.ndarray:
    """Per stage, the most layers it can hold under any recompute count: block's largest r (most
    recompute, least memory); uniform's memory is not monotone in r (fewer checkpoints, larger
    working set, costs/recompute.py), so the largest cap over every r."""
    if c.method == "uniform":
        return np.max([memory_caps(c, k, r) for r in recompute_range(c)], axis=0)
    return memory_caps(c, k, recompute_range(c)[-1])


def upper_caps(c: SplitCoefficients, k: Scalars) -> np.ndarray:
    """Per stage, the most layers a solver variable needs: the loosest memory cap, and room for
    one layer in every other stage."""
    return np.minimum(loosest_caps(c, k), c.num_layers - c.num_stages + 1)


def bound_for_r(c: SplitCoefficients, k: Scalars, r: int) -> int | None:
    """sum + (m - 1) max + tail lower bounds with r fixed, None when no split fits with r."""
    L = c.num_layers
    caps = memory_caps(c, k, r)
    packed = pack(caps, L)
    if packed is None:
        return None
    low, high, knee = shape_of(c, k, r)
    sum_lb = (
        high * L + int(c.stage_time_ns.sum()) + (low - high) * int(np.minimum(knee, packed).sum())
    )
    max_lb = _least_max(c.stage_time_ns, low, high, knee, caps, L)
    tail_lb = _least_max(c.stage_tail_ns, k.alpha, k.alpha, 0, caps, L)
    return int(pipeline_bound_x_v(c, sum_lb, max_lb, tail_lb))


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
    grid = np.arange(1, total + 1)
    values = np.unique(
        (np.where(grid <= r, low * grid, low * r + high * (grid - r)))[None, :] + offsets[:, None]
    )

    def caps_of(v):
        under = inverse_caps(np.array([v]), offsets, low, high, r, total)[0]
        return pack(np.minimum(caps, under), total)

    index = min_feasible(values, caps_of)
    return int(values[min(index, len(values) - 1)])


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
