"""The CP-SAT (OR-Tools) model over the whole space.

One model holds every candidate outer configuration at once: a one-hot choice x_i, and for each
configuration its per-stage layer counts n_is, recompute count r_i, per-stage recomputed layers
rs_is = min(r_i, n_is), the bottleneck M_i >= t_is and the largest tail Q_i >= tail_is, with each
stage's memory under the limit. All coefficients are the integers of SplitCoefficients (ns and
bytes), so the objective is exactly `CostModel.evaluate`'s v*T, brought to a common scale by the
factor V / v_i (V the lcm of the candidates' vpp). A configuration with a virtual pipeline has a
fixed split and its best recompute count is the smallest that fits (time grows with r), so it
enters as a constant. Solution hints come from the best known split (a greedy incumbent).

The recompute count is chosen through value literals y_ir (sum_r y_ir = x_i), and one global row
T >= sum_i,r bound_i(r) y_ir (+ bound_i x_i without full recompute) links every choice to its
valid bound (bounds.recompute_bounds): the memory usually forces r well above 1, which the
relaxation of min(r, n_s) alone does not see. Mixed dense / MoE stacks use stage boundaries over
the layer sequence instead of counts (prefix sums read by element constraints in CP-SAT, one-hot
positions in the MILP), see mixed_split.py. Each kind of stack has its own rows
cpsat_rows.stack_rows); this module holds what every configuration shares.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve import cpsat_rows
from tinker_opt.solve.layer_split import Split
from tinker_opt.solve.outcome import SolverOutcome, common_scale, objective_horizon
from tinker_opt.solve.stacks import stack_of


def solve_cpsat(
    coeffs: Sequence[SplitCoefficients],
    *,
    time_limit_s: float,
    workers: int,
    hint: tuple[int, Split] | None = None,
    upper_x_scale: int | None = None,
) -> SolverOutcome:
    """Minimise the iteration time over `coeffs` with CP-SAT."""
    from ortools.sat.python import cp_model

    start = time.perf_counter()
    scale = common_scale(coeffs)
    model = cp_model.CpModel()
    horizon = upper_x_scale if upper_x_scale is not None else objective_horizon(coeffs, scale)
    objective = model.new_int_var(0, horizon, "T")  # T: V * iteration time (ns)
    choices, decode, bound_terms_ = [], [], []
    for i, c in enumerate(coeffs):
        x = model.new_bool_var(f"x{i}")  # x_i: configuration i is chosen
        choices.append(x)
        dec, term = _cpsat_configuration(
            model, cp_model, c, x, objective, scale // c.vpp, i, upper_x_scale
        )
        decode.append(dec)
        bound_terms_.append(term)
    model.add_exactly_one(choices)
    # One linear row: T >= the chosen configuration's (and recompute count's) valid bound, so the
    # LP relaxation already bounds T by the least bound over every choice.
    model.add(objective >= sum(bound_terms_))
    model.minimize(objective)
    if hint is not None:
        _cpsat_hint(model, choices, decode, hint)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = max(1, int(workers))
    status = solver.solve(model)
    elapsed = time.perf_counter() - start
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(f"internal error: invalid CP-SAT model: {model.validate()}")
    names = {
        cp_model.OPTIMAL: "optimal",
        cp_model.FEASIBLE: "feasible",
        cp_model.INFEASIBLE: "infeasible",
    }
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return SolverOutcome(
            names.get(status, "unknown"),
            None,
            None,
            None,
            float("inf") if status == cp_model.INFEASIBLE else 0.0,
            elapsed,
        )
    index = next(i for i, x in enumerate(choices) if solver.boolean_value(x))
    split = decode[index](solver.value)
    return SolverOutcome(
        names[status], index, split, split.time_ns_x_v, solver.best_objective_bound / scale, elapsed
    )


def _cpsat_configuration(
    model, cp_model, c: SplitCoefficients, x, objective, factor: int, i: int, upper: int | None
):
    """Add configuration i's variables and constraints (enforced when x_i); return its decoder
    and its lower-bound term (a linear expression, equal to factor * bound when chosen)."""
    stack = stack_of(c)
    if c.vpp > 1:
        split = stack.even_split()
        assert split is not None  # the presolve keeps only configurations that fit
        return (lambda value: split), factor * split.time_ns_x_v * x
    return cpsat_rows.stack_rows(stack, model, cp_model, x, objective, factor, i, upper)


def _cpsat_hint(model, choices, decode, hint: tuple[int, Split]) -> None:
    index, split = hint
    for i, x in enumerate(choices):
        model.add_hint(x, i == index)
    hints = getattr(decode[index], "hint", None)
    for var, value in hints(split) if hints is not None else []:
        model.add_hint(var, int(value))
