"""Megatron's full-recompute methods against hand-computed integers on small stacks.

`uniform` (Megatron-LM megatron/core/transformer/transformer_block.py, `_checkpointed_forward`):
each chunk's layers are split into groups of r = recompute_num_layers (the last one shorter), the
input of each group is checkpointed and every layer is recomputed. `block`: the first r layers of
each chunk are checkpointed one by one and recomputed, the rest keep their activations. The
expected values below are written from those rules and the coefficient arrays, not from the code
under test.
"""

from __future__ import annotations

import pytest
from model_support import cluster, dense_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.job import JobOptions
from tinker_opt.errors import StrategyError
from tinker_opt.strategy import Strategy


def _cost_model(num_layers: int, devices: int, gbs: int = 8) -> CostModel:
    model = dense_model(num_layers=num_layers, hidden=512, heads=4, seq=512)
    profile = synthetic_profile(model, tps=(1,), cps=(1,), mbss=(1,))
    return CostModel.from_profile(profile, model, cluster(1, devices, 100_000), gbs)


def _scalars(c):
    """(layer time, recompute, input, kept activations, full activations): ns / bytes."""
    return (
        int(c.layer_time_ns[0]),
        int(c.layer_recompute_ns[0]),
        int(c.layer_input_bytes[0]),
        int(c.layer_act_bytes[0]),
        int(c.work_bytes),
    )


@pytest.fixture(scope="module")
def two_stages():
    """8 layers on 2 pipeline stages (4 + 4), 1F1B."""
    return _cost_model(8, 2)


@pytest.fixture(scope="module")
def interleaved():
    """16 layers on 4 stages with 2 virtual chunks of 2 layers each (rank s: chunks s and s + 4)."""
    return _cost_model(16, 4)


def _full(pp: int, method: str, r: int, **extra) -> Strategy:
    return Strategy(
        pp=pp, mbs=1, recompute="full", recompute_method=method, recompute_num_layers=r, **extra
    )


def test_uniform_groups_of_three_in_four_layers(two_stages):
    """uniform r = 3 over 4 layers: groups [0, 3) and [3, 4): two checkpoints, all 4 recomputed,
    the working set is one group of 3 layers."""
    strategy = _full(2, "uniform", 3)
    c = two_stages.coefficients(strategy)
    a, f, inp, _, work = _scalars(c)
    stages = c.stage_costs((4, 4), 3)
    for s, st in enumerate(stages):
        assert st.recompute_layers == 4
        assert st.time_ns == 4 * a + 4 * f + int(c.stage_time_ns[s])
        assert st.recompute_ns == 4 * f
        assert st.act_bytes_x_v == int(c.stage_inflight_x_v[s]) * (
            2 * inp + int(c.stage_act_bytes[s])
        )
        assert st.other_bytes_x_v == 3 * work
    evaluation = two_stages.evaluate(strategy)
    assert evaluation.time_ns_x_vpp == c.iteration_time_ns_x_v(stages)
    assert evaluation.strategy.recompute_method == "uniform"


def test_block_recomputes_the_first_layers_only(two_stages):
    """block r = 3 over 4 layers: 3 layers recomputed (input kept), 1 keeps its activations, the
    working set is one layer."""
    c = two_stages.coefficients(_full(2, "block", 3))
    a, f, inp, act, work = _scalars(c)
    for s, st in enumerate(c.stage_costs((4, 4), 3)):
        assert st.recompute_layers == 3
        assert st.time_ns == 4 * a + 3 * f + int(c.stage_time_ns[s])
        assert st.act_bytes_x_v == int(c.stage_inflight_x_v[s]) * (
            3 * inp + act + int(c.stage_act_bytes[s])
        )
        assert st.other_bytes_x_v == work


def test_uniform_one_equals_block_over_the_whole_chunk(two_stages):
    """Both checkpoint every layer: same time and memory (Korthikanti et al.'s full recompute)."""
    uniform = two_stages.evaluate(_full(2, "uniform", 1))
    block = two_stages.evaluate(_full(2, "block", 4))
    assert uniform.time_ns_x_vpp == block.time_ns_x_vpp
    assert [s.memory_mb for s in uniform.stages] == [s.memory_mb for s in block.stages]


def test_uniform_trades_checkpoints_for_working_set(two_stages):
    """uniform r = 4: one checkpoint per micro-batch, a 4-layer working set, r = 1's time."""
    c = two_stages.coefficients(_full(2, "uniform", 4))
    _, _, inp, _, work = _scalars(c)
    one, four = c.stage_costs((4, 4), 1), c.stage_costs((4, 4), 4)
    for s in range(2):
        k = int(c.stage_inflight_x_v[s])
        assert one[s].time_ns == four[s].time_ns
        assert one[s].memory_bytes_x_v - four[s].memory_bytes_x_v == k * 3 * inp - 3 * work


