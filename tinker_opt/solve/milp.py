"""The MILP model (PuLP + HiGHS, CBC fallback) over the whole space: the CP-SAT model of cpsat.py
(see its docstring for the formulation) with min(r, n_s) linearised by a binary and mixed stacks'
boundaries as one-hot positions. Each kind of stack has its own rows (milp_rows.stack_rows); this
module holds the recompute choice every configuration shares, the solver and its status.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence

from tinker_opt.choices import Recompute
from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve import milp_rows
from tinker_opt.solve.outcome import SolverOutcome, common_scale
from tinker_opt.solve.stacks import Stack, stack_of

US_PER_NS = 1e-3
"""The MILP objective is in microseconds to keep coefficients moderate; solutions are re-scored
with the exact integers."""


@contextlib.contextmanager
def _quiet_stdout():
    """Silence the C-level stdout (solver banners) so `--json` output stays clean."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _pulp_solver(time_limit_s: float, threads: int):
    """HiGHS through its Python API, else CBC through COIN_CMD (the bundled binary).

    HiGHS gets no thread count: its global scheduler keeps the first count it starts with and a
    later different count makes `run` fail (status kNotset), and its MIP search is serial anyway.
    """
    import pulp

    highs = pulp.HiGHS(msg=False, timeLimit=float(time_limit_s), gapRel=1e-9, gapAbs=0.0)
    if highs.available():
        return highs
    from pulp.apis.coin_api import pulp_cbc_path

    return pulp.COIN_CMD(
        msg=False,
        timeLimit=float(time_limit_s),
        threads=max(1, int(threads)),
        gapRel=1e-9,
        gapAbs=0.0,
        path=pulp_cbc_path,
    )


def solve_milp(
    coeffs: Sequence[SplitCoefficients], *, time_limit_s: float, workers: int
) -> SolverOutcome:
    """Minimise the iteration time over `coeffs` with a MILP (linearised min and max)."""
    import pulp

    start = time.perf_counter()
    scale = common_scale(coeffs)
    problem = pulp.LpProblem("tinker_opt_strategy", pulp.LpMinimize)
    terms, choices, decode, bounds = [], [], [], []
    for i, c in enumerate(coeffs):
        x = problem.add_variable(f"x{i}", 0, 1, pulp.LpBinary)  # x_i: configuration i is chosen
        choices.append(x)
        term, dec, bound = _milp_configuration(problem, pulp, c, x, i)
        terms.append((scale // c.vpp) * term)
        bounds.append((scale // c.vpp) * bound)
        decode.append(dec)
    problem.addConstraint(pulp.lpSum(choices) == 1, "one_configuration")
    # The chosen configuration's (and recompute count's) valid bound, as in the CP-SAT model.
    problem.addConstraint(pulp.lpSum(terms) >= pulp.lpSum(bounds), "valid_bound")
    problem.setObjective(pulp.lpSum(terms) * US_PER_NS)
    solver = _pulp_solver(time_limit_s, workers)
    with _quiet_stdout():  # highspy prints a banner on creation, before output_flag applies
        problem.solve(solver)
    elapsed = time.perf_counter() - start
    status, bound_ns = _milp_status(problem, pulp, solver, scale)
    if status in ("infeasible", "unknown"):
        return SolverOutcome(status, None, None, None, bound_ns, elapsed)
    index = max(range(len(choices)), key=lambda j: choices[j].varValue or 0.0)
    split = decode[index]()
    return SolverOutcome(status, index, split, split.time_ns_x_v, bound_ns, elapsed)


def _milp_status(problem, pulp, solver, scale: int) -> tuple[str, float]:
    """(status, lower bound on T in ns) from HiGHS's model status, or PuLP's for CBC."""
    if isinstance(solver, pulp.HiGHS):
        import highspy

        highs = problem.solverModel
        status = highs.getModelStatus()
        info = highs.getInfo()
        has_solution = info.primal_solution_status == 2
        bound_ns = info.mip_dual_bound / US_PER_NS / scale
        if status == highspy.HighsModelStatus.kOptimal:
            return "optimal", min(bound_ns, info.objective_function_value / US_PER_NS / scale)
        if status == highspy.HighsModelStatus.kInfeasible:
            return "infeasible", float("inf")
        if status in (
            highspy.HighsModelStatus.kNotset,
            highspy.HighsModelStatus.kSolveError,
            highspy.HighsModelStatus.kModelError,
            highspy.HighsModelStatus.kLoadError,
        ):
            raise RuntimeError(f"internal error: HiGHS did not run ({status})")
        return ("feasible" if has_solution else "unknown"), bound_ns
    if problem.status == pulp.LpStatusOptimal and problem.sol_status == pulp.LpSolutionOptimal:
        return "optimal", pulp.value(problem.objective) / US_PER_NS / scale
    if problem.status == pulp.LpStatusInfeasible:
        return "infeasible", float("inf")
    return ("feasible" if problem.sol_status == pulp.LpSolutionIntegerFeasible else "unknown"), 0.0


def _milp_configuration(problem, pulp, c: SplitCoefficients, x, i: int):
    """Configuration i's variables and rows; everything is zero when x_i = 0. Returns
    (v * T expression, decoder, valid lower-bound expression)."""
    stack = stack_of(c)
    if c.vpp > 1:
        split = stack.even_split()
        assert split is not None  # the presolve keeps only configurations that fit
        return split.time_ns_x_v * x, lambda: split, 0
    r, bound, r_choice = _milp_recompute(problem, pulp, stack, x, i)
    return (*milp_rows.stack_rows(stack, problem, pulp, x, i, r, r_choice), bound)


def _milp_recompute(problem, pulp, stack: Stack, x, i: int):
    """(r, bound term, {r: y_r}): r = sum_r r y_r over value binaries y_r (sum = x_i), each linked
    to its valid bound (Stack.recompute_bounds) in bound = sum_r bound(r) y_r; without full
    recompute r is None and bound = lower_bound(i) x_i."""
    if stack.c.outer.recompute != Recompute.FULL:
        return None, stack.lower_bound_x_v() * x, {}
    bounds = stack.recompute_bounds()
    y = {value: problem.add_variable(f"y{i}_{value}", 0, 1, pulp.LpBinary) for value in bounds}
    problem.addConstraint(pulp.lpSum(y.values()) == x, f"r_one{i}")
    r = problem.add_variable(f"r{i}", 0, max(bounds), pulp.LpInteger)
    problem.addConstraint(r == pulp.lpSum(value * y[value] for value in bounds), f"r_value{i}")
    return r, pulp.lpSum(bound * y[value] for value, bound in bounds.items()), y
