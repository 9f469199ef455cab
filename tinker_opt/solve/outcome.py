"""What the whole-space models (cpsat.py, milp.py) share: the outcome they report, the common
time scale of configurations with different vpp, per-stage layer caps and an objective horizon."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve.bounds import loosest_caps
from tinker_opt.solve.layer_split import Scalars, Split


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


def upper_caps(c: SplitCoefficients, k: Scalars) -> np.ndarray:
    return np.minimum(loosest_caps(c, k), c.num_layers - c.num_stages + 1)


def objective_horizon(coeffs: Sequence[SplitCoefficients], scale: int) -> int:
    """An upper bound on the scaled objective: every stage at its largest layer count."""
    worst = 0
    for c in coeffs:
        if c.homogeneous:
            k = Scalars.of(c)
            caps = upper_caps(c, k)
            t_max = int((k.a + k.f) * caps.max() + c.stage_time_ns.max())
            tail_max = int(k.alpha * caps.max() + c.stage_tail_ns.max())
        else:  # a stage holds at most every layer
            t_max = int(c.layer_time_ns.sum() + c.layer_recompute_ns.sum() + c.stage_time_ns.max())
            tail_max = int(c.layer_tail_ns.sum() + c.stage_tail_ns.max())
        p, m, v = c.num_stages, c.num_microbatches, c.vpp
        worst = max(worst, scale // v * (p * v * t_max + (m * v - 1) * t_max + v * tail_max))
    return worst
