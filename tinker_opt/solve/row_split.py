"""Exact split among an explicit list of per-virtual-stage layer counts, priced as numpy rows.

Where the framework can write only a small family of splits, the family is listed and every list
priced directly: virtual_split.py's uneven per-virtual-stage lists (vpp > 1), and form_split.py's
`first_last` / `even` per-stage lists of a mixed stack (v = 1, where a row is one count per
stage). A row holds p x v counts in Megatron's order (chunk j of rank s at column j p + s; for
v = 1 simply stage s), priced with the integers of `SplitCoefficients.stage_costs`, vectorised
over the rows, for one recompute count r at a time: a rank's time and tail add its chunks'
prefix sums, its memory keeps the chunks' activations in flight and the largest chunk's recompute
working set (costs/recompute.chunk_plan per chunk).

For each row the smallest r that fits is its best: the time grows with r (block recomputes the
first min(r, n) layers of a chunk, each adding its recompute time >= 0; uniform recomputes every
layer whatever r), so the best row over all, each at its smallest fitting r, is the exact
optimum over the family and every recompute count (ties: the smallest r, then the first row of
the list). The rows are visited in the order of a lower bound (each row at the smallest r,
memory ignored) and the visit stops at the first batch whose least bound exceeds the best found.
tests/test_virtual_split.py and tests/test_row_split.py check the tables against stage_costs and
the optimum and feasibility against brute force over every list of the family.
"""

from __future__ import annotations

import numpy as np

from tinker_opt.choices import Recompute, RecomputeMethod
from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.costs.pipeline import pipeline_x_v
from tinker_opt.solve.layer_split import Split

BIG = np.iinfo(np.int64).max
ROW_ARRAYS = (
    "layer_time_ns",
    "layer_recompute_ns",
    "layer_tail_ns",
    "layer_static_bytes",
    "layer_act_bytes",
    "layer_input_bytes",
)
"""The per-position arrays whose range sums price a row (prefix sums in the memo)."""


