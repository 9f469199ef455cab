"""Valid lower bounds and exact feasibility of an outer configuration, before any split search.

Used to prune outer configurations before the CP-SAT / MILP model is built: a configuration whose
lower bound is at least the time of a split already found cannot hold a strictly better strategy,
so dropping it keeps the optimum exact. Every bound below holds for every split and recompute
count of the configuration (each term is bounded separately, and the terms add up):
  * sum_s t_s >= a L + sum_s e_s + f * p * [full recompute]  (each stage recomputes >= 1 layer);
  * max_s t_s >= the least possible bottleneck under the memory caps (water-filling, r at its
    smallest value, since times grow with r and caps with r);
  * max_s tail_s >= the least possible largest tail under the same caps.
With full recompute the memory often forces r well above 1, and then every stage holding r layers
or more recomputes r of them: `recompute_bounds` gives, for each recompute count r whose caps
admit a split, the same three terms with r fixed (sum_s min(r, n_s) is smallest when the layers
are packed into the largest caps, the bottleneck and tail by water-filling under the caps of r).
Their minimum over r is the tight bound; the CP-SAT model links each r to its bound.
Feasibility is exact: with the most recompute every stage's memory is smallest, and a split exists
iff each stage can hold a layer and the caps add up to L.
"""

from __future__ import annotations

import numpy as np

from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve.mixed_split import bound_terms_for_r, mixed_recompute_bounds
from tinker_opt.solve.layer_split import (Scalars, best_even, best_split, inverse_caps, min_feasible,
                                          memory_caps, pack, recompute_range)


def loosest_caps(c: SplitCoefficients, k: Scalars) -> np.ndarray:
    """Memory caps per stage with the most recompute the configuration allows."""
    return memory_caps(c, k, recompute_range(c)[-1])


def min_recompute_even(c: SplitCoefficients, k: Scalars | None = None):
    """Virtual pipeline: the best (smallest feasible r) even split, or None (exact)."""
    if not c.homogeneous:
        return best_split(c)
    k = k or Scalars.of(c)
    for r in recompute_range(c):
        found = best_even(c, k, r)
        if found is not None:
            return found
    return None


def is_feasible(c: SplitCoefficients) -> bool:
    """Some split and recompute count of this configuration fits in memory (exact)."""
    if c.vpp > 1:
        return min_recompute_even(c) is not None
    if not c.homogeneous:
        return bound_terms_for_r(c, recompute_range(c)[-1]) is not None  # most recompute: least memory
    caps = loosest_caps(c, Scalars.of(c))
    return bool(caps.min() >= 1 and caps.sum() >= c.num_layers)


def lower_bound_x_v(c: SplitCoefficients, *, tight: bool = True) -> int:
    """A lower bound on v*T over all splits of a feasible configuration (exact with vpp > 1)."""
    if c.vpp > 1:
        found = min_recompute_even(c)
        return found.time_ns_x_v if found is not None else np.iinfo(np.int64).max
    if not c.homogeneous:
        return min(recompute_bounds(c).values()) if tight else _cheap_mixed_bound(c)
    sum_lb, max_lb, tail_lb = bound_terms(c, tight=tight)
    loose = int(sum_lb + (c.num_microbatches - 1) * max_lb + tail_lb)
    if not tight or c.outer.recompute != "full":
        return loose
    return max(loose, min(recompute_bounds(c).values()))


def recompute_bounds(c: SplitCoefficients) -> dict[int, int]:
    """{r: a lower bound on v*T over the splits with recompute count r} for every r whose memory
    caps admit a split (v = 1; module docstring). Kept in the coefficients' memo."""
    if c.memo.recompute_bounds is None and not c.homogeneous:
        c.memo.recompute_bounds = mixed_recompute_bounds(c, recompute_range(c))
    if c.memo.recompute_bounds is None:
        k = Scalars.of(c)
        found = {r: _bound_for_r(c, k, r) for r in recompute_range(c)}
        c.memo.recompute_bounds = {r: bound for r, bound in found.items() if bound is not None}
    return c.memo.recompute_bounds


def _cheap_mixed_bound(c: SplitCoefficients) -> int:
    """A valid bound for a mixed stack without any split search: the stages share the layers'
    total time and tail (max >= mean), each stage holds at least its cheapest layer and, with
    full recompute, recomputes at least one layer."""
    p, m = c.num_stages, c.num_microbatches
    full = c.outer.recompute == "full"
    least_rc = int(c.layer_recompute_ns.min()) if full else 0
    sum_lb = int(c.layer_time_ns.sum() + c.stage_time_ns.sum()) + p * least_rc
    max_lb = max(-(-sum_lb // p), int((c.stage_time_ns + c.layer_time_ns.min() + least_rc).max()))
    tails = int(c.layer_tail_ns.sum() + c.stage_tail_ns.sum())
    tail_lb = max(-(-tails // p), int((c.stage_tail_ns + c.layer_tail_ns.min()).max()))
    return sum_lb + (m - 1) * max_lb + tail_lb


def _bound_for_r(c: SplitCoefficients, k: Scalars, r: int) -> int | None:
    """sum + (m - 1) max + tail lower bounds with r fixed, None when no split fits with r."""
    L = c.num_layers
    caps = memory_caps(c, k, r)
    packed = pack(caps, L)
    if packed is None:
        return None
    sum_lb = k.a * L + int(c.stage_time_ns.sum()) + k.f * int(np.minimum(r, packed).sum())
    max_lb = _least_max(c.stage_time_ns, k.a + k.f, k.a, r, caps, L)
    tail_lb = _least_max(c.stage_tail_ns, k.alpha, k.alpha, 0, caps, L)
    return int(sum_lb + (c.num_microbatches - 1) * max_lb + tail_lb)


def bound_terms(c: SplitCoefficients, *, tight: bool = True) -> tuple[int, int, int]:
    """Lower bounds on (sum_s t_s, max_s t_s, max_s tail_s) of a v = 1 configuration."""
    k = Scalars.of(c)
    L, p = c.num_layers, c.num_stages
    r_lo = recompute_range(c)[0]
    sum_lb = k.a * L + int(c.stage_time_ns.sum()) + k.f * p * min(r_lo, 1)
    per = -(-L // p)
    max_lb = max(k.a * per + k.f * min(r_lo, per) + int(c.stage_time_ns.min()),
                 int((k.a + k.f * min(r_lo, 1) + c.stage_time_ns).max()))
    tail_lb = max(k.alpha * per + int(c.stage_tail_ns.min()), int((k.alpha + c.stage_tail_ns).max()))
    if tight:
        caps = loosest_caps(c, k)
        max_lb = max(max_lb, _least_max(c.stage_time_ns, k.a + k.f, k.a, r_lo, caps, L))
        tail_lb = max(tail_lb, _least_max(c.stage_tail_ns, k.alpha, k.alpha, 0, caps, L))
    return int(sum_lb), int(max_lb), int(tail_lb)


def _least_max(offsets: np.ndarray, low: int, high: int, r: int, caps: np.ndarray, total: int) -> int:
    """min over splits (n_s <= caps) of max_s offset_s + cost(n_s): water-filling on candidates."""
    grid = np.arange(1, total + 1)
    values = np.unique((np.where(grid <= r, low * grid, low * r + high * (grid - r)))[None, :]
                       + offsets[:, None])
    caps_of = lambda v: pack(np.minimum(caps, inverse_caps(np.array([v]), offsets, low, high, r, total)[0]), total)
    index = min_feasible(values, caps_of)
    return int(values[min(index, len(values) - 1)])
