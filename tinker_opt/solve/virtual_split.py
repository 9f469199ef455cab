"""Exact uneven split with virtual stages: the first and last virtual stage free, the rest equal.

Megatron-LM's `--pipeline-model-parallel-layout` (megatron/core/transformer/
pipeline_parallel_layer_layout.py, core_v0.13) gives each of the pp x vpp virtual stages its own
decoder-layer count, a stage may hold none; its design note (Megatron-LM MR 2795, "flexible
asymmetric VPP") was written for DeepSeek-V3, whose 61 layers no pp x vpp divides, with the
lighter dense layers and the embedding at the front and the MTP / loss at the back. The search
takes the family of layouts that Megatron's own `--decoder-first/last-pipeline-num-layers` are
for, one level down: virtual stage 0 (rank 0's first chunk) holds n_f layers, the last one (rank
p-1's last chunk) n_l, every other virtual stage q >= 1, with n_f + (p v - 2) q + n_l = L. That is
at most L / (p v - 2) values of q times L + 1 splits per configuration, the even split among them
when p v divides L (n_f = n_l = q).

Each list is priced with the integers of `SplitCoefficients.stage_costs` (chunks in Megatron's
order: chunk j of rank s is virtual stage j p + s), vectorised over the lists, for one recompute
count r at a time: a rank's time and tail add its chunks' prefix sums, its memory keeps the
chunks' activations in flight and the largest chunk's recompute working set
(costs/recompute.chunk_plan per chunk). For each list the smallest r that fits is its best (time
grows with r, memory falls, as for the even split), and the best list over all is the
configuration's split: like the even split, a constant that enters CP-SAT and the MILP
(cpsat.py, milp.py) and the enumeration alike. tests/test_virtual_split.py checks the tables
against stage_costs and the optimum against brute force over every list of the family.
"""

from __future__ import annotations

import numpy as np

from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.costs.pipeline import pipeline_x_v
from tinker_opt.solve.layer_split import Split


