"""Uniform and mixed layer stacks behind one interface, chosen in one place (`stack_of`).

A uniform stack (one layer kind: every layer costs the same) is solved with scalar coefficients
(layer_split.py's water-filling, layer_bounds.py); a mixed stack (dense and MoE layers at fixed
positions) with range tables over the layer positions (mixed_split.py). The split search, the
bounds, feasibility and the least-memory split are methods of `Stack`, so the callers never ask
which kind of stack they hold; the solver rows (cpsat_rows.py, milp_rows.py) choose by the kind in
one function each (`stack_rows`), so those modules import this one and not the other way round. What does not depend
on the kind (the framework's layer form, the virtual pipeline's constant, the memo of the
recompute bounds) is written once in the base class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from tinker_opt.choices import Recompute, RecomputeMethod, Schedule
from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.costs.pipeline import pipeline_bound_x_v, pipeline_x_v
from tinker_opt.solve.form_split import (
    best_form_split,
    feasible_under_caps,
    form_splits,
    restricted,
)
from tinker_opt.solve.layer_bounds import (
    bound_terms,
    bounds_by_r,
    caps_by_r,
    count_tables,
    least_peak_split,
    loosest_caps,
    packs,
    upper_caps,
)
from tinker_opt.solve.layer_split import (
    INF,
    Scalars,
    Split,
    best_free_split,
    first_even,
    lower_bounds_for_r,
    recompute_range,
)
from tinker_opt.solve.mixed_fits import fits_many
from tinker_opt.solve.mixed_split import (
    best_for_r,
    cheap_bound,
    even_for_r,
    mixed_recompute_bounds,
)
from tinker_opt.solve.mixed_split import (
    least_peak_split as mixed_least_peak_split,
)
from tinker_opt.solve.row_split import best_row_split, rows_feasible
from tinker_opt.solve.virtual_split import (
    best_virtual_split,
    virtual_feasible,
    virtual_lower_bound,
)


def stack_of(c: SplitCoefficients) -> Stack:
    """The stack of a configuration: uniform when every layer costs the same, else mixed (kept
    in the coefficients' memo)."""
    if c.memo.stack is None:
        c.memo.stack = UniformStack(c) if c.homogeneous else MixedStack(c)
    return c.memo.stack


def feasible_many(cs: list[SplitCoefficients]) -> list[bool]:
    """is_feasible of each configuration; the mixed stacks without a virtual pipeline or a
    layer form decided together (mixed_fits.fits_many batches their relaxations)."""
    stacks = [stack_of(c) for c in cs]
    together = [
        i
        for i, stack in enumerate(stacks)
        if isinstance(stack, MixedStack) and stack.c.vpp == 1 and not restricted(stack.c)
    ]
    out = dict(zip(together, fits_many([cs[i] for i in together]), strict=True))
    return [out[i] if i in out else stack.is_feasible() for i, stack in enumerate(stacks)]


def best_split(c: SplitCoefficients) -> Split | None:
    """The exact optimal split of an outer configuration, None if nothing fits."""
    return stack_of(c).best_split()


class Stack(ABC):
    """One outer configuration's layer stack: its exact split, bounds and solver rows."""

    def __init__(self, c: SplitCoefficients):
        self.c = c

    def best_split(self) -> Split | None:
        """The exact optimal split, None if nothing fits; when the framework can write only some
        splits the search runs over those (form_split.py), r visited by its lower bound."""
        return self.form_split() if restricted(self.c) else self.free_split()

    def is_feasible(self) -> bool:
        """Some split and recompute count fits in memory (exact)."""
        if self.uneven_virtual():
            return virtual_feasible(self.c)
        return self.even_split() is not None if self.c.vpp > 1 else self.fits()

    def uneven_virtual(self) -> bool:
        """The split is chosen among virtual_split.py's uneven per-virtual-stage lists: where
        they are allowed and pp x vpp does not divide the layers (otherwise the even split)."""
        c = self.c
        return (
            c.vpp > 1
            and c.uneven_vpp
            and c.schedule != Schedule.DUALPIPEV
            and c.num_layers % (c.num_stages * c.vpp) != 0
        )

    def lower_bound_x_v(self, *, tight: bool = True) -> int:
        """A lower bound on v*T over all splits of a feasible configuration (exact with vpp > 1
        and for a mixed stack under a layer form, except `tight=False`: the cheap bounds)."""
        if self.uneven_virtual() and not tight:
            return virtual_lower_bound(self.c)
        if self.c.vpp > 1:
            found = self.even_split()
            return found.time_ns_x_v if found is not None else np.iinfo(np.int64).max
        return self.v1_lower_bound(tight=tight)

    def recompute_bounds(self) -> dict[int, int]:
        """{r: a lower bound on v*T over the splits with recompute count r} for every r whose
        memory caps admit a split (v = 1). Kept in the coefficients' memo."""
        if self.c.memo.recompute_bounds is None:
            self.c.memo.recompute_bounds = self.compute_recompute_bounds()
        return self.c.memo.recompute_bounds

    def even_split(self) -> Split | None:
        """Virtual pipeline: the even split with the smallest recompute count that fits, or with
        uneven virtual stages allowed the best of virtual_split.py's lists; None when nothing
        fits (kept in the coefficients' memo: feasibility, the bound and the solver rows ask
        for it)."""
        if self.c.memo.even_split is None:
            c = self.c
            if self.uneven_virtual():
                found = best_virtual_split(c)
            else:
                found = None if c.num_layers % (c.num_stages * c.vpp) else self.compute_even_split()
            self.c.memo.even_split = (found,)
        return self.c.memo.even_split[0]

    def horizon_x_v(self) -> int:
        """An upper bound on v*T: every stage at its largest time and tail."""
        t_max, tail_max = self.stage_maxima()
        return pipeline_x_v(self.c, self.c.num_stages * self.c.vpp * t_max, t_max, tail_max)

    @abstractmethod
    def free_split(self) -> Split | None:
        """best_split among every split (no layer form)."""

    @abstractmethod
    def compute_even_split(self) -> Split | None:
        """even_split, uncached."""

    @abstractmethod
    def form_split(self) -> Split | None:
        """best_split among the splits of the framework's layer form (form_split.py; v = 1)."""

    @abstractmethod
    def fits(self) -> bool:
        """is_feasible with v = 1."""

    @abstractmethod
    def v1_lower_bound(self, *, tight: bool) -> int:
        """lower_bound_x_v with v = 1; `tight=False` skips the per-r split searches."""

    @abstractmethod
    def compute_recompute_bounds(self) -> dict[int, int]:
        """recompute_bounds, uncached."""

    @abstractmethod
    def least_peak(self, r: int) -> tuple[tuple[int, ...], int]:
        """(layers, peak bytes x v) of the v = 1 split with the least peak memory at r (the
        recompute count of block's formulas; infeasible.least_memory_split)."""

    @abstractmethod
    def stage_maxima(self) -> tuple[int, int]:
        """(largest t_s, largest tail_s) any stage can have."""


class UniformStack(Stack):
    """Every layer costs the same: scalar coefficients (layer_split.Scalars), water-filling."""

    FORM_BATCH = 64
    """Recompute counts the layer-form search prices together (form_split.best_form_split)."""

    def __init__(self, c: SplitCoefficients):
        super().__init__(c)
        self.k = Scalars.of(c)

    def free_split(self) -> Split | None:
        # a virtual pipeline's split is the even one, at the smallest r that fits (time grows with r)
        return self.even_split() if self.c.vpp > 1 else best_free_split(self.c, self.k)

    def compute_even_split(self) -> Split | None:
        return first_even(self.c, self.k)

    def form_split(self) -> Split | None:
        """The form's rows per recompute count r, visited by r's lower bound, FORM_BATCH counts
        priced together from the per-count tables (form_tables)."""
        c = self.c
        r_bounds = lower_bounds_for_r(c, self.k, recompute_range(c))
        found = best_form_split(c, r_bounds, self.form_tables, self.FORM_BATCH)
        return None if found is None else Split(found[1], found[2], found[0])

    def form_tables(self, rs: list[int], rows: np.ndarray):
        """Every layer costs the same, so a stage's costs depend on its count alone: per-count
        tables of the same integers (count_tables), read at the rows, every count at once."""
        time, tail, fits = count_tables(self.c, self.k, np.asarray(rs, dtype=np.int64))
        index = (slice(None), np.arange(self.c.num_stages)[None, :], rows)
        return time[index], tail[index], fits[index]

    def fits(self) -> bool:
        c, k = self.c, self.k
        if restricted(c):
            # uniform's memory is not monotone in r: some r's caps must admit a split of the form
            caps = (
                caps_by_r(c, k, np.array(recompute_range(c)))
                if c.method == RecomputeMethod.UNIFORM
                else loosest_caps(c, k)
            )
            return feasible_under_caps(caps, c.num_layers, c.layer_form)
        if (
            c.method == RecomputeMethod.UNIFORM
        ):  # no r uses the least memory everywhere: some r must fit
            return bool(packs(caps_by_r(c, k, np.array(recompute_range(c))), c.num_layers).any())
        caps = loosest_caps(c, k)
        return bool(caps.min() >= 1 and caps.sum() >= c.num_layers)

    def v1_lower_bound(self, *, tight: bool) -> int:
        sum_lb, max_lb, tail_lb = bound_terms(self.c, self.k, tight=tight)
        loose = int(pipeline_bound_x_v(self.c, sum_lb, max_lb, tail_lb))
        if not tight or self.c.outer.recompute != Recompute.FULL:
            return loose
        return max(loose, min(self.recompute_bounds().values()))

    def compute_recompute_bounds(self) -> dict[int, int]:
        return bounds_by_r(self.c, self.k, recompute_range(self.c))

    def least_peak(self, r: int) -> tuple[tuple[int, ...], int]:
        return least_peak_split(self.c, self.k, r)

    def stage_maxima(self) -> tuple[int, int]:
        c, k = self.c, self.k
        caps = upper_caps(c, k)
        t_max = int((k.a + k.f) * caps.max() + c.stage_time_ns.max())
        return t_max, int(k.alpha * caps.max() + c.stage_tail_ns.max())


class MixedStack(Stack):
    """Layers of different kinds at fixed positions: range tables over positions (mixed_split)."""

    def free_split(self) -> Split | None:
        """Even split with vpp > 1, else the exact split per r, cut off by the per-r bounds."""
        c = self.c
        if c.vpp > 1:
            return self.even_split()
        best: Split | None = None
        bounds = mixed_recompute_bounds(c, recompute_range(c))
        for r in sorted(bounds, key=lambda value: (bounds[value], value)):
            incumbent = best.time_ns_x_v if best else INF
            if bounds[r] >= incumbent:
                break
            found = best_for_r(c, r, incumbent)
            if found is not None:
                best = Split(found[1], min(r, max(found[1])), found[0])
        return best

    def compute_even_split(self) -> Split | None:
        """The smallest r that fits, since the time grows with r."""
        c = self.c
        for r in recompute_range(c):
            found = even_for_r(c, r)
            if found is not None:
                return Split((c.num_layers // c.num_stages,) * c.num_stages, r, found)
        return None

    def form_split(self) -> Split | None:
        """The form's lists as rows, each at its smallest fitting recompute count
        (row_split.py): a few hundred lists priced directly from prefix sums, where the range
        tables of every (stage, start, end) cost p (L+1)^2 per count. Kept in the coefficients'
        memo (the tight bound and the exact split ask for it)."""
        if self.c.memo.form_split is None:
            self.c.memo.form_split = (best_row_split(self.c, self._form_rows()),)
        return self.c.memo.form_split[0]

    def _form_rows(self) -> np.ndarray:
        c = self.c
        return form_splits(c.num_layers, c.num_stages, c.layer_form)

    def fits(self) -> bool:
        c = self.c
        if restricted(c):
            return rows_feasible(c, self._form_rows())
        return fits_many([c])[0]

    def v1_lower_bound(self, *, tight: bool) -> int:
        """The tight bound under a layer form is the form's exact optimum (a few hundred rows,
        cheaper than the per-r bounds over every split), as with vpp > 1."""
        if not tight:
            return cheap_bound(self.c)
        if restricted(self.c):
            found = self.form_split()
            return found.time_ns_x_v if found is not None else np.iinfo(np.int64).max
        return min(self.recompute_bounds().values())

    def compute_recompute_bounds(self) -> dict[int, int]:
        return mixed_recompute_bounds(self.c, recompute_range(self.c))

    def least_peak(self, r: int) -> tuple[tuple[int, ...], int]:
        # `uniform` with one layer per group: the least memory of its formulas (recompute.py)
        return mixed_least_peak_split(self.c, 1 if self.c.method == RecomputeMethod.UNIFORM else r)

    def stage_maxima(self) -> tuple[int, int]:
        c = self.c  # a stage holds at most every layer
        t_max = int(c.layer_time_ns.sum() + c.layer_recompute_ns.sum() + c.stage_time_ns.max())
        return t_max, int(c.layer_tail_ns.sum() + c.stage_tail_ns.max())
