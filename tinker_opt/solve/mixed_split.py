"""Exact split and bounds of a mixed layer stack (dense and MoE layers at fixed positions).

With position-dependent layer kinds (first_k_dense_replace, moe_layer_freq) a stage's cost depends
on which layers it holds, not only on how many: stage s holds the layers [b_s, b_{s+1}) between
consecutive boundaries, and every per-stage quantity is a difference of prefix sums of the
per-position arrays (coefficients.py). With a recompute count r the stage recomputes its first
min(r, n_s) layers, [b_s, b_s + min(r, n_s)).

For a fixed r every (stage, start, end) triple is tabulated as an (L+1) x (L+1) matrix per stage.
The exact optimum of v*T = sum_s t_s + (m - 1) max_s t_s + max_s tail_s (v = 1) is found like the
uniform split: candidate bottlenecks B and tails C in increasing order; under the caps t_s <= B,
tail_s <= C and the memory limit, a dynamic programme over the boundaries gives the least
sum_s t_s (and a split); the optimal split is reached at its own (B*, C*), and the pairs are cut
off by lower bounds. Feasibility under caps is a reachability over boundaries, monotone in B and
C, so the first feasible candidate is found by bisection. Virtual pipelines keep the even split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tinker_opt.choices import Recompute, RecomputeMethod
from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.costs.pipeline import pipeline_bound_x_v, pipeline_x_v
from tinker_opt.solve.row_split import prefix_arrays

BIG = np.iinfo(np.int64).max // 4
LAYER_ARRAYS = (
    "layer_time_ns",
    "layer_recompute_ns",
    "layer_tail_ns",
    "layer_static_bytes",
    "layer_act_bytes",
    "layer_input_bytes",
)
"""The per-position arrays whose range sums make up a stage's time, tail and memory."""


@dataclass(frozen=True)
class RangeCosts:
    """Per-stage costs of every layer range [b, e) for one recompute count: (p, L+1, L+1) int64
    arrays, `valid` where e > b and the stage's memory fits."""

    time: np.ndarray
    tail: np.ndarray
    memory: np.ndarray
    valid: np.ndarray


def _prefix(a: np.ndarray) -> np.ndarray:
    """Prefix sums along the last axis with a leading 0 (int64)."""
    zero = np.zeros(a.shape[:-1] + (1,), dtype=np.int64)
    return np.concatenate([zero, np.cumsum(a, axis=-1, dtype=np.int64)], axis=-1)