def virtual_rows(num_layers: int, num_stages: int, vpp: int) -> np.ndarray:
    """Every list of the family as rows (lists x p*v virtual stages, Megatron's order)."""
    L, total = num_layers, num_stages * vpp
    rows = []
    for q in range(1, L // max(total - 2, 1) + 1):
        rest = L - (total - 2) * q
        first = np.arange(rest + 1)
        block = np.full((len(first), total), q, dtype=np.int64)
        block[:, 0] = first
        block[:, -1] = rest - first
        rows.append(block)
    return np.concatenate(rows) if rows else np.zeros((0, total), dtype=np.int64)


def in_family(chunks: tuple[int, ...]) -> bool:
    """Whether a per-virtual-stage list belongs to the family (middle virtual stages equal, >= 1)."""
    middle = set(chunks[1:-1])
    return len(middle) == 1 and min(middle) >= 1


def _plan(c: SplitCoefficients, n: np.ndarray, r: int | np.ndarray):
    """(recomputed, checkpoints, working-set layers) of every chunk (recompute.chunk_plan)."""
    zero = np.zeros_like(n)
    if c.method is None or not np.any(np.asarray(r) > 0):
        return zero, zero, zero
    if c.method == "uniform":
        return n, np.where(n > 0, -(-n // r), 0), np.minimum(r, n)
    return np.minimum(r, n), zero, (n > 0).astype(np.int64)


def virtual_tables(c: SplitCoefficients, rows: np.ndarray, r: int | np.ndarray):
    """(t_s, tail_s, memory_s x v) of every rank of every row at recompute count r (an int, or
    a column of one count per row): the integers of stage_costs(layers, r, chunks) (module
    docstring)."""
    p, v = c.num_stages, c.vpp
    ends = np.cumsum(rows, axis=1)
    starts = ends - rows
    recomputed, checkpoints, work = _plan(c, rows, r)
    cut = starts + recomputed
    prefix = c.memo.prefix_arrays
    if prefix is None:
        names = (
            "layer_time_ns",
            "layer_recompute_ns",
            "layer_tail_ns",
            "layer_static_bytes",
            "layer_act_bytes",
            "layer_input_bytes",
        )
        prefix = {
            name: np.concatenate([[0], np.cumsum(getattr(c, name).astype(np.int64))])
            for name in names
        }
        c.memo.prefix_arrays = prefix

    def span(name: str, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return prefix[name][hi] - prefix[name][lo]

    def per_rank(chunk: np.ndarray) -> np.ndarray:  # chunk j of rank s at column j * p + s
        return chunk.reshape(len(rows), v, p).sum(axis=1)

    time = per_rank(span("layer_time_ns", starts, ends) + span("layer_recompute_ns", starts, cut))
    kept = span("layer_act_bytes", starts, ends) - span("layer_act_bytes", starts, cut)
    saved = (
        checkpoints * c.checkpoint_bytes
        if c.method == "uniform"
        else span("layer_input_bytes", starts, cut)
    )
    memory = (
        v * (per_rank(span("layer_static_bytes", starts, ends)) + c.stage_static_bytes)
        + c.stage_inflight_x_v.astype(np.int64) * (per_rank(kept + saved) + c.stage_act_bytes)
        + v * work.reshape(len(rows), v, p).max(axis=1) * c.work_bytes
    )
    tail = per_rank(span("layer_tail_ns", starts, ends)) + c.stage_tail_ns
    return time + c.stage_time_ns, tail, memory


BIG = np.iinfo(np.int64).max


def _objective(
    c: SplitCoefficients, rows: np.ndarray, r: int | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(v*T, fits in memory) of every row at recompute count r (an int or one per row)."""
    time, tail, memory = virtual_tables(c, rows, r)
    value = pipeline_x_v(c, time.sum(axis=1), time.max(axis=1), tail.max(axis=1))
    return value, (memory <= c.vpp * c.memory_limit_bytes).all(axis=1)


def _lowest_r(c: SplitCoefficients) -> int:
    return 1 if c.outer.recompute == "full" else 0


def virtual_lower_bound(c: SplitCoefficients) -> int:
    """A lower bound on v*T over the family: every row at the smallest recompute count, memory
    ignored (the time grows with r: block recomputes min(r, n) layers, uniform all of them)."""
    rows = virtual_rows(c.num_layers, c.num_stages, c.vpp)
    return int(_objective(c, rows, _lowest_r(c))[0].min()) if len(rows) else BIG


def virtual_feasible(c: SplitCoefficients) -> bool:
    """Some row fits with some recompute count (exact): with block (or none) at each row's most
    recompute, where memory is smallest (as bounds.py's feasibility); uniform by the search."""
    rows = virtual_rows(c.num_layers, c.num_stages, c.vpp)
    if len(rows) == 0:
        return False
    if c.method == "uniform":
        return best_virtual_split(c) is not None
    most = rows.max(axis=1)[:, None] if c.outer.recompute == "full" else 0
    return bool(_objective(c, rows, most)[1].any())


def _first_fits(c: SplitCoefficients, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(v*T, r) of each row at its smallest fitting recompute count (BIG where none fits): the
    best of the row, since the time grows with r. A count above a row's largest chunk repeats
    its largest (and `uniform` refuses it), so the scan stops there."""
    largest = rows.max(axis=1)
    best = np.full(len(rows), BIG, dtype=np.int64)
    best_r = np.zeros(len(rows), dtype=np.int64)
    open_rows = np.ones(len(rows), dtype=bool)
    counts = range(1, int(largest.max()) + 1) if c.outer.recompute == "full" else range(0, 1)
    for r in counts:
        value, fits = _objective(c, rows, r)
        fits &= open_rows & (r <= largest)
        best, best_r = np.where(fits, value, best), np.where(fits, r, best_r)
        open_rows &= ~fits
        if not open_rows.any():
            break
    return best, best_r


def best_virtual_split(c: SplitCoefficients, batch: int = 16) -> Split | None:
    """The best row with its smallest fitting recompute count, None if none fits. Rows are
    visited in the order of their lower bound (virtual_lower_bound's, per row), `batch` at a
    time, and the visit stops at the first batch whose least bound is no better than the best."""
    rows = virtual_rows(c.num_layers, c.num_stages, c.vpp)
    if len(rows) == 0:
        return None
    bounds = _objective(c, rows, _lowest_r(c))[0]
    order = np.argsort(bounds, kind="stable")
    found = (BIG, 0, 0)  # (v*T, r, row)
    for first in range(0, len(order), batch):
        chosen = order[first : first + batch]
        if bounds[chosen[0]] >= found[0]:
            break
        values, counts = _first_fits(c, rows[chosen])
        j = int(values.argmin())
        if values[j] < found[0]:
            found = (int(values[j]), int(counts[j]), int(chosen[j]))
    if found[0] == BIG:
        return None
    chunks = tuple(int(n) for n in rows[found[2]])
    layers = tuple(sum(chunks[s :: c.num_stages]) for s in range(c.num_stages))
    even = len(set(chunks)) == 1
    return Split(layers, found[1], found[0], None if even else chunks)
