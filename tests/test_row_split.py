"""Splits chosen among listed rows (solve/row_split.py): a mixed stack under Megatron-LM's
first/last form (or the even one) gets brute force's optimum and feasibility configuration by
configuration, `uniform`'s every-count memory check is row_tables' at each count, and a search in
which nothing fits says so in one line with uneven virtual stages in the space."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_support import cluster, dense_model, moe_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.errors import InfeasibleError
from tinker_opt.solve.bounds import is_feasible
from tinker_opt.solve.enumerate import brute_force
from tinker_opt.solve.form_split import form_splits
from tinker_opt.solve.row_split import (
    BIG,
    _first_fits,
    best_row,
    row_objective,
    row_tables,
    uniform_fits,
    uniform_memory,
)
from tinker_opt.solve.search import _outers, search
from tinker_opt.solve.space import SearchSpace
from tinker_opt.solve.stacks import MixedStack, best_split, stack_of
from tinker_opt.solve.virtual_split import virtual_rows

SPACE = SearchSpace(max_mbs=2, tp=(1,), cp=(1,), ep=(1, 2), allow_vpp=False)


@st.composite
def form_instances(draw):
    """A mixed 5-10 layer stack (dense first layers, MoE after) on 4 or 8 devices, memory
    often tight, under the first/last or the even form."""
    layers = draw(st.integers(5, 10))
    model = moe_model(
        num_layers=layers,
        hidden=256,
        heads=4,
        seq=256,
        experts=4,
        first_dense=draw(st.sampled_from([1, 2])),
    )
    devices = draw(st.sampled_from([4, 8]))
    memory_mb = draw(st.integers(60, 900))
    profile = synthetic_profile(model, tps=(1,), cps=(1,), eps=(1, 2), mbss=(1, 2))
    cost_model = CostModel.from_profile(profile, model, cluster(1, devices, memory_mb), 8)
    form = draw(st.sampled_from(["first_last", "even"]))
    return cost_model.under(dataclasses.replace(cost_model.rules, layer_form=form))


@pytest.mark.filterwarnings("error")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(form_instances())
def test_form_split_of_a_mixed_stack_is_brute_force(cost_model):
    """Every configuration (block, uniform, selective, none): the rows' split has brute force's
    objective over the form's splits and every recompute count, and feasibility agrees."""
    seen = 0
    for outer in _outers(cost_model, SPACE):
        c = cost_model.coefficients(outer)
        if not isinstance(stack_of(c), MixedStack) or outer.pp < 3:
            continue
        seen += 1
        found = best_split(c)
        brute = brute_force(cost_model, [outer])
        assert is_feasible(c) == bool(brute) == (found is not None), outer.label()
        if found is not None:
            assert found.time_ns_x_v == brute[0].split.time_ns_x_v, outer.label()
            stages = c.stage_costs(found.layers, found.recompute_num_layers)
            assert c.iteration_time_ns_x_v(stages) == found.time_ns_x_v
    assert seen  # pp 4 over 4 or 8 devices is always in the space


@st.composite
def dense_or_mixed(draw):
    """form_instances, or the same on a dense model (every layer the same: many rows tie)."""
    if draw(st.booleans()):
        return draw(form_instances())
    model = dense_model(num_layers=draw(st.integers(5, 10)), hidden=256, heads=4, seq=256)
    profile = synthetic_profile(model, tps=(1,), cps=(1,), mbss=(1, 2))
    memory_mb = draw(st.integers(60, 900))
    cost_model = CostModel.from_profile(profile, model, cluster(1, 8, memory_mb), 8)
    return cost_model.under(dataclasses.replace(cost_model.rules, layer_form="first_last"))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dense_or_mixed())
def test_best_row_is_the_least_of_every_row(cost_model):
    """best_row (rows visited by bound, in batches of 3, cut off by the bounds) returns the
    least (v*T, r, row index) over every row at its smallest fitting count, for the form's rows
    and the virtual family alike (its tie rule, which the DeepSeek-V3 search meets: equal times
    from lists that move a layer between the first and the last stage)."""
    cost_model = cost_model.under(dataclasses.replace(cost_model.rules, uneven_vpp=True))
    space = dataclasses.replace(SPACE, ep=None, allow_vpp=True, uneven_vpp=True)
    for outer in _outers(cost_model, space):
        c = cost_model.coefficients(outer)
        if outer.vpp > 1:
            rows = virtual_rows(c.num_layers, c.num_stages, c.vpp)
        elif outer.pp >= 3:
            rows = form_splits(c.num_layers, c.num_stages, "first_last")
        else:
            continue
        if len(rows) == 0:
            continue
        values, counts = _first_fits(c, rows)
        fitting = [
            (int(v), int(r), i)
            for i, (v, r) in enumerate(zip(values, counts, strict=True))
            if v < BIG
        ]
        assert best_row(c, rows, batch=3) == (min(fitting) if fitting else None), outer.label()


UNIFORM = SearchSpace(
    max_mbs=2, tp=(1,), cp=(1,), ep=(1, 2), uneven_vpp=True, recompute=("full",),
    recompute_methods=("uniform",),
)  # fmt: skip


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(form_instances())
def test_uniform_fits_is_row_tables_at_every_count(cost_model):
    """uniform_memory at each count r is row_tables' memory at r (and uniform_fits its fit),
    for the form's per-stage rows and for the virtual-stage family."""
    cost_model = cost_model.under(dataclasses.replace(cost_model.rules, uneven_vpp=True))
    for outer in _outers(cost_model, UNIFORM):
        c = cost_model.coefficients(outer)
        if outer.vpp > 1:
            rows = virtual_rows(c.num_layers, c.num_stages, c.vpp)
        elif outer.pp >= 3:
            rows = form_splits(c.num_layers, c.num_stages, "first_last")
        else:
            continue
        if len(rows) == 0:
            continue
        counts = range(1, int(rows.max()) + 1)
        memory = np.stack([row_tables(c, rows, r)[2] for r in counts], axis=1)
        fits = np.stack([row_objective(c, rows, r)[1] for r in counts], axis=1)
        assert (uniform_memory(c, rows, np.array(counts)) == memory).all(), outer.label()
        assert (uniform_fits(c, rows, np.array(counts)) == fits).all(), outer.label()


def test_nothing_fits_with_uneven_virtual_stages_is_one_line():
    """61 layers (no pp x vpp divides them) over pp 8 x vpp 4 on 64 devices and a memory limit
    nothing meets: the search raises InfeasibleError naming the least need (a list of the
    uneven family), not a StrategyError of an even split that does not exist."""
    model = moe_model(
        num_layers=61, hidden=2048, heads=16, seq=4096, experts=16, first_dense=3, vocab=129280
    )
    profile = synthetic_profile(model, tps=(1,), cps=(1,), eps=(8,), mbss=(1,))
    cost_model = CostModel.from_profile(profile, model, cluster(8, 8, 100), 64)
    space = SearchSpace(
        max_mbs=1, tp=(1,), cp=(1,), ep=(8,), pp=(8,), vpp=(4,), layer_form="first_last",
        uneven_vpp=True,
    )  # fmt: skip
    with pytest.raises(InfeasibleError, match="no strategy fits in 100 MB per device") as info:
        search(cost_model, solver="cpsat", cpus=1, space=space)
    assert "\n" not in str(info.value)
