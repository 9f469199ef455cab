"""The CP-SAT rows of one outer configuration (v = 1), one builder per layer stack: the counts
model of a uniform stack and the boundary model of a mixed one (cpsat.py's docstring has the
formulation). stacks.py calls them; every row is enforced only when the configuration is chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinker_opt.choices import Recompute, RecomputeMethod
from tinker_opt.costs.pipeline import pipeline_x_v
from tinker_opt.solve.form_split import form_equalities
from tinker_opt.solve.layer_bounds import bound_terms, upper_caps
from tinker_opt.solve.layer_split import Split, memory_caps
from tinker_opt.solve.mixed_split import layer_prefix
from tinker_opt.solve.stacks import MixedStack, Stack, UniformStack


@dataclass(frozen=True)
class Decoder:
    """A configuration's decoder (the solver's value function -> Split) with its hint: the
    (variable, value) pairs of a known split, which cpsat._cpsat_hint reads."""

    decode: Callable[[Callable[[Any], Any]], Split]
    hint: Callable[[Split], list]

    def __call__(self, value: Callable[[Any], Any]) -> Split:
        return self.decode(value)


def cpsat_uniform(
    stack: UniformStack, model, cp_model, x, objective, factor: int, i: int, upper: int | None
):
    """Layer counts n_s with scalar coefficients; returns (decoder, lower-bound term)."""
    c, k = stack.c, stack.k
    L, p = c.num_layers, c.num_stages
    caps = upper_caps(c, k)
    n = [model.new_int_var(1, int(caps[s]), f"n{i}_{s}") for s in range(p)]  # layers of stage s
    model.add(sum(n) == L).only_enforce_if(x)
    for s, t in form_equalities(c):  # the framework's layer form (form_split.py)
        model.add(n[s] == n[t]).only_enforce_if(x)
    r, choice, bound_term = cpsat_recompute(stack, model, cp_model, x, factor, i, upper)
    uniform = c.method == RecomputeMethod.UNIFORM
    rs = [0] * p
    if uniform:  # every layer recomputed; the memory of the chosen r caps n_s (costs/recompute.py)
        rs = n
        for value, y in choice.items():
            caps_r = memory_caps(c, k, value)
            for s in range(p):
                model.add(n[s] <= int(caps_r[s])).only_enforce_if(y)
    elif c.outer.recompute == Recompute.FULL:
        rs = [model.new_int_var(0, int(caps[s]), f"rs{i}_{s}") for s in range(p)]  # min(r, n_s)
        for s in range(p):
            model.add_min_equality(rs[s], [r, n[s]])
    _, max_lb, tail_lb = bound_terms(c, k)  # valid bounds (layer_bounds.py) tighten the relaxation
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
        fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s]) + (
            c.work_bytes if choice else 0
        )
        model.add(
            k.w * n[s] + kk * k.act * (n[s] - rs[s]) + kk * k.inp * rs[s]
            <= c.memory_limit_bytes - fixed
        ).only_enforce_if(x)
    model.add(objective >= factor * pipeline_x_v(c, sum(times), bottleneck, tail)).only_enforce_if(
        x
    )

    def decode(value) -> Split:
        layers = tuple(int(value(v)) for v in n)
        rr = min(int(value(r)), max(layers)) if c.outer.recompute == Recompute.FULL else 0
        return Split(layers, rr, c.time_ns_x_v(layers, rr))

    hint = lambda split: [
        *zip(n, split.layers, strict=True),
        *recompute_hint(r, choice, split),
    ]
    return Decoder(decode, hint), bound_term


def cpsat_mixed(
    stack: MixedStack, model, cp_model, x, objective, factor: int, i: int, upper: int | None
):
    """A mixed stack (mixed_split.py): stage s holds the layers [b_s, b_s+1) between boundary
    variables, and every per-stage quantity is a difference of prefix sums read by element
    constraints at the boundaries and at the recompute ends b_s + min(r, n_s)."""
    c = stack.c
    L, p = c.num_layers, c.num_stages
    bd = [0] + [model.new_int_var(s, L - p + s, f"b{i}_{s}") for s in range(1, p)] + [L]
    n = [bd[s + 1] - bd[s] for s in range(p)]  # layers of stage s (>= 1: ordered boundaries)
    for s in range(p):
        model.add(n[s] >= 1)
    for s, t in form_equalities(c):  # the framework's layer form (form_split.py)
        model.add(n[s] == n[t]).only_enforce_if(x)
    r, choice, bound_term = cpsat_recompute(stack, model, cp_model, x, factor, i, upper)
    at = _element_reader(model, layer_prefix(c), i)
    stages = [_cpsat_mixed_stage(c, model, at, s, bd, n, r, choice, x, i) for s in range(p)]
    times, tails = [t for t, _ in stages], [q for _, q in stages]
    bottleneck = model.new_int_var(0, stack.horizon_x_v(), f"M{i}")  # M_i >= t_is
    tail_max = model.new_int_var(0, stack.horizon_x_v(), f"Q{i}")  # Q_i >= tail_is
    for s in range(p):
        model.add(bottleneck >= times[s]).only_enforce_if(x)
        model.add(tail_max >= tails[s]).only_enforce_if(x)
    model.add(
        objective >= factor * pipeline_x_v(c, sum(times), bottleneck, tail_max)
    ).only_enforce_if(x)

    def decode(value) -> Split:
        cuts = [0] + [int(value(v)) for v in bd[1:-1]] + [L]
        layers = tuple(cuts[s + 1] - cuts[s] for s in range(p))
        rr = min(int(value(r)), max(layers)) if c.outer.recompute == Recompute.FULL else 0
        return Split(layers, rr, c.time_ns_x_v(layers, rr))

    hint = lambda split: [
        *zip(bd[1:-1], np.cumsum(split.layers)[:-1].tolist(), strict=True),
        *recompute_hint(r, choice, split),
    ]
    return Decoder(decode, hint), bound_term


def _element_reader(model, prefix: dict[str, list[int]], i: int):
    """at(name, index, tag): prefix[name][index], as a variable (element constraint) when the
    index is a variable."""

    def at(name, index, tag):
        if isinstance(index, int):
            return prefix[name][index]
        var = model.new_int_var(min(prefix[name]), max(prefix[name]), f"{tag}{i}")
        model.add_element(index, prefix[name], var)
        return var

    return at


def _cpsat_mixed_stage(c, model, at, s: int, bd: list, n: list, r, choice: dict, x, i: int):
    """Stage s of a mixed stack: its recompute end, memory row and (time, tail) expressions."""
    L, p = c.num_layers, c.num_stages
    full = c.outer.recompute == Recompute.FULL
    uniform = c.method == RecomputeMethod.UNIFORM
    cut = bd[s]
    if full:
        rs = model.new_int_var(0, L - p + 1, f"rs{i}_{s}")  # min(r, n_s)
        model.add_min_equality(rs, [r, n[s]])
        cut = model.new_int_var(0, L, f"cut{i}_{s}")  # end of the recomputed layers
        model.add(cut == (bd[s + 1] if uniform else bd[s] + rs))

    def span(name, lo, hi, tag):
        return at(name, hi, f"{tag}h{s}_") - at(name, lo, f"{tag}l{s}_")

    t = (
        span("layer_time_ns", bd[s], bd[s + 1], "t")
        + span("layer_recompute_ns", bd[s], cut, "f")
        + int(c.stage_time_ns[s])
    )
    tail = span("layer_tail_ns", bd[s], bd[s + 1], "q") + int(c.stage_tail_ns[s])
    kk = int(c.stage_inflight_x_v[s])
    fixed = int(c.stage_static_bytes[s] + kk * c.stage_act_bytes[s])
    if uniform:
        # ceil(n_s / r) group inputs (g r >= n_s for the chosen r) and a min(r, n_s)-layer
        # working set (costs/recompute.py).
        groups = model.new_int_var(0, L, f"g{i}_{s}")
        for value, y in choice.items():
            model.add(value * groups >= n[s]).only_enforce_if(y)
        held = kk * c.checkpoint_bytes * groups + c.work_bytes * rs
    else:
        kept = span("layer_act_bytes", cut, bd[s + 1], "a")  # recomputed layers keep their input
        inputs = span("layer_input_bytes", bd[s], cut, "i")
        held = kk * (kept + inputs) + (c.work_bytes if full else 0)
    model.add(
        span("layer_static_bytes", bd[s], bd[s + 1], "w") + held <= c.memory_limit_bytes - fixed
    ).only_enforce_if(x)
    return t, tail


def cpsat_recompute(stack: Stack, model, cp_model, x, factor: int, i: int, upper: int | None):
    """The recompute count r of configuration i, its value literals {r: y_r} (sum y_r = x_i) and
    the lower-bound term factor * sum_r bound(r) y_r (Stack.recompute_bounds).

    Linking each r to its own bound is what makes the relaxation tight: the memory usually forces
    r well above 1 and then every stage pays min(r, n_s), which a relaxation of the min alone
    does not see. Values whose bound exceeds the incumbent (`upper`) cannot be chosen."""
    if stack.c.outer.recompute != Recompute.FULL:
        return 0, {}, factor * stack.lower_bound_x_v() * x
    every = stack.recompute_bounds()
    bounds = {r: b for r, b in every.items() if upper is None or factor * b <= upper}
    if not bounds:
        model.add(x == 0)
        bounds = {min(every): 0}
    r = model.new_int_var_from_domain(cp_model.Domain.from_values(sorted(bounds)), f"r{i}")
    choice = {value: model.new_bool_var(f"y{i}_{value}") for value in bounds}  # y_r: r = value
    for value, y in choice.items():
        model.add(r == value).only_enforce_if(y)
    model.add(sum(choice.values()) == x)
    pairs = zip(bounds.values(), choice.values(), strict=True)
    return r, choice, sum(factor * bound * y for bound, y in pairs)


def recompute_hint(r, choice: dict, split: Split) -> list:
    """(variable, value) hints of the recompute count and its value literals."""
    if not choice:
        return []
    return [(r, split.recompute_num_layers)] + [
        (y, value == split.recompute_num_layers) for value, y in choice.items()
    ]


def stack_rows(stack, model, cp_model, x, objective, factor: int, i: int, upper: int | None):
    """Configuration i's CP-SAT rows (v = 1): (decoder, lower-bound term). By the stack's kind."""
    if isinstance(stack, UniformStack):
        return cpsat_uniform(stack, model, cp_model, x, objective, factor, i, upper)
    assert isinstance(stack, MixedStack), type(stack)
    return cpsat_mixed(stack, model, cp_model, x, objective, factor, i, upper)
