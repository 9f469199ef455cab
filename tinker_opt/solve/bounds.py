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
The functions here are the entry points; each stack computes its own (stacks.py: the uniform
stack by water-filling, layer_bounds.py; the mixed stack by range tables, mixed_split.py).
"""

from __future__ import annotations

from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve.stacks import feasible_many, stack_of


def is_feasible(c: SplitCoefficients) -> bool:
    """Some split and recompute count of this configuration fits in memory (exact)."""
    return stack_of(c).is_feasible()


def all_feasible(cs: list[SplitCoefficients]) -> list[bool]:
    """is_feasible of each configuration, the ones that can be decided together batched."""
    return feasible_many(cs)


def lower_bound_x_v(c: SplitCoefficients, *, tight: bool = True) -> int:
    """A lower bound on v*T over all splits of a feasible configuration (exact with vpp > 1)."""
    return stack_of(c).lower_bound_x_v(tight=tight)


def recompute_bounds(c: SplitCoefficients) -> dict[int, int]:
    """{r: a lower bound on v*T over the splits with recompute count r} for every r whose memory
    caps admit a split (v = 1; module docstring). Kept in the coefficients' memo."""
    return stack_of(c).recompute_bounds()
