"""The MILP model (PuLP + HiGHS, CBC fallback) over the whole space: the CP-SAT model of cpsat.py
(see its docstring for the formulation) with min(r, n_s) linearised by a binary and mixed stacks'
boundaries as one-hot positions.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Sequence

import numpy as np

from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve.bounds import bound_terms, lower_bound_x_v, min_recompute_even, recompute_bounds
from tinker_opt.solve.layer_split import Scalars, Split
from tinker_opt.solve.outcome import SolverOutcome, common_scale, upper_caps

MIB = float(2**20)
"""Memory rows are written in MiB (exact for integer bytes below 2**53): 1 byte of excess is
9.5e-7 MiB, above HiGHS's 1e-7 feasibility tolerance, so the MILP cannot round a violation away."""
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

    return pulp.COIN_CMD(msg=False, timeLimit=float(time_limit_s), threads=max(1, int(threads)),
                         gapRel=1e-9, gapAbs=0.0, path=pulp_cbc_path)


def solve_milp(coeffs: Sequence[SplitCoefficients], *, time_limit_s: float, workers: int) -> SolverOutcome:
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
        if status in (highspy.HighsModelStatus.kNotset, highspy.HighsModelStatus.kSolveError,
                      highspy.HighsModelStatus.kModelError, highspy.HighsModelStatus.kLoadError):
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
    if c.vpp > 1:
        split = min_recompute_even(c)
        return split.time_ns_x_v * x, lambda: split, 0
    r_var, bound = _milp_recompute(problem, pulp, c, x, i)
    if not c.homogeneous:
        return (*_milp_mixed_configuration(problem, pulp, c, x, i, r_var), bound)
    k = Scalars.of(c)
    L, p, m = c.num_layers, c.num_stages, c.num_microbatches
    caps = upper_caps(c, k)
    full = c.outer.recompute == "full"
    r_hi = max(recompute_bounds(c)) if full else 0  # the largest r value (big-M of min(r, n_s))
    add = problem.add_variable
    n = [add(f"n{i}_{s}", 0, int(caps[s]), pulp.LpInteger) for s in range(p)]  # layers of stage s
    r = r_var  # recompute count
    bottleneck = add(f"M{i}", 0, None)  # M_i >= t_is
    tail = add(f"Q{i}", 0, None)  # Q_i >= tail_is
    _, max_lb, tail_lb = bound_terms(c)  # valid bounds (bounds.py) tighten the relaxation
    problem.addConstraint(bottleneck >= max_lb * x, f"bottleneck_lb{i}")
    problem.addConstraint(tail >= tail_lb * x, f"tail_lb{i}")
    problem.addConstraint(pulp.lpSum(n) == L * x, f"layers{i}")
    times = []
    for s in range(p):
        problem.addConstraint(n[s] >= x, f"n_min{i}_{s}")
        problem.addConstraint(n[s] <= int(caps[s]) * x, f"n_max{i}_{s}")
        rs = _milp_min(problem, pulp, r, n[s], r_hi, int(caps[s]), f"{i}_{s}") if full else 0
        t = k.a * n[s] + k.f * rs + int(c.stage_time_ns[s]) * x
        times.append(t)
        problem.addConstraint(bottleneck >= t, f"bottleneck{i}_{s}")
        problem.addConstraint(tail >= k.alpha * n[s] + int(c.stage_tail_ns[s]) * x, f"tail{i}_{s}")
        kk = int(c.stage_inflight_x_v[s])
        fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s]) + (c.work_bytes if full else 0)
        memory = (k.w + kk * k.act) * n[s] + kk * (k.inp - k.act) * rs + fixed * x
        problem.addConstraint(memory * (1 / MIB) <= c.memory_limit_bytes / MIB, f"memory{i}_{s}")
    term = pulp.lpSum(times) + (m - 1) * bottleneck + tail

    def decode() -> Split:
        layers = tuple(int(round(v.varValue or 0)) for v in n)
        rr = min(int(round(r.varValue or 0)), max(layers)) if full else 0
        return Split(layers, rr, c.time_ns_x_v(layers, rr))
    return term, decode, bound


def _milp_recompute(problem, pulp, c: SplitCoefficients, x, i: int):
    """(r, bound term): r = sum_r r y_r over value binaries y_r (sum = x_i), each linked to its
    valid bound (bounds.recompute_bounds) in bound = sum_r bound(r) y_r; without full recompute
    r is None and bound = lower_bound(i) x_i."""
    if c.outer.recompute != "full":
        return None, lower_bound_x_v(c) * x
    bounds = recompute_bounds(c)
    y = {value: problem.add_variable(f"y{i}_{value}", 0, 1, pulp.LpBinary) for value in bounds}
    problem.addConstraint(pulp.lpSum(y.values()) == x, f"r_one{i}")
    r = problem.add_variable(f"r{i}", 0, max(bounds), pulp.LpInteger)
    problem.addConstraint(r == pulp.lpSum(value * y[value] for value in bounds), f"r_value{i}")
    return r, pulp.lpSum(bound * y[value] for value, bound in bounds.items())


