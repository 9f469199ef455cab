"""What the whole-space models (cpsat.py, milp.py) share: the outcome they report, the common
time scale of configurations with different vpp and an objective horizon."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve.layer_split import Split
from tinker_opt.solve.stacks import stack_of


@dataclass(frozen=True)
class SolverOutcome:
    """What a solver reports: status, the chosen configuration and split, objective and bound."""

    status: str
    """optimal | feasible | infeasible | unknown (time limit before any solution)."""
    index: int | None
    split: Split | None
    objective_x_v: int | None
    """v * T (ns) of the chosen configuration, from the solution's integers."""
    bound_ns: float
    """Lower bound on T (ns) over the model's candidates."""
    solve_time_s: float


def common_scale(coeffs: Sequence[SplitCoefficients]) -> int:
    return math.lcm(*[c.vpp for c in coeffs]) if coeffs else 1


def objective_horizon(coeffs: Sequence[SplitCoefficients], scale: int) -> int:
    """An upper bound on the scaled objective: every stage at its largest time and tail."""
    worst = 0
    for c in coeffs:
        worst = max(worst, scale // c.vpp * stack_of(c).horizon_x_v())
    return worst