def memory_parts(c: Any, r, b: np.ndarray, e: np.ndarray):
    """(static, working set, per micro-batch in flight) bytes of the layer ranges [b, e) with
    recompute count r (v = 1; `b`, `e`, `r` broadcast; `c` a SplitCoefficients, or configurations
    stacked on a leading axis: mixed_fits.Batch): stage s's memory of a range is
    static + working set + stage_static_bytes[s] + k_s (in flight + stage_act_bytes[s]), with k_s
    its in-flight micro-batches (the integers of coefficients.stage_costs). In flight: kept layers
    hold their activations, recomputed ones only their checkpoints (uniform: ceil(n / r) group
    inputs, with a min(r, n)-layer working set; recompute.py)."""
    L = c.num_layers
    n = np.maximum(e - b, 0)
    static = span(c, "layer_static_bytes", b, e)
    if c.method == RecomputeMethod.UNIFORM:
        return (
            static,
            np.minimum(r, n) * c.work_bytes,
            -(-n // np.maximum(r, 1)) * c.checkpoint_bytes,
        )
    # End of the recomputed layers of [b, e): the first min(r, n) with block.
    cut = np.minimum(b + np.minimum(r, n), L)
    per_micro = (
        span(c, "layer_act_bytes", b, e)
        - span(c, "layer_act_bytes", b, cut)
        + span(c, "layer_input_bytes", b, cut)
    )
    return static, np.where(cut > b, c.work_bytes, 0), per_micro


def span(c: Any, name: str, b, e):
    """Sum of a layer array over [b, e) (prefix sums, int64; leading axes of the array kept). A
    SplitCoefficients' prefix sums are computed once (row_split.prefix_arrays, in its memo): the
    bisections of fits_each ask for the same sums at every step."""
    pre = prefix_arrays(c)[name] if isinstance(c, SplitCoefficients) else _prefix(getattr(c, name))
    return pre[..., e] - pre[..., b]


def stage_limits(c: SplitCoefficients) -> tuple[np.ndarray, np.ndarray]:
    """(k_s, the bytes left to a stage's layers): a range fits in stage s iff static + working
    set + k_s * in flight <= the limit minus the stage's own static bytes and k_s times its own
    activations (memory_parts)."""
    kk = c.stage_inflight_x_v.astype(np.int64)
    return kk, c.memory_limit_bytes - c.stage_static_bytes - kk * c.stage_act_bytes


def fits_each(c: SplitCoefficients, rs: np.ndarray) -> np.ndarray | None:
    """For each r of `rs`: some boundary sequence 0 = b_0 < ... < b_p = L fits every stage (v = 1).

    Every byte count is >= 0, so a range's memory does not decrease as its end moves right
    (memory_parts): stage s fits [b, e) exactly for e up to some E_s(b), found by bisection for
    every (r, stage, start) at once; a boundary e is reachable after stage s iff some reachable
    b < e has E_s(b) >= e (a running maximum over b). None when a byte count is negative (none is
    expected): then only the full tables decide."""
    arrays = (c.layer_static_bytes, c.layer_act_bytes, c.layer_input_bytes)
    if c.work_bytes < 0 or any(bool((a < 0).any()) for a in arrays):
        return None
    L, p = c.num_layers, c.num_stages
    kk, room = stage_limits(c)
    r = rs[:, None, None]
    b = np.arange(L + 1)[None, None, :]
    lo = np.broadcast_to(b, (len(rs), p, L + 1)).copy()  # the end fits, or b: nothing fits
    hi = np.full_like(lo, L + 1)  # the end does not fit, or L + 1
    while (open_ := hi - lo > 1).any():
        mid = (lo + hi) // 2
        static, work, per_micro = memory_parts(c, r, b, mid)
        ok = static + work + kk[None, :, None] * per_micro <= room[None, :, None]
        lo = np.where(open_ & ok, mid, lo)
        hi = np.where(open_ & ~ok, mid, hi)
    reach = np.zeros((len(rs), L + 1), dtype=bool)
    reach[:, 0] = True
    for s in range(p):
        farthest = np.maximum.accumulate(np.where(reach, lo[:, s, :], -1), axis=1)
        reach = np.zeros_like(reach)
        reach[:, 1:] = farthest[:, :-1] >= np.arange(1, L + 1)
    return reach[:, L]


def range_costs(c: SplitCoefficients, r: int) -> RangeCosts:
    """Tabulate t_s, tail_s and memory_s of every range (the integers of coefficients.stage_costs,
    v = 1). The last r is kept in the coefficients' memo (the tables are p (L+1)^2 large, so one r at
    a time: the exact split visits one r after another)."""
    cached = c.memo.range_costs
    if cached is not None and cached[0] == r:
        return cached[1]
    out = RangeCosts(*_tables(c, r))
    c.memo.range_costs = (r, out)
    return out


def _tables(c: SplitCoefficients, r):
    """(time, tail, memory, valid) of every (stage, start, end); r an int, or an (R, 1, 1) array
    of counts: then time, memory and valid lead with R (the tail does not depend on r)."""
    L = c.num_layers
    b = np.arange(L + 1)[:, None]
    e = np.arange(L + 1)[None, :]
    n = np.maximum(e - b, 0)
    # End of the recomputed layers of [b, e): all of them with uniform, the first r with block.
    cut = (
        np.maximum(e, b)
        if c.method == RecomputeMethod.UNIFORM
        else np.minimum(b + np.minimum(r, n), L)
    )
    base_time = span(c, "layer_time_ns", b, e) + span(c, "layer_recompute_ns", b, cut)
    base_tail = span(c, "layer_tail_ns", b, e)
    static, work, per_micro = (x[..., None, :, :] for x in memory_parts(c, r, b, e))
    kk = c.stage_inflight_x_v.astype(np.int64)[:, None, None]
    memory = (
        static
        + c.stage_static_bytes[:, None, None]
        + work
        + kk * (per_micro + c.stage_act_bytes[:, None, None])
    )
    return (
        base_time[..., None, :, :] + c.stage_time_ns[:, None, None],
        base_tail[None] + c.stage_tail_ns[:, None, None],
        memory,
        (n > 0) & (memory <= c.memory_limit_bytes),
    )


def _sum_dp(time: np.ndarray, masks: np.ndarray, parents: list | None = None) -> np.ndarray:
    """min sum_s t_s over the boundary sequences using allowed ranges (BIG when none), for each
    leading index of (..., p, L+1, L+1) tables; each stage's best start is appended to `parents`."""
    p, size = masks.shape[-3], masks.shape[-1]
    value = np.full(masks.shape[:-3] + (size,), BIG, dtype=np.int64)
    value[..., 0] = 0
    for s in range(p):
        allowed = masks[..., s, :, :] & (value[..., :, None] < BIG)
        cand = np.where(allowed, value[..., :, None] + time[..., s, :, :], BIG)
        if parents is not None:
            parents.append(cand.argmin(axis=-2))
        value = cand.min(axis=-2)
    return value[..., -1]


def _least_sum(rc: RangeCosts, masks: np.ndarray) -> tuple[int, tuple[int, ...]] | None:
    """min sum_s t_s over the splits using allowed ranges, and its layer counts (DP)."""
    parents: list[np.ndarray] = []
    total = int(_sum_dp(rc.time, masks, parents))
    if total >= BIG:
        return None
    p, ends, e = masks.shape[0], [], masks.shape[-1] - 1
    for s in reversed(range(p)):
        ends.append(e)
        e = int(parents[s][e])
    bounds = [0] + ends[::-1]
    return total, tuple(bounds[i + 1] - bounds[i] for i in range(p))


def _least_max(values: np.ndarray, masks: np.ndarray):
    """min over the boundary sequences using allowed ranges of max_s values[s, b_s, b_s+1], BIG
    when none: a bottleneck-path DP over the boundaries (one pass; the least value whose caps
    are reachable, which a bisection over the candidate values would find). Leading axes of the
    (..., p, L+1, L+1) masks give one value each."""
    value = np.full(masks.shape[:-3] + masks.shape[-1:], BIG, dtype=np.int64)
    value[..., 0] = -BIG
    for s in range(masks.shape[-3]):
        ok = masks[..., s, :, :] & (value[..., :, None] < BIG)
        value = np.where(ok, np.maximum(value[..., :, None], values[..., s, :, :]), BIG)
        value = value.min(axis=-2)
    return value[..., -1]


TABLE_ELEMENTS = 1 << 21
"""How many (r, stage, start, end) entries the bound tables of one batch of counts hold at most."""


def bound_terms_for_r(c: SplitCoefficients, r: int) -> tuple[int, int, int] | None:
    """Lower bounds on (sum_s t_s, max_s t_s, max_s tail_s) over the splits with recompute count r
    (each term minimised alone), None when no split fits with r. Cached per r."""
    return _bound_terms(c, [r])[r]


def _bound_terms(c: SplitCoefficients, r_values) -> dict[int, tuple[int, int, int] | None]:
    """bound_terms_for_r of every r in r_values: the counts not cached yet tabulated together,
    in batches of at most TABLE_ELEMENTS entries (those with no fitting split left out first)."""
    cache = c.memo.mixed_terms
    fresh = np.array([r for r in r_values if r not in cache], dtype=np.int64)
    fits = fits_each(c, fresh) if len(fresh) else None
    if fits is not None:  # no split fits with these r: no bound to tabulate
        cache.update(dict.fromkeys(fresh[~fits].tolist()))
        fresh = fresh[fits]
    size = max(1, TABLE_ELEMENTS // (c.num_stages * (c.num_layers + 1) ** 2))
    for start in range(0, len(fresh), size):
        rs = fresh[start : start + size]
        time, tail, _, valid = _tables(c, rs[:, None, None])
        total = _sum_dp(time, valid)
        bottleneck, tails = _least_max(time, valid), _least_max(tail, valid)
        for j, r in enumerate(rs.tolist()):
            fits = total[j] < BIG
            cache[r] = (int(total[j]), int(bottleneck[j]), int(tails[j])) if fits else None
    return {r: cache[r] for r in r_values}


def mixed_recompute_bounds(c: SplitCoefficients, r_values) -> dict[int, int]:
    """{r: lower bound on v*T with recompute count r} for each r in r_values with a fitting split."""
    terms = _bound_terms(c, list(r_values))
    return {r: pipeline_bound_x_v(c, *t) for r, t in terms.items() if t is not None}


def best_for_r(c: SplitCoefficients, r: int, incumbent: int):
    """(v*T, layers) of the exact best split with recompute count r if below incumbent, else None."""
    terms = bound_terms_for_r(c, r)
    if terms is None:
        return None
    sum_lb, b_min, tail_lb = terms
    rc = range_costs(c, r)
    times = np.unique(rc.time[rc.valid])
    best_obj, best_n = incumbent, None
    for b_value in times[np.searchsorted(times, b_min) :]:
        if pipeline_bound_x_v(c, sum_lb, int(b_value), tail_lb) >= best_obj:
            break
        under_b = rc.valid & (rc.time <= b_value)
        tails = np.unique(rc.tail[under_b])
        for c_value in tails[np.searchsorted(tails, int(_least_max(rc.tail, under_b))) :]:
            if pipeline_bound_x_v(c, sum_lb, int(b_value), int(c_value)) >= best_obj:
                break
            allowed = under_b & (rc.tail <= c_value)
            least = _least_sum(rc, allowed)
            # c_value >= the least max tail over under_b: the split reaching it uses allowed ranges
            assert least is not None
            layers = least[1]
            obj = _objective(c, rc, layers)
            if obj < best_obj:
                best_obj, best_n = obj, layers
            if (allowed == under_b).all():  # a larger C allows nothing more
                break
    return None if best_n is None else (best_obj, best_n)


def _objective(c: SplitCoefficients, rc: RangeCosts, layers: tuple[int, ...]) -> int:
    starts = np.concatenate([[0], np.cumsum(layers)[:-1]])
    ends = np.cumsum(layers)
    stages = np.arange(len(layers))
    times = rc.time[stages, starts, ends]
    tails = rc.tail[stages, starts, ends]
    return int(pipeline_x_v(c, times.sum(), times.max(), tails.max()))


def even_for_r(c: SplitCoefficients, r: int) -> int | None:
    """v*T of the even split (virtual pipeline) with recompute count r, None if it does not fit."""
    layers = (c.num_layers // c.num_stages,) * c.num_stages
    stages = c.stage_costs(layers, r)
    if max(st.memory_bytes_x_v for st in stages) > c.vpp * c.memory_limit_bytes:
        return None
    return c.iteration_time_ns_x_v(stages)


def least_peak_split(c: SplitCoefficients, r: int) -> tuple[tuple[int, ...], int]:
    """(layers, peak bytes) of the v = 1 split with the smallest largest stage memory at r."""
    rc = range_costs(c, r)
    ranges = (np.arange(c.num_layers + 1)[None, :] > np.arange(c.num_layers + 1)[:, None])[None]
    peak = int(_least_max(rc.memory, np.broadcast_to(ranges, rc.memory.shape)))
    least = _least_sum(rc, ranges & (rc.memory <= peak))
    assert least is not None  # the split whose largest stage memory is `peak` uses these ranges
    return least[1], peak


def cheap_bound(c: SplitCoefficients) -> int:
    """A valid bound on v*T for a mixed stack without any split search: the stages share the
    layers' total time and tail (max >= mean), each stage holds at least its cheapest layer and,
    with full recompute, recomputes at least one layer."""
    p = c.num_stages
    full = c.outer.recompute == Recompute.FULL
    least_rc = int(c.layer_recompute_ns.min()) if full else 0
    sum_lb = int(c.layer_time_ns.sum() + c.stage_time_ns.sum()) + p * least_rc
    if c.method == RecomputeMethod.UNIFORM:  # every layer is recomputed
        sum_lb = int(c.layer_time_ns.sum() + c.layer_recompute_ns.sum() + c.stage_time_ns.sum())
    max_lb = max(-(-sum_lb // p), int((c.stage_time_ns + c.layer_time_ns.min() + least_rc).max()))
    tails = int(c.layer_tail_ns.sum() + c.stage_tail_ns.sum())
    tail_lb = max(-(-tails // p), int((c.stage_tail_ns + c.layer_tail_ns.min()).max()))
    return pipeline_bound_x_v(c, sum_lb, max_lb, tail_lb)


def layer_prefix(c: SplitCoefficients) -> dict[str, list[int]]:
    """Prefix sums (Python ints, leading 0) of LAYER_ARRAYS: the coefficients of the solver rows
    of a mixed stack (cpsat_rows.py, milp_rows.py)."""
    return {name: [0, *np.cumsum(getattr(c, name)).tolist()] for name in LAYER_ARRAYS}