def _plan(c: SplitCoefficients, n: np.ndarray, r: int | np.ndarray):
    """(recomputed, checkpoints, working-set layers) of every chunk (recompute.chunk_plan)."""
    zero = np.zeros_like(n)
    if c.method is None or not np.any(np.asarray(r) > 0):
        return zero, zero, zero
    if c.method == RecomputeMethod.UNIFORM:
        return n, np.where(n > 0, -(-n // r), 0), np.minimum(r, n)
    return np.minimum(r, n), zero, (n > 0).astype(np.int64)


def prefix_arrays(c: SplitCoefficients) -> dict[str, np.ndarray]:
    """Prefix sums (leading 0, int64) of ROW_ARRAYS, kept in the coefficients' memo (the range
    sums of mixed_split.span read them too)."""
    if c.memo.prefix_arrays is None:
        c.memo.prefix_arrays = {
            name: np.concatenate([[0], np.cumsum(getattr(c, name).astype(np.int64))])
            for name in ROW_ARRAYS
        }
    return c.memo.prefix_arrays


def _spans(c: SplitCoefficients, rows: np.ndarray, r: int | np.ndarray):
    """(span, per_rank, cut, checkpoints, work) of the rows at r: range sums of a layer array
    over each chunk, the per-rank sum of a chunk table, and recompute.chunk_plan per chunk."""
    p, v = c.num_stages, c.vpp
    ends = np.cumsum(rows, axis=1)
    starts = ends - rows
    recomputed, checkpoints, work = _plan(c, rows, r)
    prefix = prefix_arrays(c)

    def span(name: str, upto: np.ndarray | None = None) -> np.ndarray:
        return prefix[name][ends if upto is None else upto] - prefix[name][starts]

    def per_rank(chunk: np.ndarray) -> np.ndarray:  # chunk j of rank s at column j * p + s
        return chunk.reshape(len(rows), v, p).sum(axis=1)

    return span, per_rank, starts + recomputed, checkpoints, work


def _memory(c: SplitCoefficients, rows: np.ndarray, spans) -> np.ndarray:
    """memory_s x v of every rank of every row from `_spans`: static, the in-flight
    micro-batches' kept activations and checkpoints, the largest chunk's recompute working set."""
    span, per_rank, cut, checkpoints, work = spans
    p, v = c.num_stages, c.vpp
    kept = span("layer_act_bytes") - span("layer_act_bytes", cut)
    saved = (
        checkpoints * c.checkpoint_bytes
        if c.method == RecomputeMethod.UNIFORM
        else span("layer_input_bytes", cut)
    )
    return (
        v * (per_rank(span("layer_static_bytes")) + c.stage_static_bytes)
        + c.stage_inflight_x_v.astype(np.int64) * (per_rank(kept + saved) + c.stage_act_bytes)
        + v * work.reshape(len(rows), v, p).max(axis=1) * c.work_bytes
    )


def row_tables(c: SplitCoefficients, rows: np.ndarray, r: int | np.ndarray):
    """(t_s, tail_s, memory_s x v) of every rank of every row at recompute count r (an int, or
    a column of one count per row): the integers of stage_costs(layers, r, chunks) (module
    docstring)."""
    spans = _spans(c, rows, r)
    span, per_rank, cut = spans[:3]
    time = per_rank(span("layer_time_ns") + span("layer_recompute_ns", cut))
    tail = per_rank(span("layer_tail_ns")) + c.stage_tail_ns
    return time + c.stage_time_ns, tail, _memory(c, rows, spans)


def row_fits(c: SplitCoefficients, rows: np.ndarray, r: int | np.ndarray) -> np.ndarray:
    """Whether each row fits in memory at recompute count r (row_tables' memory alone)."""
    memory = _memory(c, rows, _spans(c, rows, r))
    return np.asarray((memory <= c.vpp * c.memory_limit_bytes).all(axis=1))


def row_objective(
    c: SplitCoefficients, rows: np.ndarray, r: int | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(v*T, fits in memory) of every row at recompute count r (an int or one per row)."""
    time, tail, memory = row_tables(c, rows, r)
    value = pipeline_x_v(c, time.sum(axis=1), time.max(axis=1), tail.max(axis=1))
    return value, (memory <= c.vpp * c.memory_limit_bytes).all(axis=1)


def _lowest_r(c: SplitCoefficients, rows: np.ndarray) -> int | np.ndarray:
    """Each row's smallest recompute count: 0 without full recompute, 1 with it, the row's
    largest chunk where full recompute covers every layer of a chunk (recompute_all)."""
    if c.outer.recompute != Recompute.FULL:
        return 0
    return rows.max(axis=1)[:, None] if c.recompute_all else 1


def rows_lower_bound(c: SplitCoefficients, rows: np.ndarray) -> int:
    """A lower bound on v*T over the rows: each at its smallest recompute count, memory ignored
    (the time grows with r)."""
    return int(row_objective(c, rows, _lowest_r(c, rows))[0].min()) if len(rows) else BIG


def rows_feasible(c: SplitCoefficients, rows: np.ndarray) -> bool:
    """Some row fits with some recompute count (exact). Block (or none): each row at its most
    recompute, where its memory is smallest when no layer's input outweighs its kept activations
    (each recomputed layer trades its activations for its input, and the working set is one
    layer from r = 1 on), else by the exact search; uniform, whose memory is not monotone in r:
    the counts COUNT_BATCH at a time (uniform_fits), or the one count of recompute_all."""
    if len(rows) == 0:
        return False
    if c.method is None:
        return bool(row_fits(c, rows, 0).any())
    most = rows.max(axis=1)[:, None]
    if c.method == RecomputeMethod.UNIFORM and not c.recompute_all:
        largest = int(rows.max())
        return any(
            bool(uniform_fits(c, rows, np.arange(lo, min(lo + COUNT_BATCH, largest + 1))).any())
            for lo in range(1, largest + 1, COUNT_BATCH)
        )
    if c.method == RecomputeMethod.UNIFORM or bool(
        (c.layer_input_bytes <= c.layer_act_bytes).all()
    ):
        return bool(row_fits(c, rows, most).any())
    return best_row(c, rows) is not None


COUNT_BATCH = 8
"""Recompute counts `uniform`'s feasibility prices together (the first batch often fits)."""


def uniform_fits(c: SplitCoefficients, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(rows x counts) whether each row fits with `uniform` and each count r >= 1."""
    memory = uniform_memory(c, rows, counts)
    return np.asarray((memory <= c.vpp * c.memory_limit_bytes).all(axis=2))


def uniform_memory(c: SplitCoefficients, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(rows x counts x ranks) memory x v with `uniform` and each count r >= 1, the counts at
    once. A `uniform` chunk of n layers recomputes all of them, so it keeps ceil(n / r)
    group inputs and re-runs min(r, n) layers at a time (row_tables' integers,
    recompute.chunk_plan): rank s holds v (static + own static) + k_s (ceil-sum x checkpoint +
    own activations) + v min(r, largest chunk) x working set, only the last two terms in r."""
    p, v = c.num_stages, c.vpp
    ends = np.cumsum(rows, axis=1)
    prefix = prefix_arrays(c)["layer_static_bytes"]
    static = (prefix[ends] - prefix[ends - rows]).reshape(len(rows), v, p).sum(axis=1)
    kk = c.stage_inflight_x_v.astype(np.int64)
    fixed = v * (static + c.stage_static_bytes) + kk * c.stage_act_bytes  # (rows, p)
    chunks = rows.reshape(len(rows), v, p)
    groups = -(-chunks[:, None, :, :] // counts[None, :, None, None])  # (rows, r, v, p)
    largest = chunks.max(axis=1)  # (rows, p)
    return (
        fixed[:, None, :]
        + kk * groups.sum(axis=2) * c.checkpoint_bytes
        + v * np.minimum(counts[None, :, None], largest[:, None, :]) * c.work_bytes
    )


def _first_fits(c: SplitCoefficients, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(v*T, r) of each row at its smallest fitting recompute count (BIG where none fits): the
    best of the row, since the time grows with r. A count above a row's largest chunk repeats
    its largest (and `uniform` refuses it), so the scan stops there."""
    largest = rows.max(axis=1)
    if c.outer.recompute == Recompute.FULL and c.recompute_all:
        value, fits = row_objective(c, rows, largest[:, None])
        return np.where(fits, value, BIG), np.where(fits, largest, 0)
    best = np.full(len(rows), BIG, dtype=np.int64)
    best_r = np.zeros(len(rows), dtype=np.int64)
    open_rows = np.ones(len(rows), dtype=bool)
    counts = (
        range(1, int(largest.max()) + 1) if c.outer.recompute == Recompute.FULL else range(0, 1)
    )
    for r in counts:
        value, fits = row_objective(c, rows, r)
        fits &= open_rows & (r <= largest)
        best, best_r = np.where(fits, value, best), np.where(fits, r, best_r)
        open_rows &= ~fits
        if not open_rows.any():
            break
    return best, best_r


def best_row(
    c: SplitCoefficients, rows: np.ndarray, batch: int = 16
) -> tuple[int, int, int] | None:
    """(v*T, r, row index) of the best row with its smallest fitting recompute count, None if
    none fits; among rows of equal v*T the smallest r, then the first row of the list (a rule
    of the result, not of the visiting order). Rows are visited in the order of their lower
    bound (rows_lower_bound's, per row), `batch` at a time; the visit stops at the first batch
    whose least bound exceeds the best v*T (a bound equal to it may still tie)."""
    if len(rows) == 0:
        return None
    bounds = row_objective(c, rows, _lowest_r(c, rows))[0]
    order = np.argsort(bounds, kind="stable")
    found = (BIG, 0, 0)  # (v*T, r, row)
    for first in range(0, len(order), batch):
        chosen = order[first : first + batch]
        if bounds[chosen[0]] > found[0]:
            break
        values, counts = _first_fits(c, rows[chosen])
        j = int(np.lexsort((chosen, counts, values))[0])
        if values[j] < BIG:
            found = min(found, (int(values[j]), int(counts[j]), int(chosen[j])))
    return None if found[0] == BIG else found


def best_row_split(c: SplitCoefficients, rows: np.ndarray, batch: int = 16) -> Split | None:
    """best_row as a Split: per-rank layers, and the per-virtual-stage list (`chunks`) when it
    is not the even split of vpp > 1 (None with v = 1, where the row is the per-stage list).
    Feasibility first: it costs one pricing of the rows, where the search of a configuration
    in which nothing fits prices every row at every count."""
    found = best_row(c, rows, batch) if rows_feasible(c, rows) else None
    if found is None:
        return None
    counts = tuple(int(n) for n in rows[found[2]])
    layers = tuple(sum(counts[s :: c.num_stages]) for s in range(c.num_stages))
    even = c.vpp == 1 or len(set(counts)) == 1
    return Split(layers, found[1], found[0], None if even else counts)
