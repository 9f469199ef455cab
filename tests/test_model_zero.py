"""ZeRO stages: the Strategy knob, memory per stage against hand-computed bytes, the collectives'
effect on time, and solver agreement with zero in the space."""

from __future__ import annotations

import json

import pytest
from cli_support import assert_one_line_error, invoke_cli, write_synthetic_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_support import cluster, dense_model, moe_model, solvers_agree, synthetic_profile
from script_support import FIXTURES

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.job import JobOptions
from tinker_opt.costs.zero_terms import PREFETCH_UNITS
from tinker_opt.errors import InfeasibleError, StrategyError
from tinker_opt.solve.search import search
from tinker_opt.solve.space import SearchSpace
from tinker_opt.strategy import Strategy

LAYERS, HIDDEN, DEVICES = 4, 512, 4


def test_dist_opt_is_read_only_and_follows_zero():
    """The distributed optimizer is zero >= 1, a property: no constructor argument, no second field."""
    assert [Strategy(zero=z).dist_opt for z in (0, 1, 2, 3)] == [False, True, True, True]
    assert "z3" in Strategy(tp=2, dp=2, zero=3).label() and "do" in Strategy(zero=1).label()
    with pytest.raises(TypeError):
        Strategy(**{"dist_opt": True})
    with pytest.raises(StrategyError, match="zero"):
        Strategy(zero=4)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_from_dict_round_trips_every_zero_stage(zero):
    """to_dict -> from_dict keeps the stage; one field per fact: `zero`, no `dist_opt` key."""
    s = Strategy(tp=2, dp=2, zero=zero)
    data = s.to_dict()
    assert data["zero"] == zero and "dist_opt" not in data
    assert Strategy.from_dict(data) == s
    assert Strategy.from_dict({"zero": zero}).zero == zero  # no `dist_opt` key: zero alone decides


def test_old_dist_opt_files_load_and_contradictions_name_both():
    """`dist_opt: true` without `zero` is stage 1, false is 0; a disagreement is one error with both."""
    assert Strategy.from_dict({"tp": 1, "dist_opt": True}).zero == 1
    assert Strategy.from_dict({"tp": 1, "dist_opt": False}).zero == 0
    assert Strategy.from_dict({"dist_opt": True, "zero": 3}).zero == 3
    for data in ({"dist_opt": True, "zero": 0}, {"dist_opt": False, "zero": 2}):
        with pytest.raises(StrategyError, match=r"dist_opt (true|false) contradicts zero [02]"):
            Strategy.from_dict(data)


@pytest.fixture(scope="module")
def dense_costs():
    model = dense_model(num_layers=LAYERS, hidden=HIDDEN, heads=8, seq=512, vocab=4096)
    profile = synthetic_profile(model, tps=(1, 2), cps=(1,), eps=(1,), mbss=(1,))
    return CostModel.from_profile(profile, model, cluster(1, DEVICES, 60000), 8)


def _stage(costs, zero: int):
    return costs.evaluate(Strategy(tp=1, pp=1, dp=DEVICES, zero=zero)).stages[0]


