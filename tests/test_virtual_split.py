"""Uneven splits with virtual stages (solve/virtual_split.py): the vectorised tables are
stage_costs' integers, the exact split is brute force's, and cpsat = milp = enum = brute force
with the uneven lists in the space."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_support import cluster, dense_model, moe_model, solvers_agree, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.expressible import expressible_strategy, search_space_for
from tinker_opt.script import versions
from tinker_opt.script.reader import read_script, read_script_text
from tinker_opt.solve.enumerate import brute_force
from tinker_opt.solve.row_split import row_tables
from tinker_opt.solve.search import _outers, search
from tinker_opt.solve.space import SearchSpace
from tinker_opt.solve.stacks import best_split
from tinker_opt.solve.virtual_split import in_family, virtual_rows
from tinker_opt.strategy import Strategy

GPT3 = Path(__file__).parent / "fixtures" / "scripts" / "train_gpt3_175b_distributed.sh"

UNEVEN = SearchSpace(max_mbs=2, tp=(1,), cp=(1,), ep=(1, 2), pp=(3,), uneven_vpp=True)
"""pp 3 (the interleaved schedule needs pp > 2) with every vpp up to layers / 3."""


def _uneven(cost_model: CostModel) -> CostModel:
    """The cost model under Megatron-LM's rules with uneven virtual stages (split_rules.py)."""
    rules = dataclasses.replace(cost_model.rules, layer_form="first_last", uneven_vpp=True)
    return cost_model.under(rules)


@st.composite
def instances(draw):
    """A 6-9 layer model on 3 or 6 devices, dense, MoE or mixed, memory often tight."""
    layers = draw(st.integers(6, 9))
    kind = draw(st.sampled_from(["dense", "moe", "mixed"]))
    if kind == "dense":
        model = dense_model(num_layers=layers, hidden=256, heads=4, seq=256)
    else:
        first = draw(st.sampled_from([1, 2])) if kind == "mixed" else 0
        model = moe_model(
            num_layers=layers, hidden=256, heads=4, seq=256, experts=4, first_dense=first
        )
    devices = draw(st.sampled_from([3, 6]))
    memory_mb = draw(st.integers(60, 1200))
    profile = synthetic_profile(model, tps=(1,), cps=(1,), eps=(1, 2), mbss=(1, 2))
    cost_model = CostModel.from_profile(profile, model, cluster(1, devices, memory_mb), 12)
    return _uneven(cost_model)


def test_rows_are_the_family():
    """Every row sums to the layers, keeps its middle virtual stages equal and at least 1, and
    the even split is among them when p v divides L."""
    rows = virtual_rows(12, 3, 2)
    assert all(in_family(tuple(row)) and row.sum() == 12 for row in rows)
    assert [2] * 6 in rows.tolist()
    assert len({tuple(row) for row in rows}) == len(rows)
    # 61 layers (DeepSeek-V3) over pp 8 x vpp 4: 30 middle stages of 2, n_f + n_l = 1, or of 1
    assert sorted(map(tuple, virtual_rows(61, 8, 4)[:, [0, -1]].tolist()))[-2:] == [
        (30, 1),
        (31, 0),
    ]


@pytest.mark.filterwarnings("error")
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_tables_are_stage_costs(cost_model):
    """row_tables gives stage_costs' time, tail and memory of every rank for every row."""
    for outer in _outers(cost_model, UNEVEN):
        if outer.vpp == 1:
            continue
        c = cost_model.coefficients(outer)
        rows = virtual_rows(c.num_layers, c.num_stages, c.vpp)
        for r in (0,) if outer.recompute != "full" else (1, 2):
            time, tail, memory = row_tables(c, rows, r)
            for i in range(0, len(rows), 3):
                chunks = tuple(int(n) for n in rows[i])
                layers = tuple(sum(chunks[s :: c.num_stages]) for s in range(c.num_stages))
                stages = c.stage_costs(layers, r, chunks)
                assert [st.time_ns for st in stages] == time[i].tolist()
                assert [st.tail_ns for st in stages] == tail[i].tolist()
                assert [st.memory_bytes_x_v for st in stages] == memory[i].tolist()


@pytest.mark.filterwarnings("error")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_split_is_brute_force(cost_model):
    """The exact split of every vpp configuration has brute force's objective (every list of the
    family, every recompute count, through stage_costs)."""
    for outer in _outers(cost_model, UNEVEN):
        if outer.vpp == 1:
            continue
        found = best_split(cost_model.coefficients(outer))
        brute = brute_force(cost_model, [outer])
        assert (found is None) == (not brute), outer.label()
        if found is not None:
            assert found.time_ns_x_v == brute[0].split.time_ns_x_v, outer.label()


