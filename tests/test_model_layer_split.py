"""Exact layer split and bounds: checked against trying every composition."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from model_support import cluster, dense_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.solve.bounds import is_feasible, lower_bound_x_v, recompute_bounds
from tinker_opt.solve.enumerate import brute_force, compositions
from tinker_opt.solve.layer_split import pack
from tinker_opt.solve.stacks import best_split
from tinker_opt.strategy import Strategy

MODEL = dense_model(num_layers=9, hidden=512, heads=8, seq=1024)
PROFILE = synthetic_profile(MODEL, tps=(1, 2), cps=(1,), mbss=(1, 2))


@st.composite
def configurations(draw):
    """An outer configuration of a 9-layer model on 8 devices, with a random memory limit."""
    pp = draw(st.sampled_from([1, 2, 4]))
    tp = draw(st.sampled_from([1, 2]))
    recompute = draw(st.sampled_from(["none", "selective", "full"]))
    vpp = draw(st.sampled_from([1, 1, 3])) if pp == 4 else 1
    layers = 12 if vpp > 1 else 9
    model = dense_model(num_layers=layers, hidden=512, heads=8, seq=1024)
    profile = (
        PROFILE if layers == 9 else synthetic_profile(model, tps=(1, 2), cps=(1,), mbss=(1, 2))
    )
    memory_mb = draw(st.integers(150, 1200))
    cost_model = CostModel.from_profile(profile, model, cluster(1, 8, memory_mb), 32)
    outer = Strategy(
        tp=tp,
        pp=pp,
        dp=8 // (tp * pp),
        sp=tp > 1,
        vpp=vpp,
        mbs=draw(st.sampled_from([1, 2])),
        zero=draw(st.integers(0, 1)),
        recompute=recompute,
        recompute_method="block" if recompute == "full" else None,
    )
    return cost_model, outer


@settings(max_examples=60, deadline=None)
@given(configurations())
def test_exact_split_equals_brute_force(case):
    """best_split finds the optimum of every composition and recompute count."""
    cost_model, outer = case
    split = best_split(cost_model.coefficients(outer))
    brute = brute_force(cost_model, [outer])
    assert (split is None) == (not brute)
    if brute:
        assert split.time_ns_x_v == brute[0].split.time_ns_x_v


@settings(max_examples=60, deadline=None)
@given(configurations())
def test_bounds_are_valid_and_feasibility_exact(case):
    """The lower bounds never exceed the optimum; is_feasible says whether any split fits."""
    cost_model, outer = case
    coeffs = cost_model.coefficients(outer)
    split = best_split(coeffs)
    assert is_feasible(coeffs) == (split is not None)
    if split is not None:
        assert lower_bound_x_v(coeffs, tight=False) <= lower_bound_x_v(coeffs) <= split.time_ns_x_v


@settings(max_examples=40, deadline=None)
@given(configurations())
def test_recompute_bounds_hold_for_every_split_with_that_count(case):
    """recompute_bounds[r] <= v*T of every fitting split with recompute count r, and the counts
    it leaves out have no fitting split."""
    cost_model, outer = case
    coeffs = cost_model.coefficients(outer)
    if outer.recompute != "full" or coeffs.vpp > 1:
        return
    bounds = recompute_bounds(coeffs)
    best: dict[int, int] = {}
    for layers in compositions(coeffs.num_layers, coeffs.num_stages):
        for r in range(1, max(layers) + 1):
            stages = coeffs.stage_costs(layers, r)
            if max(st.memory_bytes_x_v for st in stages) <= coeffs.memory_limit_bytes:
                best[r] = min(best.get(r, 2**62), coeffs.iteration_time_ns_x_v(stages))
    assert set(best) <= set(bounds)
    assert all(bounds[r] <= value for r, value in best.items())


@given(st.lists(st.integers(1, 9), min_size=1, max_size=6), st.integers(1, 30), st.integers(1, 5))
def test_packing_minimises_the_recompute_sum(caps, total, r):
    """Packing into the largest caps gives the least sum of min(r, n_s) over every split."""
    caps_array = np.array(caps)
    packed = pack(caps_array, total)
    feasible = [
        c
        for c in compositions(total, len(caps))
        if all(n <= u for n, u in zip(c, caps, strict=True))
    ]
    assert (packed is None) == (not feasible)
    if feasible:
        assert packed.sum() == total and (packed <= caps_array).all() and packed.min() >= 1
        assert np.minimum(r, packed).sum() == min(sum(min(r, n) for n in c) for c in feasible)


def test_compositions_counts_every_split():
    """C(L-1, p-1) ordered splits into positive parts."""
    assert len(list(compositions(9, 4))) == 56
