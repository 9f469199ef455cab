"""Exact feasibility of a mixed layer stack (v = 1): does some split fit in memory?

The exact answer is a reachability over the boundaries 0 = b_0 < ... < b_p = L in which every
stage's range [b_s, b_{s+1}) fits (mixed_split.memory_parts, p (L+1)^2 comparisons). Most
configurations are decided before that by two relaxations over the range length n alone:

* necessary: a range of n layers at stage s takes at least the least static, working-set and
  in-flight bytes of any n consecutive layers (each minimised alone). The largest n whose least
  memory fits is cap_s, every stage of a fitting split holds n_s <= cap_s layers, so without
  cap_s >= 1 on every stage and sum_s cap_s >= L nothing fits;
* sufficient: with the largest bytes of any n consecutive layers instead, every range of
  n <= cap'_s layers fits at stage s (cap'_s: the lengths 1 .. cap'_s all fit), so cap'_s >= 1
  on every stage and sum_s cap'_s >= L give a fitting split.

Only a configuration that the two disagree on is tabulated. The bounds and splits of a mixed
stack stay in mixed_split.py; this module answers feasibility only (stacks.MixedStack.fits).
"""

from __future__ import annotations

import numpy as np

from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve.mixed_split import memory_parts, span, stage_limits


def fits_for_r(c: SplitCoefficients, r: int) -> bool:
    """Some split fits in memory with recompute count r (v = 1), exactly."""
    return _any_fits(c, np.array([r]))


def uniform_fits(c: SplitCoefficients, r_values) -> bool:
    """Whether some split fits with the `uniform` method and some r in r_values (v = 1), exactly
    (the relaxations of every r at once, the tables only for an r they leave open)."""
    return _any_fits(c, np.asarray(list(r_values), dtype=np.int64))


def _any_fits(c: SplitCoefficients, rs: np.ndarray) -> bool:
    """Whether some split fits with some r of `rs`: the relaxations, then the tables of the r
    they leave open."""
    need, sure = _relaxations(c, rs)
    return bool(sure.any()) or _tabulated_fits(c, rs[need])


def _relaxations(c: SplitCoefficients, rs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(necessary, sufficient) condition of a fitting split for each r (module docstring)."""
    L = c.num_layers
    low, high = _length_extremes(c, rs)
    kk, room = stage_limits(c)

    def caps(parts, prefix: bool) -> np.ndarray:
        """(r, stage): the largest length that fits, or the lengths 1, 2, .. that all fit."""
        static, work, per_micro = parts
        memory = (static + work)[:, None, :] + kk[None, :, None] * per_micro[:, None, :]
        ok = memory <= room[None, :, None]
        if prefix:
            return np.cumprod(ok, axis=2).sum(axis=2)
        return np.where(ok, np.arange(1, L + 1), 0).max(axis=2)

    def enough(cap: np.ndarray) -> np.ndarray:
        return (cap.min(axis=1) >= 1) & (cap.sum(axis=1) >= L)

    return enough(caps(low, prefix=False)), enough(caps(high, prefix=True))


def _length_extremes(c: SplitCoefficients, rs: np.ndarray):
    """(least, largest): each part of memory_parts minimised (maximised) alone over the ranges
    of each length n = 1 .. L, as (r, n) arrays."""
    L = c.num_layers
    n = np.arange(1, L + 1)[None, :]
    b = np.arange(L)[:, None]
    inside = b + n <= L
    e = np.minimum(b + n, L)
    if c.method == "uniform":  # only the static bytes depend on where the range starts
        static = span(c, "layer_static_bytes", b, e)
        _, work, per_micro = memory_parts(c, rs[:, None], np.zeros((1, 1), dtype=np.int64), n)
        least = np.where(inside, static, static.max()).min(axis=0)[None]
        largest = np.where(inside, static, static.min()).max(axis=0)[None]
        return (least, work, per_micro), (largest, work, per_micro)
    (r,) = rs  # block, or no full recompute: one r
    parts = memory_parts(c, int(r), b, e)
    least = tuple(np.where(inside, x, x.max()).min(axis=0)[None] for x in parts)
    largest = tuple(np.where(inside, x, x.min()).max(axis=0)[None] for x in parts)
    return least, largest


TABLE_ELEMENTS = 1 << 22
"""How many (r, stage, start, end) entries one batch of tables holds at most."""


def _tabulated_fits(c: SplitCoefficients, rs: np.ndarray) -> bool:
    """The exact reachability over the memory of every (stage, range), for the r of `rs` in
    batches: some boundary sequence 0 = b_0 < ... < b_p = L fits every stage with one r."""
    L, p = c.num_layers, c.num_stages
    b = np.arange(L + 1)[:, None]
    e = np.arange(L + 1)[None, :]
    kk, room = stage_limits(c)
    batch = max(1, TABLE_ELEMENTS // (p * (L + 1) ** 2))
    for start in range(0, len(rs), batch):
        r = rs[start : start + batch, None, None]
        static, work, per_micro = np.broadcast_arrays(*memory_parts(c, r, b, e))
        memory = (static + work)[:, None] + kk[None, :, None, None] * per_micro[:, None]
        masks = (e > b) & (memory <= room[None, :, None, None])  # (r, stage, start, end)
        reach = np.zeros((len(r), L + 1), dtype=bool)
        reach[:, 0] = True
        for s in range(p):
            reach = (reach[:, :, None] & masks[:, s]).any(axis=1)
        if reach[:, L].any():
            return True
    return False