@pytest.mark.filterwarnings("error")
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_solvers_agree_with_uneven_virtual_stages(cost_model):
    """cpsat, milp and enum find brute force's optimum with the uneven lists in the space, and
    the returned strategies re-evaluate to their objectives."""
    solvers_agree(cost_model, UNEVEN)


def test_uneven_list_wins_where_no_even_one_exists():
    """7 layers over pp 3 x vpp 2 have no even split: without uneven virtual stages that
    configuration has no split, with them it has one, a per-virtual-stage list whose strategy
    evaluates to the split's objective."""
    model = moe_model(num_layers=7, hidden=256, heads=4, seq=256, experts=4, first_dense=1)
    profile = synthetic_profile(model, tps=(1,), cps=(1,), eps=(1, 2), mbss=(1, 2))
    cost_model = CostModel.from_profile(profile, model, cluster(1, 6, 400), 12)
    uneven = _uneven(cost_model)
    outer = next(o for o in _outers(uneven, UNEVEN) if o.vpp == 2)
    assert best_split(cost_model.coefficients(outer)) is None  # no even split of 7 over 6
    split = best_split(uneven.coefficients(outer))
    assert split is not None and split.chunks is not None and sum(split.chunks) == 7
    strategy = uneven.split_strategy(outer, split.layers, split.recompute_num_layers, split.chunks)
    assert strategy.per_virtual_stage
    assert uneven.evaluate(strategy).time_ns_x_vpp == split.time_ns_x_v


def _deepseek_like():
    """61 layers, the first 3 dense (DeepSeek-V3's layer count, which no pp x vpp divides),
    pp 8 over 64 devices with 8 micro-batches: the 1F1B bubble is (p - 1) / m = 7/8."""
    model = moe_model(
        num_layers=61, hidden=2048, heads=16, seq=4096, experts=16, first_dense=3, vocab=129280
    )
    profile = synthetic_profile(model, tps=(1,), cps=(1,), eps=(8,), mbss=(1,))
    return CostModel.from_profile(profile, model, cluster(8, 8, 60000), 64)


def test_deepseek_like_model_picks_uneven_virtual_stages():
    """With uneven virtual stages in the space every solver picks an interleaved schedule with a
    per-virtual-stage list (lighter first and last virtual stages, as Megatron's DeepSeek-V3
    layout does), faster than the best first/last split without virtual stages; all agree."""
    cost_model = _deepseek_like()
    objectives = {}
    for uneven in (False, True):
        space = SearchSpace(
            max_mbs=1, tp=(1,), cp=(1,), ep=(8,), pp=(8,), recompute=("none",),
            layer_form="first_last", uneven_vpp=uneven,
        )  # fmt: skip
        for solver in ("cpsat", "milp", "enum"):
            result = search(cost_model, solver=solver, cpus=1, space=space, time_limit_s=60)
            best = result.top[0].strategy
            objectives.setdefault(uneven, set()).add(result.top[0].time_ns_x_vpp // best.vpp)
            assert result.status == "optimal"
            assert (best.vpp > 1 and best.per_virtual_stage) == uneven, best.label()
    assert len(objectives[False]) == len(objectives[True]) == 1
    assert max(objectives[True]) < 0.8 * max(objectives[False])


def test_uneven_virtual_list_is_written_as_a_megatron_layout(tmp_path):
    """The DeepSeek-like split on a 61-layer Megatron-LM script: written as
    --pipeline-model-parallel-layout and read back as the same list and vpp."""
    path = tmp_path / "train.sh"
    path.write_text(GPT3.read_text().replace("--num-layers 96", "--num-layers 61"))
    info = read_script(path)
    vr = versions.resolve(None, info.text, info.train.framework.flavour)
    assert search_space_for(info, vr).uneven_vpp
    chunks = (1,) + (2,) * 30 + (0,)
    strategy = Strategy(tp=8, pp=8, dp=8, vpp=4, mbs=1, sp=True, num_layer_list=chunks)
    written = expressible_strategy(strategy, info, vr, world=512)
    text = apply_strategy(info.text, written, nnodes=64, nproc_per_node=8).text
    assert "--pipeline-model-parallel-layout" in text
    again = read_script_text(text).train.strategy
    assert (again.vpp, again.num_layer_list) == (4, chunks)


def test_mindspeed_never_searches_uneven_virtual_stages():
    """MindSpeed-LLM refuses --num-layer-list with a virtual pipeline: no uneven vpp there."""
    info = read_script(GPT3.parent / "pretrain_deepseek3_671b_4k_ptd.sh")
    vr = versions.resolve(None, info.text, info.train.framework.flavour)
    assert not search_space_for(info, vr).uneven_vpp
