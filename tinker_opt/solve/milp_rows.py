"""The MILP rows of one outer configuration (v = 1), one builder per layer stack: cpsat_rows.py's
models with min(r, n_s) linearised by a binary and a mixed stack's boundaries as one-hot
positions. stacks.py calls them; every row is zero when the configuration's x_i is 0.
"""

from __future__ import annotations

from tinker_opt.choices import Recompute, RecomputeMethod
from tinker_opt.costs.pipeline import pipeline_x_v
from tinker_opt.solve.form_split import form_equalities
from tinker_opt.solve.layer_bounds import bound_terms, upper_caps
from tinker_opt.solve.layer_split import Split, memory_caps
from tinker_opt.solve.mixed_split import layer_prefix
from tinker_opt.solve.stacks import MixedStack, UniformStack

MIB = float(2**20)
"""Memory rows are written in MiB (exact for integer bytes below 2**53): 1 byte of excess is
9.5e-7 MiB, above HiGHS's 1e-7 feasibility tolerance, so the MILP cannot round a violation away."""


def milp_uniform(stack: UniformStack, problem, pulp, x, i: int, r, r_choice: dict):
    """Layer counts n_s with scalar coefficients; returns (v * T expression, decoder)."""
    c, k = stack.c, stack.k
    L, p = c.num_layers, c.num_stages
    caps = upper_caps(c, k)
    full = c.outer.recompute == Recompute.FULL
    r_hi = max(stack.recompute_bounds()) if full else 0  # the largest r (big-M of min(r, n_s))
    add = problem.add_variable
    n = [add(f"n{i}_{s}", 0, int(caps[s]), pulp.LpInteger) for s in range(p)]  # layers of stage s
    bottleneck = add(f"M{i}", 0, None)  # M_i >= t_is
    tail = add(f"Q{i}", 0, None)  # Q_i >= tail_is
    _, max_lb, tail_lb = bound_terms(c, k)  # valid bounds (layer_bounds.py) tighten the relaxation
    problem.addConstraint(bottleneck >= max_lb * x, f"bottleneck_lb{i}")
    problem.addConstraint(tail >= tail_lb * x, f"tail_lb{i}")
    problem.addConstraint(pulp.lpSum(n) == L * x, f"layers{i}")
    for s, t in form_equalities(c):  # the framework's layer form (form_split.py)
        problem.addConstraint(n[s] == n[t], f"form{i}_{s}_{t}")
    uniform = c.method == RecomputeMethod.UNIFORM
    caps_of_r = {value: memory_caps(c, k, value) for value in r_choice} if uniform else {}
    times = []
    for s in range(p):
        problem.addConstraint(n[s] >= x, f"n_min{i}_{s}")
        problem.addConstraint(n[s] <= int(caps[s]) * x, f"n_max{i}_{s}")
        if uniform:  # all layers recomputed; the chosen r's memory caps n_s (costs/recompute.py)
            rs = n[s]
        else:
            rs = _milp_min(problem, pulp, r, n[s], r_hi, int(caps[s]), f"{i}_{s}") if full else 0
        t = k.a * n[s] + k.f * rs + int(c.stage_time_ns[s]) * x
        times.append(t)
        problem.addConstraint(bottleneck >= t, f"bottleneck{i}_{s}")
        problem.addConstraint(tail >= k.alpha * n[s] + int(c.stage_tail_ns[s]) * x, f"tail{i}_{s}")
        if uniform:
            cap = pulp.lpSum(int(caps_of_r[v][s]) * y for v, y in r_choice.items())
            problem.addConstraint(n[s] <= cap, f"memory{i}_{s}")
            continue
        kk = int(c.stage_inflight_x_v[s])
        fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s]) + (
            c.work_bytes if full else 0
        )
        memory = (k.w + kk * k.act) * n[s] + kk * (k.inp - k.act) * rs + fixed * x
        problem.addConstraint(memory * (1 / MIB) <= c.memory_limit_bytes / MIB, f"memory{i}_{s}")

    def decode() -> Split:
        layers = tuple(round(v.varValue or 0) for v in n)
        rr = min(round(r.varValue or 0), max(layers)) if full else 0
        return Split(layers, rr, c.time_ns_x_v(layers, rr))

    return pipeline_x_v(c, pulp.lpSum(times), bottleneck, tail), decode


