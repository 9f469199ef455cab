"""Exact split when the framework restricts the per-stage layer counts (rules.LAYER_FORMS).

Megatron-LM writes an uneven split only as `--decoder-first-pipeline-num-layers` /
`--decoder-last-pipeline-num-layers`, giving the middle stages the rest evenly (first_last); older
versions only split evenly (even). The free split of layer_split.py / mixed_split.py may return
lists these frameworks cannot say, so for a restricted form the split is chosen among the form's
own lists: every (n_first, q, n_last) with n_first + (p - 2) q + n_last = L (at most L^2 / (p - 2)
lists), each scored with the integers of coefficients.stage_costs: a uniform stack's from its
per-count tables, per recompute count r visited in increasing order of its lower bound
(`best_form_split`); a mixed stack's as rows priced from prefix sums, each list at its smallest
fitting r (row_split.py, stacks.MixedStack.form_split). The CP-SAT and MILP models add the same form as equalities
(`form_equalities`), so every solver returns the same optimum.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from tinker_opt.choices import Recompute
from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.costs.pipeline import pipeline_x_v


def restricted(c: SplitCoefficients) -> bool:
    """Whether the form excludes some split of this configuration (vpp > 1 is even anyway)."""
    if c.vpp > 1:
        return False
    return (c.layer_form == "first_last" and c.num_stages >= 3) or (
        c.layer_form == "even" and c.num_stages >= 2
    )


def form_equalities(c: SplitCoefficients) -> list[tuple[int, int]]:
    """Pairs (s, t) of stages whose layer counts must be equal under the form."""
    if not restricted(c):
        return []
    p = c.num_stages
    if c.layer_form == "even":
        return [(0, s) for s in range(1, p)]
    return [(1, s) for s in range(2, p - 1)]


@functools.lru_cache(maxsize=256)
def form_splits(num_layers: int, num_stages: int, form: str) -> np.ndarray:
    """Every split of the form as rows (lists x stages), each stage >= 1 layer; one read-only
    array per shape, shared by every configuration of that shape."""
    out = _form_splits(num_layers, num_stages, form)
    out.setflags(write=False)
    return out


def _form_splits(num_layers: int, num_stages: int, form: str) -> np.ndarray:
    L, p = num_layers, num_stages
    if form == "even":
        return (
            np.full((1, p), L // p, dtype=np.int64)
            if L % p == 0
            else np.zeros((0, p), dtype=np.int64)
        )
    if form != "first_last" or p < 3:
        raise ValueError(
            f"form_splits lists the restricted forms only (first_last needs p >= 3), got {form}, p={p}"
        )
    rows = []
    for q in range(1, (L - 2) // (p - 2) + 1):
        rest = L - q * (p - 2)
        first = np.arange(1, rest)
        block = np.empty((len(first), p), dtype=np.int64)
        block[:, 0] = first
        block[:, 1:-1] = q
        block[:, -1] = rest - first
        rows.append(block)
    return np.concatenate(rows) if rows else np.zeros((0, p), dtype=np.int64)


def feasible_under_caps(caps: np.ndarray, num_layers: int, form: str) -> bool:
    """Some split of the form has every stage within its layer cap (`caps` (p,), or (r, p): within
    the caps of some row). Closed forms of form_splits' rows: `even` needs L / p layers under
    every cap; `first_last` (q layers in each middle stage, the rest shared by the first and the
    last) fits iff some q within the middle caps leaves a rest of at most the two end caps, and
    the largest such q leaves the least rest."""
    caps = np.atleast_2d(caps)
    L, p = num_layers, caps.shape[-1]
    if form == "even":
        return L % p == 0 and bool((caps.min(axis=-1) >= L // p).any())
    if form != "first_last" or p < 3:
        raise ValueError(f"a restricted form has its closed form here, got {form}, p={p}")
    q = np.minimum(caps[:, 1:-1].min(axis=-1), (L - 2) // (p - 2))
    rest = L - q * (p - 2)
    ends = (caps[:, 0] >= 1) & (caps[:, -1] >= 1)
    return bool((ends & (q >= 1) & (rest <= caps[:, 0] + caps[:, -1])).any())


FormTables = Callable[[list[int], np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
"""(recompute counts, rows of layer counts) -> (t_s, tail_s, fits) of every stage of every row
for each count, (counts, rows, p) each."""
BIG = np.iinfo(np.int64).max // 4


def best_form_split(
    c: SplitCoefficients, r_bounds: dict[int, int], tables: FormTables, batch: int = 1
):
    """(v*T, layers, r) of the best split of the form, None if none fits; `r_bounds` maps each
    candidate recompute count to a valid lower bound of v*T with it (visited in that order, up to
    `batch` counts priced together); `tables` prices the rows (a uniform stack's per-count
    tables, stacks.UniformStack.form_tables)."""
    rows = form_splits(c.num_layers, c.num_stages, c.layer_form)
    if len(rows) == 0:
        return None
    order = sorted(r_bounds, key=lambda value: (r_bounds[value], value))
    best = None
    for first in range(0, len(order), batch):
        chunk = order[first : first + batch]
        if best is not None and r_bounds[chunk[0]] >= best[0]:
            break
        times, tails, fits = tables(chunk, rows)
        objective = pipeline_x_v(c, times.sum(axis=2), times.max(axis=2), tails.max(axis=2))
        objective = np.where(fits.all(axis=2), objective, BIG)
        index = objective.argmin(axis=1)
        for j, r in enumerate(chunk):  # the visiting order, as one count at a time
            if best is not None and r_bounds[r] >= best[0]:
                break
            value = int(objective[j, index[j]])
            if value < BIG and (best is None or value < best[0]):
                layers = tuple(int(n) for n in rows[index[j]])
                best = (
                    value,
                    layers,
                    min(r, max(layers)) if c.outer.recompute == Recompute.FULL else 0,
                )
    return best
