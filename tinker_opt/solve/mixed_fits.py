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

Only a configuration that the two disagree on is decided exactly (`_exact_fits`). The relaxations of many
configurations with the same number of layers, stages and recompute method are computed together
(`fits_many`, arrays stacked on a leading axis: the presolve asks for thousands). The bounds and
splits of a mixed stack stay in mixed_split.py; this module answers feasibility only
(stacks.MixedStack.fits, stacks.feasible_many).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from tinker_opt.choices import RecomputeMethod
from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve.layer_split import recompute_range
from tinker_opt.solve.mixed_split import fits_each, memory_parts, span, stage_limits

BATCH_ELEMENTS = 1 << 20
"""How many (configuration, start, length) entries one batch of relaxations holds at most."""
TABLE_ELEMENTS = 1 << 22
"""How many (r, stage, start, end) entries one batch of tables holds at most."""


def fit_counts(c: SplitCoefficients) -> np.ndarray:
    """The recompute counts feasibility tries (v = 1): every one with `uniform` (none uses the
    least memory everywhere), else the largest (the most recompute uses the least memory)."""
    counts = recompute_range(c)
    return np.array(counts if c.method == RecomputeMethod.UNIFORM else [counts[-1]], dtype=np.int64)


def fits_many(cs: list[SplitCoefficients]) -> list[bool]:
    """Whether some split fits (some r of fit_counts, v = 1), exactly, for each configuration: the
    relaxations batched over configurations of the same shape, the tables where they disagree."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, c in enumerate(cs):
        groups[(c.num_layers, c.num_stages, c.method, tuple(fit_counts(c)))].append(i)
    out = [False] * len(cs)
    for (L, _, _, counts), members in groups.items():
        rs = np.array(counts, dtype=np.int64)
        size = max(1, BATCH_ELEMENTS // (L * L + len(rs) * L))
        for start in range(0, len(members), size):
            part = members[start : start + size]
            need, sure = _relaxations(Batch.of([cs[i] for i in part]), rs)
            for k, i in enumerate(part):
                open_rs = rs[need[k]]
                out[i] = bool(sure[k].any()) or (len(open_rs) > 0 and _exact_fits(cs[i], open_rs))
    return out


@dataclass(frozen=True)
class Batch:
    """Configurations of the same number of layers, stages and method, stacked on a leading axis
    k: the fields memory_parts reads, with (k, p) stage limits (mixed_split.stage_limits)."""

    num_layers: int
    method: str | None
    layer_static_bytes: np.ndarray
    layer_act_bytes: np.ndarray
    layer_input_bytes: np.ndarray
    work_bytes: np.ndarray
    checkpoint_bytes: np.ndarray
    inflight: np.ndarray
    room: np.ndarray

    @classmethod
    def of(cls, cs: list[SplitCoefficients]) -> Batch:
        def stacked(name: str) -> np.ndarray:
            return np.stack([getattr(c, name) for c in cs])

        def scalars(values: list[int]) -> np.ndarray:
            return np.array(values, dtype=np.int64)[:, None, None]

        limits = [stage_limits(c) for c in cs]
        return cls(
            cs[0].num_layers,
            cs[0].method,
            stacked("layer_static_bytes"),
            stacked("layer_act_bytes"),
            stacked("layer_input_bytes"),
            scalars([c.work_bytes for c in cs]),
            scalars([c.checkpoint_bytes for c in cs]),
            np.stack([kk for kk, _ in limits]),
            np.stack([room for _, room in limits]),
        )


def _relaxations(batch: Batch, rs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(necessary, sufficient) condition of a fitting split, (k, r) (module docstring)."""
    L = batch.num_layers
    low, high = _length_extremes(batch, rs)
    kk, room = batch.inflight[:, None, :, None], batch.room[:, None, :, None]

    def caps(parts, prefix: bool) -> np.ndarray:
        """(k, r, stage): the largest length that fits, or the lengths 1, 2, .. that all fit."""
        static, work, per_micro = parts
        ok = (static + work)[:, :, None, :] + kk * per_micro[:, :, None, :] <= room
        if prefix:  # the leading lengths that fit: the index of the first that does not
            return np.where(ok.all(axis=-1), L, np.argmin(ok, axis=-1))
        # one past the last length that fits (0: none)
        return np.where(ok.any(axis=-1), L - np.argmax(ok[..., ::-1], axis=-1), 0)

    def enough(cap: np.ndarray) -> np.ndarray:
        return (cap.min(axis=-1) >= 1) & (cap.sum(axis=-1) >= L)

    return enough(caps(low, prefix=False)), enough(caps(high, prefix=True))


def _length_extremes(batch: Batch, rs: np.ndarray):
    """(least, largest): each part of memory_parts minimised (maximised) alone over the ranges
    of each length n = 1 .. L, as (k, r or 1, n) arrays."""
    L, k = batch.num_layers, len(batch.work_bytes)
    n = np.arange(1, L + 1)[None, :]
    b = np.arange(L)[:, None]
    inside = b + n <= L
    e = np.minimum(b + n, L)

    def extremes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = np.broadcast_to(x, (k, L, L))  # (k, start, length)
        least = np.where(inside, x, x.max()).min(axis=1)[:, None, :]
        return least, np.where(inside, x, x.min()).max(axis=1)[:, None, :]

    if (
        batch.method == RecomputeMethod.UNIFORM
    ):  # only the static bytes depend on where the range starts
        least, largest = extremes(span(batch, "layer_static_bytes", b, e))
        _, work, per_micro = memory_parts(batch, rs[None, :, None], np.zeros((1, 1, 1), int), n)
        return (least, work, per_micro), (largest, work, per_micro)
    (r,) = rs  # block, or no full recompute: one r
    pairs = [extremes(x) for x in memory_parts(batch, int(r), b, e)]
    return tuple(lo for lo, _ in pairs), tuple(hi for _, hi in pairs)


def _exact_fits(c: SplitCoefficients, rs: np.ndarray) -> bool:
    """Some boundary sequence 0 = b_0 < ... < b_p = L fits every stage with one r of `rs`
    (mixed_split.fits_each; the full tables where it cannot decide)."""
    each = fits_each(c, rs)
    return bool(each.any()) if each is not None else _tabulated_fits(c, rs)


def _tabulated_fits(c: SplitCoefficients, rs: np.ndarray) -> bool:
    """_exact_fits from the memory of every (stage, range), for the r of `rs` in batches."""
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
