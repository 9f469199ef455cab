"""Solvers agree: CP-SAT, MILP, enumeration and brute force find the same optimum, and
`CostModel.evaluate` of every returned strategy equals the reported objective exactly."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_support import cluster, dense_model, moe_model, solvers_agree, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.rules import form_allows
from tinker_opt.solve.bounds import is_feasible
from tinker_opt.solve.cpsat import solve_cpsat
from tinker_opt.solve.enumerate import brute_force
from tinker_opt.solve.milp import solve_milp
from tinker_opt.solve.search import _outers
from tinker_opt.solve.space import SearchSpace

SPACE = SearchSpace(max_mbs=2, tp=(1, 2), cp=(1, 2), ep=(1, 2))
UNIFORM_SPACE = SearchSpace(
    max_mbs=2, tp=(1, 2), cp=(1, 2), ep=(1, 2), recompute=("full",), recompute_methods=("uniform",)
)
"""Only Megatron's uniform full recompute: every solver must price its groups and working set."""


@st.composite
def instances(draw):
    """A small model, cluster, batch and memory limit (often tight enough to force recompute)."""
    layers = draw(st.integers(2, 7))
    hidden = draw(st.sampled_from([256, 512]))
    seq = draw(st.sampled_from([256, 512]))
    kind = draw(st.sampled_from(["dense", "moe", "mixed"]))
    if kind == "moe":
        model = moe_model(num_layers=layers, hidden=hidden, heads=4, seq=seq, experts=4)
    elif kind == "mixed":  # dense and MoE layers at fixed positions (DeepSeek / Qwen-MoE style)
        first_dense, freq = draw(st.sampled_from([(1, 1), (2, 1), (0, 2), (1, 2), (layers - 1, 1)]))
        model = moe_model(
            num_layers=layers,
            hidden=hidden,
            heads=4,
            seq=seq,
            experts=4,
            first_dense=first_dense,
            layer_freq=freq,
        )
    else:
        model = dense_model(num_layers=layers, hidden=hidden, heads=4, seq=seq)
    nodes, per_node = draw(st.sampled_from([(1, 1), (1, 2), (1, 4), (2, 2), (1, 8), (2, 4)]))
    memory_mb = draw(st.integers(60, 1500))
    gbs = draw(st.sampled_from([4, 8, 16]))
    profile = synthetic_profile(model, tps=(1, 2), cps=(1, 2), eps=(1, 2), mbss=(1, 2))
    cost_model = CostModel.from_profile(profile, model, cluster(nodes, per_node, memory_mb), gbs)
    return cost_model


@pytest.mark.filterwarnings("error")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.sampled_from([SPACE, SPACE, UNIFORM_SPACE]))
def test_all_solvers_find_the_same_optimum(cost_model, space):
    """cpsat, milp, enum and brute force agree on the optimum (or all find nothing fits), on
    uniform and mixed dense / MoE stacks, with both recompute methods and with uniform alone."""
    solvers_agree(cost_model, space)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.sampled_from([SPACE, UNIFORM_SPACE]))
def test_feasibility_is_exact(cost_model, space):
    """is_feasible (for a mixed stack the range-length relaxations first, the exact check only
    where they disagree: solve/mixed_fits.py) holds exactly for the configurations in which brute
    force finds a split that fits, and CostModel.static_overflows for none of them."""
    outers = _outers(cost_model, space)
    feasible = {o for o in outers if is_feasible(cost_model.coefficients(o))}
    assert feasible == {cand.outer for cand in brute_force(cost_model, outers)}
    # the presolve's static-bytes test drops only configurations in which nothing fits
    assert not any(cost_model.static_overflows(o) for o in feasible)


MILP_CHUNK = 16
"""Configurations per MILP in the unpruned checks: one HiGHS model over hundreds of configurations
without an incumbent can run past its time limit (the search hands the MILP a pruned set)."""
UNPRUNED_SPACE = SearchSpace(max_mbs=1, tp=(1, 2), cp=(1,), ep=(1, 2))
"""A smaller space: the unpruned model holds every feasible configuration at once."""
UNIFORM_UNPRUNED_SPACE = SearchSpace(
    max_mbs=1, tp=(1, 2), cp=(1,), ep=(1, 2), recompute=("full",), recompute_methods=("uniform",)
)