def test_zero_memory_per_stage_matches_hand_computed(dense_costs):
    """Per parameter: 2 B weight + 4 B grad + 12 B states; stage 1 shards the 12 B over dp, 2 also
    the 4 B, 3 also the 2 B; stages 2/3 add one unit's full grads (4 B) and stage 3 the gathered
    weights of 1 + PREFETCH_UNITS units (2 B each), the largest unit sizing both."""
    block = dense_costs.blocks
    layer = block.cost("layer", tp=1, sp=False, cp=1, ep=1, etp=1, mbs=1).param_count
    emb = block.cost("embedding", tp=1, sp=False, cp=1, ep=1, etp=1, mbs=1).param_count
    head = block.cost("head", tp=1, sp=False, cp=1, ep=1, etp=1, mbs=1).param_count
    norm = block.cost("final_norm", tp=1, sp=False, cp=1, ep=1, etp=1, mbs=1).param_count
    total = LAYERS * layer + emb + head + norm  # untied embeddings: pp = 1 holds both
    unit = max(layer, emb, head + norm)
    n = DEVICES
    expected_static = {
        0: total * (2 + 4 + 12),
        1: total * (2 + 4) + total * 12 / n,
        2: total * 2 + total * (4 + 12) / n,
        3: total * (2 + 4 + 12) / n,
    }
    expected_gathered = {0: 0, 1: 0, 2: 4 * unit, 3: 4 * unit + (1 + PREFETCH_UNITS) * 2 * unit}
    base_transient = _stage(dense_costs, 0).transient_mb * 2**20
    for zero in (0, 1, 2, 3):
        stage = _stage(dense_costs, zero)
        static = (stage.weights_mb + stage.gradients_mb + stage.optimizer_mb) * 2**20
        assert static == pytest.approx(expected_static[zero], abs=8 * (LAYERS + 3)), (
            zero
        )  # per-unit rounding
        gathered = stage.transient_mb * 2**20 - base_transient
        assert gathered == pytest.approx(expected_gathered[zero], abs=1), zero


def test_zero3_traffic_costs_time_when_compute_cannot_hide_it(dense_costs):
    """Stage 3 all-gathers every unit twice per micro-batch; its exposed part never makes it faster
    than stage 1 here (tiny layers: the gathers outlast the compute)."""
    t1 = dense_costs.evaluate(Strategy(tp=1, dp=DEVICES, zero=1)).iteration_time_ms
    t3 = dense_costs.evaluate(Strategy(tp=1, dp=DEVICES, zero=3)).iteration_time_ms
    assert t3 > t1


def test_full_recompute_forward_hides_zero3_traffic(dense_costs):
    """The rerun forward of a fully recomputed layer runs inside its backward, so the prefetched
    gather and the reduce-scatter overlap it too: recompute costs less under stage 3 (traffic
    exposed here) than under stage 1 (nothing to hide)."""

    def extra(zero: int) -> float:
        base = Strategy(tp=1, dp=DEVICES, zero=zero)
        full = Strategy(
            tp=1,
            dp=DEVICES,
            zero=zero,
            recompute="full",
            recompute_method="uniform",
            recompute_num_layers=1,
        )
        return (
            dense_costs.evaluate(full).iteration_time_ms
            - dense_costs.evaluate(base).iteration_time_ms
        )

    assert extra(3) < extra(1)


SPACE = SearchSpace(max_mbs=2, tp=(1, 2), cp=(1,), ep=(1, 2), zero_levels=(0, 1, 2, 3))


@st.composite
def zero_instances(draw):
    """Small models and clusters with memory limits tight enough that the ZeRO stage matters."""
    layers = draw(st.integers(2, 6))
    model = (
        moe_model(num_layers=layers, hidden=256, heads=4, seq=256, experts=4, vocab=4096)
        if draw(st.booleans())
        else dense_model(num_layers=layers, hidden=256, heads=4, seq=256, vocab=4096)
    )
    nodes, per_node = draw(st.sampled_from([(1, 2), (1, 4), (2, 2), (1, 8)]))
    profile = synthetic_profile(model, tps=(1, 2), cps=(1,), eps=(1, 2), mbss=(1, 2))
    recompute_all = draw(st.booleans())
    return CostModel.from_profile(
        profile,
        model,
        cluster(nodes, per_node, draw(st.integers(20, 400))),
        draw(st.sampled_from([8, 16])),
        job=JobOptions(recompute_all=recompute_all),
    )


@pytest.mark.filterwarnings("error")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(zero_instances())
def test_solvers_agree_with_zero_in_the_space(cost_model):
    """cpsat = milp = enum = brute force with every ZeRO stage searched (and FSDP2's all-or-none
    recompute when drawn); every returned strategy re-evaluates to the reported objective."""
    for result in solvers_agree(cost_model, SPACE).values():
        for evaluation in result.top:
            s = evaluation.strategy
            if cost_model.job.recompute_all and s.recompute == "full":
                # Every layer of each chunk: Megatron's block count is per virtual stage.
                assert s.recompute_num_layers == max(s.chunk_layers(cost_model.model.num_layers))