def _milp_mixed_configuration(problem, pulp, c: SplitCoefficients, x, i: int, r):
    """A mixed stack (as the CP-SAT boundary model): each inner boundary b_j and each recompute end
    b_s + min(r, n_s) is a one-hot over layer positions, so prefix sums at them are linear."""
    L, p, m = c.num_layers, c.num_stages, c.num_microbatches
    full = c.outer.recompute == "full"
    r_hi = max(recompute_bounds(c)) if full else 0
    add = problem.add_variable
    prefix = {name: [0] + np.cumsum(getattr(c, name)).tolist() for name in (
        "layer_time_ns", "layer_recompute_ns", "layer_tail_ns", "layer_static_bytes", "layer_act_bytes",
        "layer_input_bytes")}

    def one_hot(tag, positions):  # {position: binary}, summing to x_i
        z = {q: add(f"{tag}_{q}", 0, 1, pulp.LpBinary) for q in positions}
        problem.addConstraint(pulp.lpSum(z.values()) == x, f"{tag}_one")
        return z
    bd = [{0: x}] + [one_hot(f"z{i}_{j}", range(j, L - p + j + 1)) for j in range(1, p)] + [{L: x}]
    pos = [pulp.lpSum(q * z for q, z in hot.items()) for hot in bd]  # b_j (0 when x_i = 0)
    at = lambda name, hot: pulp.lpSum(prefix[name][q] * z for q, z in hot.items())
    bottleneck, tail = add(f"M{i}", 0, None), add(f"Q{i}", 0, None)
    times = []
    for s in range(p):
        n_s = pos[s + 1] - pos[s]
        problem.addConstraint(n_s >= x, f"n_min{i}_{s}")
        cut = bd[s]
        if full:
            rs = _milp_min(problem, pulp, r, n_s, r_hi, L - p + 1, f"{i}_{s}")
            cut = one_hot(f"w{i}_{s}", range(0, L + 1))  # b_s + min(r, n_s)
            problem.addConstraint(pulp.lpSum(q * w for q, w in cut.items()) == pos[s] + rs, f"cut{i}_{s}")
        span = lambda name, lo, hi: at(name, hi) - at(name, lo)
        t = (span("layer_time_ns", bd[s], bd[s + 1]) + span("layer_recompute_ns", bd[s], cut)
             + int(c.stage_time_ns[s]) * x)
        times.append(t)
        problem.addConstraint(bottleneck >= t, f"bottleneck{i}_{s}")
        problem.addConstraint(tail >= span("layer_tail_ns", bd[s], bd[s + 1]) + int(c.stage_tail_ns[s]) * x,
                              f"tail{i}_{s}")
        kk = int(c.stage_inflight_x_v[s])
        fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s]) + (c.work_bytes if full else 0)
        # Recomputed layers keep their input only, the others their activations.
        memory = (span("layer_static_bytes", bd[s], bd[s + 1]) + kk * span("layer_act_bytes", cut, bd[s + 1])
                  + kk * span("layer_input_bytes", bd[s], cut) + fixed * x)
        problem.addConstraint(memory * (1 / MIB) <= c.memory_limit_bytes / MIB, f"memory{i}_{s}")

    def decode() -> Split:
        cuts = [0] + [max(hot, key=lambda q: hot[q].varValue or 0.0) for hot in bd[1:-1]] + [L]
        layers = tuple(int(cuts[s + 1] - cuts[s]) for s in range(p))
        rr = min(int(round(r.varValue or 0)), max(layers)) if full else 0
        return Split(layers, rr, c.time_ns_x_v(layers, rr))
    return pulp.lpSum(times) + (m - 1) * bottleneck + tail, decode


def _milp_min(problem, pulp, r, n, r_hi: int, n_hi: int, tag: str):
    """rs = min(r, n) exactly: rs <= r, rs <= n, and rs >= the one that z selects."""
    rs = problem.add_variable(f"rs{tag}", 0, n_hi, pulp.LpInteger)
    z = problem.add_variable(f"z{tag}", 0, 1, pulp.LpBinary)  # z = 1: r is the smaller
    problem.addConstraint(rs <= r, f"rs_r{tag}")
    problem.addConstraint(rs <= n, f"rs_n{tag}")
    problem.addConstraint(rs >= r - r_hi * (1 - z), f"rs_rz{tag}")
    problem.addConstraint(rs >= n - n_hi * z, f"rs_nz{tag}")
    return rs