def test_uneven_split_groups_per_stage(two_stages):
    """Uneven 1F1B split (5, 3) with uniform r = 2: stage 0 has 3 groups, stage 1 has 2; the
    working set is min(r, layers) layers."""
    c = two_stages.coefficients(_full(2, "uniform", 2, num_layer_list=(5, 3)))
    a, f, inp, _, work = _scalars(c)
    stages = c.stage_costs((5, 3), 2)
    assert [st.act_bytes_x_v for st in stages] == [
        int(c.stage_inflight_x_v[s]) * (groups * inp + int(c.stage_act_bytes[s]))
        for s, groups in ((0, 3), (1, 2))
    ]
    assert [st.time_ns for st in stages] == [
        n * (a + f) + int(c.stage_time_ns[s]) for s, n in ((0, 5), (1, 3))
    ]
    assert [st.other_bytes_x_v for st in stages] == [2 * work, 2 * work]


@pytest.mark.parametrize("r, groups", [(1, 2), (2, 1)])
def test_uniform_per_virtual_chunk(interleaved, r, groups):
    """vpp 2, 2 layers per chunk: uniform groups each chunk separately (Megatron builds one
    TransformerBlock per model chunk), so r = 1 keeps 2 checkpoints per chunk and r = 2 one."""
    strategy = _full(4, "uniform", r, vpp=2)
    c = interleaved.coefficients(strategy)
    a, f, inp, _, work = _scalars(c)
    stages = c.stage_costs((4, 4, 4, 4), r)
    for s, st in enumerate(stages):
        assert st.recompute_layers == 4
        assert st.time_ns == 4 * (a + f) + int(c.stage_time_ns[s])
        assert st.act_bytes_x_v == int(c.stage_inflight_x_v[s]) * (
            2 * groups * inp + int(c.stage_act_bytes[s])
        )
        assert (
            st.other_bytes_x_v == 2 * r * work
        )  # v times the working set of one group of r layers
    assert interleaved.evaluate(strategy).time_ns_x_vpp == c.iteration_time_ns_x_v(stages)


def test_block_per_virtual_chunk(interleaved):
    """vpp 2, block r = 1: the first layer of each chunk is recomputed (2 per rank)."""
    c = interleaved.coefficients(_full(4, "block", 1, vpp=2))
    a, f, inp, act, work = _scalars(c)
    for s, st in enumerate(c.stage_costs((4, 4, 4, 4), 1)):
        assert st.recompute_layers == 2
        assert st.time_ns == 4 * a + 2 * f + int(c.stage_time_ns[s])
        assert st.act_bytes_x_v == int(c.stage_inflight_x_v[s]) * (
            2 * inp + 2 * act + int(c.stage_act_bytes[s])
        )
        assert st.other_bytes_x_v == 2 * work


def test_recompute_count_above_the_chunk_is_refused(interleaved):
    with pytest.raises(StrategyError, match="recompute_num_layers"):
        interleaved.evaluate(_full(4, "uniform", 3, vpp=2))


def test_activation_function_recompute_saves_the_mlp_activation():
    """MindSpeed's --recompute-activation-function: a kept layer drops tokens * ffn/tp * bpe (the
    activation output) and re-runs SwiGLU (read 2 ffn/tp, write ffn/tp at the HBM bandwidth); a
    fully recomputed layer is unchanged (MindSpeed skips it there)."""
    model = dense_model(num_layers=4, hidden=512, heads=4, seq=512)
    profile = synthetic_profile(model, tps=(1,), cps=(1,), mbss=(1,))
    plain, recomputing = (
        CostModel.from_profile(
            profile, model, cluster(1, 1, 100_000), 8, job=JobOptions(recompute_activation=on)
        )
        for on in (False, True)
    )
    saved = 512 * model.ffn_hidden_size * 2
    extra_ns = round(3 * saved / 1600e3 * 1000)  # default HBM bandwidth 1600 GB/s
    kept = Strategy(mbs=1)
    a, b = plain.coefficients(kept), recomputing.coefficients(kept)
    assert int(a.layer_act_bytes[0]) - int(b.layer_act_bytes[0]) == saved
    assert int(b.layer_time_ns[0]) - int(a.layer_time_ns[0]) == pytest.approx(extra_ns, abs=1)
    full = _full(1, "block", 2)
    a, b = plain.coefficients(full), recomputing.coefficients(full)
    both = lambda c: int(c.layer_time_ns[0]) + int(c.layer_recompute_ns[0])
    assert both(b) == pytest.approx(both(a), abs=1)
    assert (
        recomputing.evaluate(full).peak_memory_mb < plain.evaluate(full).peak_memory_mb
    )  # 2 kept layers


def test_uniform_only_search_that_fits_nothing_explains_itself():
    """The infeasibility hint prices uniform with one layer per group."""
    from tinker_opt.errors import InfeasibleError
    from tinker_opt.solve.search import search
    from tinker_opt.solve.space import SearchSpace

    model = dense_model(num_layers=4, hidden=512, heads=4, seq=512)
    profile = synthetic_profile(model, tps=(1,), cps=(1,), mbss=(1,))
    cost_model = CostModel.from_profile(profile, model, cluster(1, 2, 20), 8)
    space = SearchSpace(max_mbs=1, recompute=("full",), recompute_methods=("uniform",))
    with pytest.raises(InfeasibleError, match=r"needs at least \d+ MB"):
        search(cost_model, solver="cpsat", cpus=1, top_k=1, space=space)
