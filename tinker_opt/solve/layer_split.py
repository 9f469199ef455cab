"""The exact split of a uniform layer stack (every layer costs the same, stacks.UniformStack):
per-stage layer counts and recompute count for one outer configuration.

Objective (coefficients.py): v*T = sum_s t_s + (m*v - 1) max_s t_s + v max_s tail_s, with
t_s = a n_s + f min(r, n_s) + e_s (block recompute; uniform: (a + f) n_s + e_s, costs/recompute.py),
tail_s = alpha n_s + beta_s and the memory of each stage under its limit. For v = 1 and a fixed r
the exact optimum is found by enumerating the candidate values
B of max_s t_s and C of max_s tail_s (each is some stage's value at some layer count): a pair gives
per-stage caps on n_s, and under caps the sum of min(r, n_s) is smallest when layers are packed
into the stages with the largest caps (a concave sum is minimised by the vector that majorises all
others). The optimal split is feasible for its own (B*, C*), where packing is no worse, so the best
pair is the optimum; pairs are visited in increasing order and cut off by a lower bound. With a
virtual pipeline the split is the even one and only r is chosen. When the framework can write only
some splits (Megatron-LM's first/last-stage counts, older versions' even split) the search runs over
those splits instead (form_split.py, chosen by stacks.Stack.best_split). `Split` and
`recompute_range` serve both stacks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinker_opt.choices import Recompute, RecomputeMethod
from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.costs.pipeline import pipeline_bound_x_v, pipeline_x_v
from tinker_opt.costs.recompute import caps_from_memory, piecewise, time_shape, uniform_stage_memory

INF = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class Split:
    """An optimal split: layers per stage, recompute count (0 without full recompute), v*T in ns."""

    layers: tuple[int, ...]
    recompute_num_layers: int
    time_ns_x_v: int
    chunks: tuple[int, ...] | None = None
    """Layers of each virtual stage (Megatron's order) when they are not the even split."""


@dataclass(frozen=True)
class Scalars:
    """Scalar coefficients of a homogeneous stack (every layer costs the same)."""

    a: int
    f: int
    w: int
    act: int
    inp: int
    alpha: int

    @classmethod
    def of(cls, c: SplitCoefficients) -> Scalars:
        """The scalars of a uniform stack (kept in the coefficients' memo); only for a stack that
        stacks.stack_of found uniform (the first layer stands for all of them)."""
        if c.memo.scalars is None:
            c.memo.scalars = cls(
                int(c.layer_time_ns[0]),
                int(c.layer_recompute_ns[0]),
                int(c.layer_static_bytes[0]),
                int(c.layer_act_bytes[0]),
                int(c.layer_input_bytes[0]),
                int(c.layer_tail_ns[0]),
            )
        return c.memo.scalars


def recompute_range(c: SplitCoefficients) -> range:
    """Candidate recompute counts: 0 without full recompute, else 1 .. the largest chunk."""
    if c.outer.recompute != Recompute.FULL:
        return range(0, 1)
    chunk_max = (
        c.num_layers - c.num_stages + 1 if c.vpp == 1 else c.num_layers // (c.num_stages * c.vpp)
    )
    return range(chunk_max if c.recompute_all else 1, chunk_max + 1)


def shape_of(c: SplitCoefficients, k: Scalars, r: int) -> tuple[int, int, int]:
    """(low, high, knee) of the layer time of a stage with recompute count r (recompute.time_shape)."""
    return time_shape(c.method, k.a, k.f, r)


def memory_caps(c: SplitCoefficients, k: Scalars, r: int) -> np.ndarray:
    """Largest layer count each stage can hold under the memory limit with recompute count r."""
    kk = c.stage_inflight_x_v.astype(np.int64)
    if (
        c.method == RecomputeMethod.UNIFORM
    ):  # ceil(n / r) checkpoints and a min(r, n)-layer working set
        n = np.arange(c.num_layers + 1)
        memory = uniform_stage_memory(
            n,
            r,
            w=k.w,
            ckpt=c.checkpoint_bytes,
            work=c.work_bytes,
            inflight=kk,
            fixed=c.stage_static_bytes + kk * c.stage_act_bytes,
        )
        return caps_from_memory(memory, c.memory_limit_bytes)
    budget = (
        c.memory_limit_bytes
        - c.stage_static_bytes
        - (c.work_bytes if r else 0)
        - kk * c.stage_act_bytes
    )
    low = k.w + kk * k.inp  # slope while every layer is recomputed (n <= r)
    high = k.w + kk * k.act  # slope beyond r
    return piecewise_cap(budget, low, high, r, c.num_layers)


def piecewise_cap(budget: np.ndarray, low, high, r: int | np.ndarray, limit: int) -> np.ndarray:
    """max n in [0, limit] with cost(n) <= budget, cost = low*n (n <= r), low*r + high*(n-r) beyond;
    -1 where even n = 0 does not fit. `low` and `high` are scalars or broadcast with budget."""
    low = np.asarray(low, dtype=np.int64)
    high = np.asarray(high, dtype=np.int64)
    first = np.where(low > 0, np.maximum(budget, -1) // np.maximum(low, 1), limit)
    beyond = r + np.where(high > 0, np.maximum(budget - low * r, -1) // np.maximum(high, 1), limit)
    n = np.where(first < r, first, beyond)
    return np.minimum(np.where(budget < 0, -1, n), limit)


def stage_time_ns(c: SplitCoefficients, k: Scalars, n: np.ndarray, r: int) -> np.ndarray:
    return piecewise(n, *shape_of(c, k, r)) + c.stage_time_ns


def objective_x_v(c: SplitCoefficients, k: Scalars, n: np.ndarray, r: int) -> int:
    """v*T of a homogeneous split (the integers of coefficients.iteration_time_ns_x_v)."""
    if c.vpp > 1:
        chunk = c.num_layers // (c.num_stages * c.vpp)
        low, high, knee = shape_of(c, k, r)
        times = high * n + (low - high) * c.vpp * min(knee, chunk) + c.stage_time_ns
    else:
        times = stage_time_ns(c, k, n, r)
    tails = k.alpha * n + c.stage_tail_ns
    return int(pipeline_x_v(c, times.sum(), times.max(), tails.max()))


def pack(caps: np.ndarray, total: int) -> np.ndarray | None:
    """Layers >= 1 per stage under caps summing to total, packed into the largest caps first."""
    if caps.min() < 1 or caps.sum() < total or total < len(caps):
        return None
    n = np.ones_like(caps)
    left = total - len(caps)
    for s in np.argsort(-caps, kind="stable"):
        add = min(int(caps[s]) - 1, left)
        n[s] += add
        left -= add
        if left == 0:
            break
    return n


def best_free_split(c: SplitCoefficients, k: Scalars) -> Split | None:
    """The exact optimal split of a uniform stack among every split (no layer form), None if
    nothing fits (stacks.UniformStack; mixed stacks: mixed_split.py)."""
    best: Split | None = None
    seen_caps: list[np.ndarray] = []
    for r in recompute_range(c):
        incumbent = best.time_ns_x_v if best else INF
        if c.vpp == 1 and lower_bound_for_r(c, k, r) >= incumbent:
            continue
        if c.vpp == 1 and c.method == RecomputeMethod.UNIFORM:
            # uniform: the time does not depend on r, so an r whose caps are no looser than an
            # earlier r's admits no better split.
            caps = memory_caps(c, k, r)
            if any((caps <= seen).all() for seen in seen_caps):
                continue
            seen_caps.append(caps)
        found = best_even(c, k, r) if c.vpp > 1 else _best_for_r(c, k, r, incumbent)
        if found is not None and (best is None or found.time_ns_x_v < best.time_ns_x_v):
            best = found
    return best


def lower_bound_for_r(c: SplitCoefficients, k: Scalars, r: int) -> int:
    """A lower bound on v*T for recompute count r (v = 1): the largest stage holds at least
    ceil(L/p) layers, every stage recomputes min(r, 1) or more, every tail is at least its own."""
    return lower_bounds_for_r(c, k, [r])[r]


def lower_bounds_for_r(c: SplitCoefficients, k: Scalars, rs) -> dict[int, int]:
    """{r: lower_bound_for_r} for every r in `rs`, as one array expression."""
    L, p = c.num_layers, c.num_stages
    per = -(-L // p)
    rs = [int(r) for r in rs]
    low, high, knee = np.array([shape_of(c, k, r) for r in rs], dtype=np.int64).reshape(-1, 3).T
    bottleneck = piecewise(per, low, high, knee) + int(c.stage_time_ns.min())
    total = (
        high * L
        + int(c.stage_time_ns.sum())
        + (low - high) * (np.minimum(knee, per) + (p - 1) * np.minimum(knee, 1))
    )
    tail = max(k.alpha * per + int(c.stage_tail_ns.min()), int((k.alpha + c.stage_tail_ns).max()))
    bounds = pipeline_bound_x_v(c, total, bottleneck, tail)
    return {r: int(b) for r, b in zip(rs, bounds, strict=True)}


def even_fits(c: SplitCoefficients, k: Scalars, r) -> np.ndarray:
    """Virtual pipeline: whether the even split fits in memory at recompute count r, per row
    of `r` (an int: one row; a column of counts: one row each, every count at once)."""
    p, v = c.num_stages, c.vpp
    n = np.full(p, c.num_layers // p, dtype=np.int64)
    chunk = c.num_layers // (p * v)
    kk = c.stage_inflight_x_v
    if c.method == RecomputeMethod.UNIFORM:
        # Every layer recomputed; per chunk ceil(chunk / r) group inputs in flight and one group of
        # min(r, chunk) layers live while recomputed (recompute.chunk_plan; coefficients.stage_costs).
        mem_x_v = v * (
            k.w * n + c.stage_static_bytes + np.minimum(r, chunk) * c.work_bytes
        ) + kk * (v * -(-chunk // r) * c.checkpoint_bytes + c.stage_act_bytes)
    else:
        rs = v * np.minimum(r, chunk)
        mem_x_v = v * (
            k.w * n + c.stage_static_bytes + np.where(np.asarray(r) > 0, c.work_bytes, 0)
        ) + kk * (k.act * (n - rs) + k.inp * rs + c.stage_act_bytes)
    # np.any with an axis: one bool per row (the method's stub also admits a scalar result)
    return ~np.any(np.atleast_2d(mem_x_v > v * c.memory_limit_bytes), axis=1)


def best_even(c: SplitCoefficients, k: Scalars, r: int) -> Split | None:
    """Virtual pipeline: the even split for recompute count r, None when it does not fit."""
    return _even_split(c, k, r) if even_fits(c, k, r)[0] else None


def _even_split(c: SplitCoefficients, k: Scalars, r: int) -> Split:
    """The even split at recompute count r (known to fit)."""
    n = np.full(c.num_stages, c.num_layers // c.num_stages, dtype=np.int64)
    return Split(tuple(int(x) for x in n), r, objective_x_v(c, k, n, r))


def first_even(c: SplitCoefficients, k: Scalars) -> Split | None:
    """Virtual pipeline: the even split at the smallest recompute count where it fits (time
    grows with r), every count's memory checked at once (and not again); None when none fits."""
    rs = np.array(recompute_range(c), dtype=np.int64)
    fits = even_fits(c, k, rs[:, None])
    return _even_split(c, k, int(rs[np.argmax(fits)])) if fits.any() else None


def inverse_caps(
    values: np.ndarray, offsets: np.ndarray, low: int, high: int, r: int, limit: int
) -> np.ndarray:
    """For each candidate value (rows) and stage (columns): max n with offset + cost(n) <= value."""
    return piecewise_cap(values[:, None] - offsets[None, :], low, high, r, limit)


def min_feasible(values: np.ndarray, caps_of) -> int:
    """Index of the first (sorted) candidate whose caps admit a split, len(values) if none."""
    lo, hi = 0, len(values)
    while lo < hi:  # feasibility is monotone in the candidate value
        mid = (lo + hi) // 2
        if caps_of(values[mid]) is not None:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _best_for_r(c: SplitCoefficients, k: Scalars, r: int, incumbent: int) -> Split | None:
    """Exact split for v = 1 and a fixed r (module docstring), or None if nothing fits."""
    L = c.num_layers
    mem = memory_caps(c, k, r)
    if mem.min() < 1 or mem.sum() < L:
        return None
    e, beta = c.stage_time_ns, c.stage_tail_ns
    low, high, knee = shape_of(c, k, r)
    n_grid = np.arange(1, L + 1)
    b_values = np.unique(piecewise(n_grid, low, high, knee)[None, :] + e[:, None])
    c_values = np.unique((k.alpha * n_grid)[None, :] + beta[:, None])
    packed_all = pack(mem, L)
    assert packed_all is not None  # mem >= 1 and sums to >= L (checked above), L >= p stages
    # sum_s t_s >= high L + sum e + (low - high) * the least sum of min(knee, n_s) under any caps
    base = high * L + int(e.sum()) + (low - high) * int(np.minimum(knee, packed_all).sum())
    tail_lb = int((k.alpha * 1 + beta).max())
    best_obj, best_n = incumbent, None

    def caps_b(b):
        return np.minimum(mem, inverse_caps(np.array([b]), e, low, high, knee, L)[0])

    start = min_feasible(b_values, lambda b: pack(caps_b(b), L))
    for b in b_values[start:]:
        if pipeline_bound_x_v(c, base, int(b), tail_lb) >= best_obj:
            break
        u_b = caps_b(b)

        def cap_c(cv, u_b=u_b):
            return np.minimum(u_b, inverse_caps(np.array([cv]), beta, k.alpha, k.alpha, 0, L)[0])

        first = min_feasible(c_values, lambda cv, cap_c=cap_c: pack(cap_c(cv), L))
        for cv in c_values[first:]:
            if pipeline_bound_x_v(c, base, int(b), int(cv)) >= best_obj:
                break
            u = cap_c(cv)
            n = pack(u, L)
            assert n is not None  # cv >= the first feasible value, and feasibility is monotone
            obj = objective_x_v(c, k, n, r)
            if obj < best_obj:
                best_obj, best_n = obj, n
            if (u == u_b).all():
                break
    if best_n is None:
        return None
    return Split(tuple(int(x) for x in best_n), min(r, int(best_n.max())), best_obj)
