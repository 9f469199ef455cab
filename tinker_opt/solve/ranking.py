"""The presolved space of one search, kept after the solve: the ranking, deeper rankings and the
picks all come from it, never from a second full search (issue 20: one pass).

`Ranking` holds every presolved outer configuration with its cheap valid lower bound on the
iteration time (the visiting order), the tight bound computed when needed, and every exact split
computed so far. `walk(k)` returns the exact k fastest strategies: configurations are split in
increasing bound order until the next bound reaches the k-th best time found, so a configuration
never split cannot enter the top k (its bound, a lower bound on its time, is at least that time).
The same walk answers a narrowed rule (only the outers a filter admits: no pipeline, the
checkpoint's layout) and a lower memory limit (the headroom pick): a lower limit admits fewer
splits, so the bounds under the full limit stay valid lower bounds, and only the configurations
the walk visits are split again under the lower limit.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from tinker_opt.solve.bounds import lower_bound_x_v
from tinker_opt.solve.enumerate import Candidate, presolve
from tinker_opt.solve.stacks import best_split
from tinker_opt.strategy import Strategy

if TYPE_CHECKING:
    from tinker_opt.costs.evaluate import Evaluation


def candidate(cost_model, outer: Strategy) -> Candidate | None:
    """The exact best split of one configuration under `cost_model`, None when nothing fits."""
    coeffs = cost_model.coefficients(outer)
    split = best_split(coeffs)
    return None if split is None else Candidate(outer, split, coeffs.vpp)


def ordered(cands: Iterable[Candidate]) -> list[Candidate]:
    """Fastest first, ties by label (the order of every ranked list)."""
    return sorted(cands, key=lambda cand: (cand.time_ns, cand.outer.label()))


class Ranking:
    """Presolved configurations, their bounds and the exact splits found (module docstring)."""

    def __init__(self, cost_model, cheap: dict[Strategy, float], outers: Sequence[Strategy], space):
        self.cost_model = cost_model
        self.space = space
        """The SearchSpace the outers come from."""
        self.outers = list(outers)
        """Its valid outer configurations, in the space's order."""
        self.cheap = dict(cheap)
        """{feasible outer: cheap lower bound on T in ns}."""
        self.presolved = set(outers)
        """Every outer whose feasibility is known (feasible ones are the keys of `cheap`)."""
        self.order = sorted(self.cheap, key=lambda o: (self.cheap[o], o.label()))
        self._tight: dict[Strategy, float] = {}
        self.splits: dict[Strategy, Candidate] = {}
        """The best exact split of each configuration split so far (this cost model)."""
        self.evaluations: dict[Candidate, Evaluation] = {}
        """The Evaluation of each candidate evaluated so far (search._evaluate)."""

    def tight(self, outer: Strategy) -> float:
        """The tight (water-filling) lower bound on T in ns, computed on first use."""
        if outer not in self._tight:
            coeffs = self.cost_model.coefficients(outer)
            self._tight[outer] = lower_bound_x_v(coeffs) / coeffs.vpp
        return self._tight[outer]

    def keep(self, cand: Candidate) -> None:
        """Record an exact split (a solver's or a walk's), the faster one per configuration."""
        known = self.splits.get(cand.outer)
        if known is None or cand.time_ns < known.time_ns:
            self.splits[cand.outer] = cand

    def split(self, outer: Strategy) -> Candidate:
        """The exact best split of a feasible configuration, computed once."""
        if outer not in self.splits:
            found = candidate(self.cost_model, outer)
            assert found is not None, outer.label()  # presolve found it feasible
            self.splits[outer] = found
        return self.splits[outer]

    def include(self, outers: Iterable[Strategy], cpus: int = 1) -> None:
        """Presolve the configurations not seen yet (a narrowed space may hold some)."""
        fresh = [o for o in outers if o not in self.presolved]
        if not fresh:
            return
        self.presolved.update(fresh)
        self.cheap.update(presolve(self.cost_model, fresh, cpus=cpus))
        self.order = sorted(self.cheap, key=lambda o: (self.cheap[o], o.label()))

    def walk(
        self,
        k: int,
        admits: Callable[[Strategy], bool] | None = None,
        limited=None,
    ) -> list[Candidate]:
        """The exact k fastest strategies among the configurations `admits` lets through (all:
        None), under `limited` (the same cost model with a lower memory limit; None: this one)."""
        found: dict[Strategy, Candidate] = {}
        if limited is None:
            found = {o: c for o, c in self.splits.items() if admits is None or admits(o)}
        kth = [-c.time_ns for c in ordered(found.values())[:k]]  # max-heap of the k best
        heapq.heapify(kth)
        for outer in self.order:
            if admits is not None and not admits(outer):
                continue
            full = len(kth) >= k
            if full and self.cheap[outer] >= -kth[0]:
                break
            if outer in found or (full and self.tight(outer) >= -kth[0]):
                continue
            cand = self.split(outer) if limited is None else candidate(limited, outer)
            if cand is None:  # nothing fits under the lower limit
                continue
            found[outer] = cand
            heapq.heappush(kth, -cand.time_ns)
            if len(kth) > k:
                heapq.heappop(kth)
        return ordered(found.values())