def test_sharding_makes_a_tight_limit_feasible():
    """Under a limit only ZeRO-3 meets, the search with stages 0..3 finds a zero-3 strategy and the
    default space (0, 1) finds nothing."""
    model = dense_model(num_layers=4, hidden=512, heads=8, seq=256, vocab=4096)
    profile = synthetic_profile(model, tps=(1,), cps=(1,), eps=(1,), mbss=(1,))
    probe = CostModel.from_profile(profile, model, cluster(1, 8, 1e6), 8)
    need = {z: probe.evaluate(Strategy(dp=8, zero=z)).peak_memory_mb for z in (1, 3)}
    assert need[3] < need[1]
    limit = (need[1] + need[3]) / 2
    costs = CostModel.from_profile(profile, model, cluster(1, 8, limit), 8)
    space = SearchSpace(max_mbs=1, tp=(1,), pp=(1,), cp=(1,), recompute=("none",))
    with pytest.raises(InfeasibleError):
        search(costs, solver="cpsat", cpus=1, space=space)
    best = search(
        costs,
        solver="cpsat",
        cpus=1,
        space=SearchSpace(
            max_mbs=1, tp=(1,), pp=(1,), cp=(1,), recompute=("none",), zero_levels=(0, 1, 2, 3)
        ),
    ).best
    assert best.strategy.zero >= 2


def test_simulate_takes_every_zero_stage_and_refuses_a_contradiction(tmp_path):
    """`simulate --zero 0..3` prices each stage (memory falls with the stage); `--dist-opt 0
    --zero 2` is one line naming both values."""
    folder = write_synthetic_profile(tmp_path / "prof")
    base = ("simulate", "--profiled-data-path", str(folder), "--global-batch-size", "16")
    base += ("--num-nodes", "1", "--num-npus-per-node", "8", "--json")
    peaks = []
    for zero in range(4):
        result = invoke_cli(*base, "--zero", str(zero))
        assert result.returncode == 0, result.stderr
        evaluation = json.loads(result.stdout)
        assert evaluation["strategy"]["zero"] == zero
        assert "dist_opt" not in evaluation["strategy"]
        peaks.append(evaluation["peak_memory_mb"])
    assert peaks == sorted(peaks, reverse=True) and peaks[3] < peaks[0]
    assert_one_line_error(
        invoke_cli(*base, "--dist-opt", "0", "--zero", "2"), "dist_opt false", "zero 2"
    )
    assert_one_line_error(invoke_cli(*base, "--zero", "4"), "zero", "0, 1, 2 or 3")


def test_an_edited_inspect_json_round_trips_through_apply(tmp_path):
    """`inspect --json` carries `zero` and no `dist_opt`; turning the distributed optimizer on by
    editing `zero` and handing the whole JSON to `apply` writes it, and `inspect` reads it back."""
    script = FIXTURES / "pretrain_mixtral_8x7b_ptd.sh"
    printed = json.loads(invoke_cli("inspect", str(script), "--json").stdout)
    assert printed["strategy"]["zero"] == 0 and "dist_opt" not in printed["strategy"]
    printed["strategy"]["zero"] = 1
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(printed))
    out = tmp_path / "tuned.sh"
    result = invoke_cli("apply", str(script), str(edited), "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert "--use-distributed-optimizer" in out.read_text()
    again = json.loads(invoke_cli("inspect", str(out), "--json").stdout)
    changed = {k for k, v in again["strategy"].items() if v != printed["strategy"][k]}
    # Only knobs that exist with the distributed optimizer alone appear (None before, off now).
    assert changed == {"overlap_param_gather", "overlap_param_gather_with_optimizer_step"}
    assert all(printed["strategy"][k] is None and again["strategy"][k] is False for k in changed)
