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
positions in the MILP), see mixed_split.py.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve.bounds import bound_terms, lower_bound_x_v, min_recompute_even, recompute_bounds
from tinker_opt.solve.layer_split import Scalars, Split
from tinker_opt.solve.outcome import SolverOutcome, common_scale, objective_horizon, upper_caps


def solve_cpsat(coeffs: Sequence[SplitCoefficients], *, time_limit_s: float, workers: int,
                hint: tuple[int, Split] | None = None, upper_x_scale: int | None = None) -> SolverOutcome:
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
    caps = upper_caps(c, k)
    n = [model.new_int_var(1, int(caps[s]), f"n{i}_{s}") for s in range(p)]  # layers of stage s
    model.add(sum(n) == L).only_enforce_if(x)
    r, choice, bound_term = _cpsat_recompute(model, cp_model, c, x, factor, i, upper)
    rs = [0] * p
    if c.outer.recompute == "full":
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
        kk = int(c.stage_inflight_x_v[s])
        fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s]) + (c.work_bytes if choice else 0)
        model.add(k.w * n[s] + kk * k.act * (n[s] - rs[s]) + kk * k.inp * rs[s]
                  <= c.memory_limit_bytes - fixed).only_enforce_if(x)
    model.add(objective >= factor * (sum(times) + (m - 1) * bottleneck + tail)).only_enforce_if(x)

    def decode(value) -> Split:
        layers = tuple(int(value(v)) for v in n)
        rr = min(int(value(r)), max(layers)) if c.outer.recompute == "full" else 0
        return Split(layers, rr, c.time_ns_x_v(layers, rr))
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
    times, tails = [], []
    for s in range(p):
        cut = bd[s]
        if full:
            rs = model.new_int_var(0, L - p + 1, f"rs{i}_{s}")  # min(r, n_s)
            model.add_min_equality(rs, [r, n[s]])
            cut = model.new_int_var(0, L, f"cut{i}_{s}")  # end of the recomputed layers
            model.add(cut == bd[s] + rs)
        def span(name, lo, hi, tag):
            return at(name, hi, f"{tag}h{s}_") - at(name, lo, f"{tag}l{s}_")
        t = (span("layer_time_ns", bd[s], bd[s + 1], "t") + span("layer_recompute_ns", bd[s], cut, "f")
             + int(c.stage_time_ns[s]))
        tail = span("layer_tail_ns", bd[s], bd[s + 1], "q") + int(c.stage_tail_ns[s])
        kept = span("layer_act_bytes", cut, bd[s + 1], "a")  # recomputed layers keep their input only
        inputs = span("layer_input_bytes", bd[s], cut, "i")
        kk = int(c.stage_inflight_x_v[s])
        fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s]) + (c.work_bytes if full else 0)
        model.add(span("layer_static_bytes", bd[s], bd[s + 1], "w") + kk * (kept + inputs)
                  <= c.memory_limit_bytes - fixed).only_enforce_if(x)
        times.append(t)
        tails.append(tail)
    bottleneck = model.new_int_var(0, objective_horizon([c], 1), f"M{i}")  # M_i >= t_is
    tail_max = model.new_int_var(0, objective_horizon([c], 1), f"Q{i}")  # Q_i >= tail_is
    for s in range(p):
        model.add(bottleneck >= times[s]).only_enforce_if(x)
        model.add(tail_max >= tails[s]).only_enforce_if(x)
    model.add(objective >= factor * (sum(times) + (m - 1) * bottleneck + tail_max)).only_enforce_if(x)

    def decode(value) -> Split:
        cuts = [0] + [int(value(v)) for v in bd[1:-1]] + [L]
        layers = tuple(cuts[s + 1] - cuts[s] for s in range(p))
        rr = min(int(value(r)), max(layers)) if full else 0
        return Split(layers, rr, c.time_ns_x_v(layers, rr))
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
