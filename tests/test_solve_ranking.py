"""solve/ranking.py: deeper rankings and the picks come from the search's own presolve, and agree
with a fresh search of the deeper, narrower or tighter problem (one pass, issue 20)."""

from __future__ import annotations

import dataclasses

import pytest
from model_support import cluster, dense_model, moe_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.errors import InfeasibleError
from tinker_opt.solve.search import _narrowed_outers, _outers, search
from tinker_opt.solve.space import SearchSpace

SPACE = SearchSpace(max_mbs=2, tp=(1, 2, 4), cp=(1, 2))


def _cost_model(memory_mb: float = 2500, moe: bool = False) -> CostModel:
    model = (
        moe_model(num_layers=8, hidden=512, heads=8, seq=512, experts=4)
        if moe
        else dense_model(num_layers=8, hidden=512, heads=8, seq=512)
    )
    profile = synthetic_profile(model, tps=(1, 2, 4), cps=(1, 2), eps=(1, 2), mbss=(1, 2))
    return CostModel.from_profile(profile, model, cluster(2, 4, memory_mb), 16)


def _times(evaluations) -> list[float]:
    return [e.iteration_time_ms for e in evaluations]


@pytest.mark.parametrize("solver", ["cpsat", "enum"])
def test_deepen_equals_a_deeper_fresh_search(solver):
    """Ranking 12 deep from a 3-deep search gives the times of a fresh 12-deep search."""
    shallow = search(_cost_model(), solver=solver, cpus=1, top_k=3, space=SPACE)
    fresh = search(_cost_model(), solver=solver, cpus=1, top_k=12, space=SPACE)
    deeper = shallow.deepen(12)
    assert _times(deeper.top) == _times(fresh.top)
    assert len(deeper.top) == 12 and deeper.status == shallow.status


@pytest.mark.parametrize("moe", [False, True])
def test_narrowed_pick_equals_a_search_of_the_narrowed_space(moe):
    """No pipeline and a fixed tp: the same optimum as a search restricted to that space."""
    result = search(_cost_model(moe=moe), solver="cpsat", cpus=1, top_k=3, space=SPACE)
    for narrowed in (dataclasses.replace(SPACE, pp=(1,)), dataclasses.replace(SPACE, tp=(2,))):
        fresh = search(_cost_model(moe=moe), solver="cpsat", cpus=1, top_k=1, space=narrowed)
        found = result.best_within(narrowed)
        assert found.iteration_time_ms == fresh.best.iteration_time_ms


def test_headroom_pick_equals_a_search_under_the_lower_limit():
    """A lower memory limit (the same cost model under lowered rules, no second cost model): the
    same optimum as a fresh search on the tighter cluster."""
    result = search(_cost_model(), solver="cpsat", cpus=1, top_k=3, space=SPACE)
    for memory_mb in (2000, 1200):
        fresh = search(_cost_model(memory_mb), solver="cpsat", cpus=1, top_k=1, space=SPACE)
        found = result.best_within(SPACE, memory_mb / 2500)
        assert found.iteration_time_ms == fresh.best.iteration_time_ms
        assert found.peak_memory_mb <= memory_mb


def test_nothing_fits_under_a_tiny_limit():
    """No strategy fits the lower limit: InfeasibleError, as a fresh search raises."""
    result = search(_cost_model(), solver="cpsat", cpus=1, top_k=3, space=SPACE)
    with pytest.raises(InfeasibleError):
        result.best_within(SPACE, 10 / 2500)


def test_narrowed_outers_are_the_narrowed_space_listed_anew():
    """Filtering the search's outers by a narrower layout gives the narrowed space's outers,
    also when the narrowed value lies outside the searched space (listed anew)."""
    cost_model = _cost_model()
    result = search(cost_model, solver="cpsat", cpus=1, top_k=3, space=SPACE)
    for narrowed in (
        dataclasses.replace(SPACE, pp=(1,)),
        dataclasses.replace(SPACE, tp=(4,), pp=(2,)),
        dataclasses.replace(SPACE, tp=(8,)),
        dataclasses.replace(SPACE, allow_vpp=False),
    ):
        assert _narrowed_outers(result.ranking, narrowed) == set(_outers(cost_model, narrowed))