def milp_mixed(stack: MixedStack, problem, pulp, x, i: int, r, r_choice: dict):
    """A mixed stack (as the CP-SAT boundary model): each inner boundary b_j and each recompute
    end b_s + min(r, n_s) is a one-hot over layer positions, so prefix sums at them are linear.
    Returns (v * T expression, decoder)."""
    c = stack.c
    L, p = c.num_layers, c.num_stages
    full = c.outer.recompute == Recompute.FULL
    r_hi = max(stack.recompute_bounds()) if full else 0
    one_hot = _one_hot_maker(problem, pulp, x)
    bd = [{0: x}] + [one_hot(f"z{i}_{j}", range(j, L - p + j + 1)) for j in range(1, p)] + [{L: x}]
    pos = [pulp.lpSum(q * z for q, z in hot.items()) for hot in bd]  # b_j (0 when x_i = 0)
    bottleneck = problem.add_variable(f"M{i}", 0, None)  # M_i >= t_is
    tail = problem.add_variable(f"Q{i}", 0, None)  # Q_i >= tail_is
    for s, t in form_equalities(c):  # the framework's layer form (form_split.py)
        problem.addConstraint(pos[s + 1] - pos[s] == pos[t + 1] - pos[t], f"form{i}_{s}_{t}")
    prefix = layer_prefix(c)

    def span(name, lo, hi):  # sum of the layer array over [lo, hi), both one-hot positions
        return pulp.lpSum(prefix[name][q] * z for q, z in hi.items()) - pulp.lpSum(
            prefix[name][q] * z for q, z in lo.items()
        )

    times = []
    for s in range(p):
        n_s = pos[s + 1] - pos[s]
        problem.addConstraint(n_s >= x, f"n_min{i}_{s}")
        rs = _milp_min(problem, pulp, r, n_s, r_hi, L - p + 1, f"{i}_{s}") if full else None
        cut = bd[s]
        if (
            c.method == RecomputeMethod.UNIFORM
        ):  # every layer recomputed: the recomputed range ends at the end
            cut = bd[s + 1]
        elif full:
            cut = one_hot(f"w{i}_{s}", range(0, L + 1))  # b_s + min(r, n_s)
            problem.addConstraint(
                pulp.lpSum(q * w for q, w in cut.items()) == pos[s] + rs, f"cut{i}_{s}"
            )
        t = (
            span("layer_time_ns", bd[s], bd[s + 1])
            + span("layer_recompute_ns", bd[s], cut)
            + int(c.stage_time_ns[s]) * x
        )
        times.append(t)
        problem.addConstraint(bottleneck >= t, f"bottleneck{i}_{s}")
        problem.addConstraint(
            tail >= span("layer_tail_ns", bd[s], bd[s + 1]) + int(c.stage_tail_ns[s]) * x,
            f"tail{i}_{s}",
        )
        memory = _milp_mixed_memory(c, problem, pulp, span, s, bd, cut, n_s, rs, r_choice, x, i)
        problem.addConstraint(memory * (1 / MIB) <= c.memory_limit_bytes / MIB, f"memory{i}_{s}")

    def decode() -> Split:
        cuts = [0] + [max(hot, key=lambda q: hot[q].varValue or 0.0) for hot in bd[1:-1]] + [L]
        layers = tuple(cuts[s + 1] - cuts[s] for s in range(p))
        rr = min(round(r.varValue or 0), max(layers)) if full else 0
        return Split(layers, rr, c.time_ns_x_v(layers, rr))

    return pipeline_x_v(c, pulp.lpSum(times), bottleneck, tail), decode


def _one_hot_maker(problem, pulp, x):
    """one_hot(tag, positions): {position: binary}, the binaries summing to x_i."""

    def one_hot(tag, positions):
        z = {q: problem.add_variable(f"{tag}_{q}", 0, 1, pulp.LpBinary) for q in positions}
        problem.addConstraint(pulp.lpSum(z.values()) == x, f"{tag}_one")
        return z

    return one_hot


def _milp_mixed_memory(
    c, problem, pulp, span, s: int, bd: list, cut: dict, n_s, rs, r_choice: dict, x, i: int
):
    """Stage s's memory (bytes) of a mixed stack, an expression in the one-hot positions."""
    L = c.num_layers
    kk = int(c.stage_inflight_x_v[s])
    fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s])
    static = span("layer_static_bytes", bd[s], bd[s + 1])
    if c.method == RecomputeMethod.UNIFORM:
        # ceil(n_s / r) group inputs (r g_s >= n_s for the chosen r) and a min(r, n_s)-layer
        # working set (costs/recompute.py).
        groups = problem.add_variable(f"g{i}_{s}", 0, L, pulp.LpInteger)
        for value, y in r_choice.items():
            problem.addConstraint(value * groups >= n_s - L * (x - y), f"groups{i}_{s}_{value}")
        return static + kk * c.checkpoint_bytes * groups + c.work_bytes * rs + fixed * x
    fixed += c.work_bytes if c.outer.recompute == Recompute.FULL else 0
    # Recomputed layers keep their input only, the others their activations.
    return (
        static
        + kk * span("layer_act_bytes", cut, bd[s + 1])
        + kk * span("layer_input_bytes", bd[s], cut)
        + fixed * x
    )


def _milp_min(problem, pulp, r, n, r_hi: int, n_hi: int, tag: str):
    """rs = min(r, n) exactly: rs <= r, rs <= n, and rs >= the one that z selects."""
    rs = problem.add_variable(f"rs{tag}", 0, n_hi, pulp.LpInteger)
    z = problem.add_variable(f"z{tag}", 0, 1, pulp.LpBinary)  # z = 1: r is the smaller
    problem.addConstraint(rs <= r, f"rs_r{tag}")
    problem.addConstraint(rs <= n, f"rs_n{tag}")
    problem.addConstraint(rs >= r - r_hi * (1 - z), f"rs_rz{tag}")
    problem.addConstraint(rs >= n - n_hi * z, f"rs_nz{tag}")
    return rs


def stack_rows(stack, problem, pulp, x, i: int, r, r_choice: dict):
    """Configuration i's MILP rows (v = 1): (v * T expression, decoder). By the stack's kind."""
    if isinstance(stack, UniformStack):
        return milp_uniform(stack, problem, pulp, x, i, r, r_choice)
    assert isinstance(stack, MixedStack), type(stack)
    return milp_mixed(stack, problem, pulp, x, i, r, r_choice)