@pytest.mark.filterwarnings("error")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.booleans())
def test_unpruned_models_match_brute_force(cost_model, uniform_only):
    """The CP-SAT and MILP models over every feasible configuration (no pruning) reach the
    brute-force optimum, and their solutions' integers are evaluate()'s."""
    space = UNIFORM_UNPRUNED_SPACE if uniform_only else UNPRUNED_SPACE
    outers = [o for o in _outers(cost_model, space) if is_feasible(cost_model.coefficients(o))]
    brute = brute_force(cost_model, outers)
    if not brute:
        return
    coeffs = [cost_model.coefficients(o) for o in outers]
    solved = _solved(coeffs)
    for _, offset, _, outcome in solved:
        strategy = cost_model.split_strategy(
            outers[offset + outcome.index], outcome.split.layers, outcome.split.recompute_num_layers
        )
        assert cost_model.evaluate(strategy).time_ns_x_vpp == outcome.objective_x_v
    assert _best_by_solver(solved) == (brute[0].time_ns, brute[0].time_ns)


@st.composite
def form_instances(draw):
    """A model deep enough for 3+ stages, a cluster of 4 or 8 devices and a restricted layer form."""
    layers = draw(st.integers(4, 11))
    kind = draw(st.sampled_from(["dense", "mixed"]))
    if kind == "mixed":
        model = moe_model(
            num_layers=layers, hidden=256, heads=4, seq=256, experts=4, first_dense=1, layer_freq=2
        )
    else:
        model = dense_model(num_layers=layers, hidden=256, heads=4, seq=256)
    nodes, per_node = draw(st.sampled_from([(1, 4), (1, 8), (2, 4)]))
    memory_mb = draw(st.integers(60, 800))
    profile = synthetic_profile(model, tps=(1, 2), cps=(1,), eps=(1, 2), mbss=(1, 2))
    cost_model = CostModel.from_profile(profile, model, cluster(nodes, per_node, memory_mb), 8)
    return cost_model, draw(st.sampled_from(["first_last", "even"]))


@pytest.mark.filterwarnings("error")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(form_instances())
def test_solvers_agree_within_a_layer_form(instance):
    """Under Megatron-LM's first/last form (or the even one) cpsat, milp, enum and brute force over
    the form's own splits find the same optimum, and every split they return has that form."""
    cost_model, form = instance
    space = SearchSpace(max_mbs=2, tp=(1, 2), cp=(1,), ep=(1, 2), allow_vpp=False, layer_form=form)
    restricted = cost_model.under(replace(cost_model.rules, layer_form=form))
    for solver, result in solvers_agree(cost_model, space, reference=restricted).items():
        for evaluation in result.top:
            layers = evaluation.strategy.stage_layers(cost_model.model.num_layers)
            assert form_allows(layers, form), (solver, layers)
    brute = brute_force(restricted, _outers(restricted, space))
    outers = [o for o in _outers(restricted, space) if is_feasible(restricted.coefficients(o))]
    assert {cand.outer for cand in brute} == set(outers)  # is_feasible is exact within the form
    coeffs = [restricted.coefficients(o) for o in outers]
    if brute and coeffs:
        solved = _solved(coeffs)
        for _, _, _, outcome in solved:
            assert form_allows(outcome.split.layers, form)
        assert _best_by_solver(solved) == (brute[0].time_ns, brute[0].time_ns)


def _solved(coeffs) -> list[tuple]:
    """(solver, offset, part, outcome) of each feasible solve: CP-SAT over every configuration in
    one model, HiGHS in chunks of MILP_CHUNK (the best chunk optimum is the optimum). Each solve
    must prove optimality or infeasibility."""
    runs = [(solve_cpsat, 0, coeffs)] + [
        (solve_milp, j, coeffs[j : j + MILP_CHUNK]) for j in range(0, len(coeffs), MILP_CHUNK)
    ]
    solved = []
    for solve, offset, part in runs:
        outcome = solve(part, time_limit_s=120, workers=1)
        assert outcome.status in ("optimal", "infeasible"), (solve.__name__, outcome.status)
        if outcome.status == "optimal":
            solved.append((solve, offset, part, outcome))
    return solved


def _best_by_solver(solved: list[tuple]) -> tuple[float, float]:
    """(CP-SAT optimum, best HiGHS chunk optimum) of T from `_solved`'s solves."""
    best: dict = {solve_cpsat: [], solve_milp: []}
    for solve, _, part, outcome in solved:
        best[solve].append(outcome.objective_x_v / part[outcome.index].vpp)
    return min(best[solve_cpsat]), min(best[solve_milp])
