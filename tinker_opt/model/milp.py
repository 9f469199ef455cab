"""The CP-SAT (OR-Tools) and MILP (PuLP + HiGHS, CBC fallback) models over the whole space.

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
positions in the MILP), see mixed_split.py.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tinker_opt.model.bounds import (bound_terms, loosest_caps, lower_bound_x_v, min_recompute_even,
                                     recompute_bounds)
from tinker_opt.model.coefficients import SplitCoefficients, iteration_time_ns_x_v, stage_costs
from tinker_opt.model.layer_split import Scalars, Split, memory_caps, objective_x_v, recompute_range


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


def _common_scale(coeffs: Sequence[SplitCoefficients]) -> int:
    return math.lcm(*[c.vpp for c in coeffs]) if coeffs else 1


def _upper_caps(c: SplitCoefficients, k: Scalars) -> np.ndarray:
    return np.minimum(loosest_caps(c, k), c.num_layers - c.num_stages + 1)


def _horizon(coeffs: Sequence[SplitCoefficients], scale: int) -> int:
    """An upper bound on the scaled objective: every stage at its largest layer count."""
    worst = 0
    for c in coeffs:
        if c.homogeneous:
            k = Scalars.of(c)
            caps = _upper_caps(c, k)
            t_max = int((k.a + k.f) * caps.max() + c.stage_time_ns.max())
            tail_max = int(k.alpha * caps.max() + c.stage_tail_ns.max())
        else:  # a stage holds at most every layer
            t_max = int(c.layer_time_ns.sum() + c.layer_recompute_ns.sum() + c.stage_time_ns.max())
            tail_max = int(c.layer_tail_ns.sum() + c.stage_tail_ns.max())
        p, m, v = c.num_stages, c.num_microbatches, c.vpp
        worst = max(worst, scale // v * (p * v * t_max + (m * v - 1) * t_max + v * tail_max))
    return worst


# -- CP-SAT ------------------------------------------------------------------------------------

def solve_cpsat(coeffs: Sequence[SplitCoefficients], *, time_limit_s: float, workers: int,
                hint: tuple[int, Split] | None = None, upper_x_scale: int | None = None) -> SolverOutcome:
    """Minimise the iteration time over `coeffs` with CP-SAT."""
    from ortools.sat.python import cp_model

    start = time.perf_counter()
    scale = _common_scale(coeffs)
    model = cp_model.CpModel()
    horizon = upper_x_scale if upper_x_scale is not None else _horizon(coeffs, scale)
    objective = model.new_int_var(0, horizon, "T")  # T: V * iteration time (ns)
    choices, decode, bound_terms_ = [], [], []
    for i, c in enumerate(coeffs):
        x = model.new_bool_var(f"x{i}")  # x_i: configuration i is chosen
        choices.append(x)
        dec, term = _cpsat_configuration(model, cp_model, c, x, objective, scale // c.vpp, i, upper_x_scale)
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
    names = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible"}
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return SolverOutcome(names.get(status, "unknown"), None, None, None, float("inf") if
                             status == cp_model.INFEASIBLE else 0.0, elapsed)
    index = next(i for i, x in enumerate(choices) if solver.boolean_value(x))
    split = decode[index](solver.value)
    return SolverOutcome(names[status], index, split, split.time_ns_x_v,
                         solver.best_objective_bound / scale, elapsed)


def _cpsat_configuration(model, cp_model, c: SplitCoefficients, x, objective, factor: int, i: int,
                         upper: int | None):
    """Add configuration i's variables and constraints (enforced when x_i); return its decoder
    and its lower-bound term (a linear expression, equal to factor * bound when chosen)."""
    if c.vpp > 1:
        split = min_recompute_even(c)
        return (lambda value: split), factor * split.time_ns_x_v * x
    if not c.homogeneous:
        return _cpsat_mixed_configuration(model, cp_model, c, x, objective, factor, i, upper)
    k = Scalars.of(c)
    L, p, m = c.num_layers, c.num_stages, c.num_microbatches
    caps = _upper_caps(c, k)
    n = [model.new_int_var(1, int(caps[s]), f"n{i}_{s}") for s in range(p)]  # layers of stage s
    model.add(sum(n) == L).only_enforce_if(x)
    r, choice, bound_term = _cpsat_recompute(model, cp_model, c, x, factor, i, upper)
    uniform = c.method == "uniform"
    rs = [0] * p
    if uniform:  # every layer recomputed; the memory of r is a cap on n_s (recompute.py)
        rs = n
        for value, y in choice.items():
            caps_r = memory_caps(c, k, value)
            for s in range(p):
                model.add(n[s] <= int(caps_r[s])).only_enforce_if(y)
    elif c.outer.recompute == "full":
        rs = [model.new_int_var(0, int(caps[s]), f"rs{i}_{s}") for s in range(p)]  # min(r, n_s)
        for s in range(p):
            model.add_min_equality(rs[s], [r, n[s]])
    _, max_lb, tail_lb = bound_terms(c)  # valid bounds (bounds.py) tighten the relaxation
    t_max = int(k.a * caps.max() + k.f * caps.max() + c.stage_time_ns.max())
    bottleneck = model.new_int_var(min(max_lb, t_max), t_max, f"M{i}")  # M_i >= t_is
    tail_max = int(k.alpha * caps.max() + c.stage_tail_ns.max())
    tail = model.new_int_var(min(tail_lb, tail_max), tail_max, f"Q{i}")  # Q_i >= tail_is
    times = []
    for s in range(p):
        t = k.a * n[s] + k.f * rs[s] + int(c.stage_time_ns[s])
        times.append(t)
        model.add(bottleneck >= t).only_enforce_if(x)
        model.add(tail >= k.alpha * n[s] + int(c.stage_tail_ns[s])).only_enforce_if(x)
        if uniform:
            continue
        kk = int(c.stage_inflight_x_v[s])
        fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s]) + (c.work_bytes if choice else 0)
        model.add(k.w * n[s] + kk * k.act * (n[s] - rs[s]) + kk * k.inp * rs[s]
                  <= c.memory_limit_bytes - fixed).only_enforce_if(x)
    model.add(objective >= factor * (sum(times) + (m - 1) * bottleneck + tail)).only_enforce_if(x)

    def decode(value) -> Split:
        layers = tuple(int(value(v)) for v in n)
        rr = min(int(value(r)), max(layers)) if c.outer.recompute == "full" else 0
        return Split(layers, rr, objective_x_v(c, k, np.array(layers), rr))
    decode.hint = lambda split: [*zip(n, split.layers), *_recompute_hint(r, choice, split)]
    return decode, bound_term


def _recompute_hint(r, choice: dict, split: Split) -> list:
    """(variable, value) hints of the recompute count and its value literals."""
    if not choice:
        return []
    return [(r, split.recompute_num_layers)] + [(y, value == split.recompute_num_layers)
                                                for value, y in choice.items()]


def _cpsat_mixed_configuration(model, cp_model, c: SplitCoefficients, x, objective, factor: int, i: int,
                               upper: int | None):
    """A mixed stack (mixed_split.py): stage s holds the layers [b_s, b_s+1) between boundary
    variables, and every per-stage quantity is a difference of prefix sums read by element
    constraints at the boundaries and at the recompute ends b_s + min(r, n_s)."""
    L, p, m = c.num_layers, c.num_stages, c.num_microbatches
    full = c.outer.recompute == "full"
    bd = [0] + [model.new_int_var(s, L - p + s, f"b{i}_{s}") for s in range(1, p)] + [L]
    n = [bd[s + 1] - bd[s] for s in range(p)]  # layers of stage s (>= 1: ordered boundaries)
    for s in range(p):
        model.add(n[s] >= 1)
    r, choice, bound_term = _cpsat_recompute(model, cp_model, c, x, factor, i, upper)
    prefix = {name: [0] + np.cumsum(getattr(c, name)).tolist() for name in (
        "layer_time_ns", "layer_recompute_ns", "layer_tail_ns", "layer_static_bytes", "layer_act_bytes",
        "layer_input_bytes")}

    def at(name, index, tag):  # prefix[name][index] as a variable (element constraint)
        if isinstance(index, int):
            return prefix[name][index]
        var = model.new_int_var(min(prefix[name]), max(prefix[name]), f"{tag}{i}")
        model.add_element(index, prefix[name], var)
        return var
    uniform = c.method == "uniform"
    times, tails = [], []
    for s in range(p):
        cut = bd[s]
        if full:
            rs = model.new_int_var(0, L - p + 1, f"rs{i}_{s}")  # min(r, n_s)
            model.add_min_equality(rs, [r, n[s]])
            cut = model.new_int_var(0, L, f"cut{i}_{s}")  # end of the recomputed layers
            model.add(cut == (bd[s + 1] if uniform else bd[s] + rs))
        def span(name, lo, hi, tag):
            return at(name, hi, f"{tag}h{s}_") - at(name, lo, f"{tag}l{s}_")
        t = (span("layer_time_ns", bd[s], bd[s + 1], "t") + span("layer_recompute_ns", bd[s], cut, "f")
             + int(c.stage_time_ns[s]))
        tail = span("layer_tail_ns", bd[s], bd[s + 1], "q") + int(c.stage_tail_ns[s])
        kk = int(c.stage_inflight_x_v[s])
        fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s])
        if uniform:
            # ceil(n_s / r) group inputs (g r >= n_s for the chosen r) and a min(r, n_s)-layer
            # working set (recompute.py).
            groups = model.new_int_var(0, L, f"g{i}_{s}")
            for value, y in choice.items():
                model.add(value * groups >= n[s]).only_enforce_if(y)
            held = kk * c.checkpoint_bytes * groups + c.work_bytes * rs
        else:
            kept = span("layer_act_bytes", cut, bd[s + 1], "a")  # recomputed layers keep their input only
            inputs = span("layer_input_bytes", bd[s], cut, "i")
            held = kk * (kept + inputs) + (c.work_bytes if full else 0)
        model.add(span("layer_static_bytes", bd[s], bd[s + 1], "w") + held
                  <= c.memory_limit_bytes - fixed).only_enforce_if(x)
        times.append(t)
        tails.append(tail)
    bottleneck = model.new_int_var(0, _horizon([c], 1), f"M{i}")  # M_i >= t_is
    tail_max = model.new_int_var(0, _horizon([c], 1), f"Q{i}")  # Q_i >= tail_is
    for s in range(p):
        model.add(bottleneck >= times[s]).only_enforce_if(x)
        model.add(tail_max >= tails[s]).only_enforce_if(x)
    model.add(objective >= factor * (sum(times) + (m - 1) * bottleneck + tail_max)).only_enforce_if(x)

    def decode(value) -> Split:
        cuts = [0] + [int(value(v)) for v in bd[1:-1]] + [L]
        layers = tuple(cuts[s + 1] - cuts[s] for s in range(p))
        rr = min(int(value(r)), max(layers)) if full else 0
        return Split(layers, rr, iteration_time_ns_x_v(c, stage_costs(c, layers, rr)))
    decode.hint = lambda split: [*zip(bd[1:-1], np.cumsum(split.layers)[:-1].tolist()),
                                 *_recompute_hint(r, choice, split)]
    return decode, bound_term


def _cpsat_recompute(model, cp_model, c: SplitCoefficients, x, factor: int, i: int, upper: int | None):
    """The recompute count r of configuration i, its value literals {r: y_r} (sum y_r = x_i) and
    the lower-bound term factor * sum_r bound(r) y_r (bounds.recompute_bounds).

    Linking each r to its own bound is what makes the relaxation tight: the memory usually forces
    r well above 1 and then every stage pays min(r, n_s), which a relaxation of the min alone
    does not see. Values whose bound exceeds the incumbent (`upper`) cannot be chosen."""
    if c.outer.recompute != "full":
        return 0, {}, factor * lower_bound_x_v(c) * x
    bounds = {r: b for r, b in recompute_bounds(c).items() if upper is None or factor * b <= upper}
    if not bounds:
        model.add(x == 0)
        bounds = {min(recompute_bounds(c)): 0}
    r = model.new_int_var_from_domain(cp_model.Domain.from_values(sorted(bounds)), f"r{i}")
    choice = {value: model.new_bool_var(f"y{i}_{value}") for value in bounds}  # y_r: r = value
    for value, y in choice.items():
        model.add(r == value).only_enforce_if(y)
    model.add(sum(choice.values()) == x)
    return r, choice, sum(factor * bound * y for bound, y in zip(bounds.values(), choice.values()))


def _cpsat_hint(model, choices, decode, hint: tuple[int, Split]) -> None:
    index, split = hint
    for i, x in enumerate(choices):
        model.add_hint(x, i == index)
    hints = getattr(decode[index], "hint", None)
    for var, value in (hints(split) if hints is not None else []):
        model.add_hint(var, int(value))


# -- MILP (PuLP) -------------------------------------------------------------------------------

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
    scale = _common_scale(coeffs)
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
    r_var, bound, r_choice = _milp_recompute(problem, pulp, c, x, i)
    if not c.homogeneous:
        return (*_milp_mixed_configuration(problem, pulp, c, x, i, r_var, r_choice), bound)
    k = Scalars.of(c)
    L, p, m = c.num_layers, c.num_stages, c.num_microbatches
    caps = _upper_caps(c, k)
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
    uniform = c.method == "uniform"
    caps_of_r = {value: memory_caps(c, k, value) for value in recompute_bounds(c)} if uniform else {}
    times = []
    for s in range(p):
        problem.addConstraint(n[s] >= x, f"n_min{i}_{s}")
        problem.addConstraint(n[s] <= int(caps[s]) * x, f"n_max{i}_{s}")
        if uniform:  # all layers recomputed; the chosen r's memory is a cap on n_s (recompute.py)
            t = (k.a + k.f) * n[s] + int(c.stage_time_ns[s]) * x
            times.append(t)
            problem.addConstraint(bottleneck >= t, f"bottleneck{i}_{s}")
            problem.addConstraint(tail >= k.alpha * n[s] + int(c.stage_tail_ns[s]) * x, f"tail{i}_{s}")
            problem.addConstraint(n[s] <= pulp.lpSum(int(caps_of_r[v][s]) * y for v, y in r_choice.items()),
                                  f"memory{i}_{s}")
            continue
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
        return Split(layers, rr, objective_x_v(c, k, np.array(layers), rr))
    return term, decode, bound


def _milp_recompute(problem, pulp, c: SplitCoefficients, x, i: int):
    """(r, bound term, {r: y_r}): r = sum_r r y_r over value binaries y_r (sum = x_i), each linked
    to its valid bound (bounds.recompute_bounds) in bound = sum_r bound(r) y_r; without full
    recompute r is None and bound = lower_bound(i) x_i."""
    if c.outer.recompute != "full":
        return None, lower_bound_x_v(c) * x, {}
    bounds = recompute_bounds(c)
    y = {value: problem.add_variable(f"y{i}_{value}", 0, 1, pulp.LpBinary) for value in bounds}
    problem.addConstraint(pulp.lpSum(y.values()) == x, f"r_one{i}")
    r = problem.add_variable(f"r{i}", 0, max(bounds), pulp.LpInteger)
    problem.addConstraint(r == pulp.lpSum(value * y[value] for value in bounds), f"r_value{i}")
    return r, pulp.lpSum(bound * y[value] for value, bound in bounds.items()), y


def _milp_mixed_configuration(problem, pulp, c: SplitCoefficients, x, i: int, r, r_choice: dict):
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
    uniform = c.method == "uniform"
    times = []
    for s in range(p):
        n_s = pos[s + 1] - pos[s]
        problem.addConstraint(n_s >= x, f"n_min{i}_{s}")
        cut = bd[s]
        if full:
            rs = _milp_min(problem, pulp, r, n_s, r_hi, L - p + 1, f"{i}_{s}")
        if uniform:  # every layer recomputed: the recomputed range ends at the stage's end
            cut = bd[s + 1]
        elif full:
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
        if uniform:
            # ceil(n_s / r) group inputs (r g_s >= n_s for the chosen r) and a min(r, n_s)-layer
            # working set (recompute.py).
            groups = add(f"g{i}_{s}", 0, L, pulp.LpInteger)
            for value, y in r_choice.items():
                problem.addConstraint(value * groups >= n_s - L * (x - y), f"groups{i}_{s}_{value}")
            fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s])
            memory = (span("layer_static_bytes", bd[s], bd[s + 1]) + kk * c.checkpoint_bytes * groups
                      + c.work_bytes * rs + fixed * x)
        else:
            fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s]) + (c.work_bytes if full else 0)
            # Recomputed layers keep their input only, the others their activations.
            memory = (span("layer_static_bytes", bd[s], bd[s + 1]) + kk * span("layer_act_bytes", cut, bd[s + 1])
                      + kk * span("layer_input_bytes", bd[s], cut) + fixed * x)
        problem.addConstraint(memory * (1 / MIB) <= c.memory_limit_bytes / MIB, f"memory{i}_{s}")

    def decode() -> Split:
        cuts = [0] + [max(hot, key=lambda q: hot[q].varValue or 0.0) for hot in bd[1:-1]] + [L]
        layers = tuple(int(cuts[s + 1] - cuts[s]) for s in range(p))
        rr = min(int(round(r.varValue or 0)), max(layers)) if full else 0
        return Split(layers, rr, iteration_time_ns_x_v(c, stage_costs(c, layers, rr)))
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
