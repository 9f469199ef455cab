"""Choices beside the ranking (tinker_opt/solve/picks.py): the script's own strategy, folding,
the Pareto front and the named picks."""

import dataclasses

import pytest
from cli_support import EXAMPLE
from model_support import cluster, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.errors import ConfigError, InfeasibleError, TinkerError
from tinker_opt.script.reader import read_script
from tinker_opt.solve.picks import (
    comparison_sentence,
    computing_layer_strategy,
    current_evaluation,
    current_note,
    find_picks,
    fold_near_copies,
    layout,
    pareto_front,
    pick_rules,
    speedup,
)
from tinker_opt.solve.space import SearchSpace
from tinker_opt.strategy import Strategy


def _ev(time_ms: float, memory_mb: float, **knobs) -> dict:
    strategy = Strategy(**{"tp": 2, "pp": 2, "dp": 2, **knobs})
    return {
        "strategy": strategy.to_dict(),
        "iteration_time_ms": time_ms,
        "peak_memory_mb": memory_mb,
        "tokens_per_s_per_device": 1.0,
        "stages": [{"stage": 0, "layers": 4}, {"stage": 1, "layers": 4}],
    }


def test_fold_removes_slower_no_lighter_copies_of_the_same_layout():
    ranked = [
        _ev(10, 100),
        _ev(11, 100, recompute="selective"),
        _ev(12, 99.5, mbs=2),
        _ev(13, 80, recompute="selective", mbs=2),
        _ev(14, 120, tp=4, dp=1),
    ]
    kept, folded = fold_near_copies(ranked)
    assert folded == 2
    assert [e["iteration_time_ms"] for e in kept] == [10, 13, 14]
    # No kept row is dominated by a higher-ranked one of the same layout.
    for i, lower in enumerate(kept):
        for higher in kept[:i]:
            assert not (
                layout(higher) == layout(lower)
                and lower["peak_memory_mb"] >= higher["peak_memory_mb"]
            )


def test_pareto_front_keeps_only_undominated():
    evs = [_ev(10, 300), _ev(12, 200), _ev(11, 350), _ev(15, 200), _ev(20, 100)]
    front = pareto_front(evs)
    assert [(e["iteration_time_ms"], e["peak_memory_mb"]) for e in front] == [
        (10, 300),
        (12, 200),
        (20, 100),
    ]


def test_speedup_needs_an_evaluated_current():
    assert speedup(_ev(10, 1), _ev(25, 1)) == pytest.approx(2.5)
    assert speedup(_ev(10, 1), {"error": "x"}) is None and speedup(_ev(10, 1), None) is None


def test_noop_layers_leave_the_layer_list():
    """The script's list counts noop layers; the cost model counts computing layers only."""
    s = Strategy(tp=1, pp=2, dp=4, num_layer_list=(5, 5))
    assert computing_layer_strategy(s, (8, 9), 10).num_layer_list == (5, 3)
    assert (
        computing_layer_strategy(s.replace(num_layer_list=(4, 6)), (8, 9), 10).num_layer_list
        is None
    )
    assert computing_layer_strategy(s, (), 10) is s


@pytest.fixture(scope="module")
def example():
    info = read_script(EXAMPLE)
    profiled = synthetic_profile(info.model, tps=(1, 2, 4), cps=(1,), eps=(1,), mbss=(1, 2, 4))
    return info, profiled


def _cost_model(example, memory_mb=60000, nodes=2):
    info, profiled = example
    return CostModel.from_profile(profiled, info.model, cluster(nodes, 8, memory_mb), 64)


def test_current_is_the_scripts_strategy_under_the_same_model(example):
    info, _ = example
    model = _cost_model(example)
    current = current_evaluation(model, info)
    assert current == model.evaluate(info.train.strategy).to_dict()
    assert (current["strategy"]["tp"], current["strategy"]["pp"], current["strategy"]["sp"]) == (
        2,
        2,
        True,
    )


@pytest.mark.parametrize(
    "strategy",
    [
        Strategy(
            tp=2,
            pp=2,
            dp=4,
            sp=True,
            recompute="full",
            recompute_method="uniform",
            recompute_num_layers=1,
        ),
        Strategy(tp=2, pp=2, dp=4, sp=True, mbs=3),
    ],
)
def test_current_error_names_the_rule(example, strategy):
    """A strategy the cost model refuses is recorded with the model's own message (uniform
    recompute: until the cost model has it), one it accepts as its Evaluation."""
    info, _ = example
    other = dataclasses.replace(info, train=dataclasses.replace(info.train, strategy=strategy))
    model = _cost_model(example)
    current = current_evaluation(model, other)
    try:
        expected = model.evaluate(strategy).to_dict()
    except TinkerError as exc:
        assert (
            current["error"] == " ".join(str(exc).split())
            and current["strategy"] == strategy.to_dict()
        )
    else:
        assert current == expected
    if strategy.mbs == 3:
        assert "global_batch_size (64) must be a multiple" in current["error"]


def test_current_error_on_other_cluster_and_on_memory(example):
    info, _ = example
    assert "16 devices" in current_evaluation(_cost_model(example, nodes=1), info)["error"]
    tight = current_evaluation(_cost_model(example, memory_mb=50), info)
    assert tight["fits"] is False and "error" not in tight
    worst = max(st["memory_mb"] for st in tight["stages"])
    assert tight["over_by_mb"] == pytest.approx(worst - 50)
    assert "MB more than the 50 MB limit" in current_note(tight)
    best = dict(tight, iteration_time_ms=tight["iteration_time_ms"] / 2)
    assert speedup(best, tight) == pytest.approx(2.0)
    assert "modelled not to fit" in comparison_sentence(best, tight)
    assert current_note(current_evaluation(_cost_model(example), info)) is None


def test_picks_come_from_the_ranking_or_a_restricted_search():
    ranked = [_ev(10, 390, pp=2), _ev(11, 300, pp=1, tp=4), _ev(12, 200, pp=4, dp=1)]
    calls = []

    def restricted(space, fraction):
        calls.append((space.pp, space.tp, fraction))
        if space.tp == (8,):
            raise InfeasibleError("nothing fits")
        return _ev(30, 100 * fraction)

    rules = pick_rules(400, headroom_pct=10, checkpoint=Strategy(tp=8, pp=1, dp=1))
    picks, missing = find_picks(ranked, rules, SearchSpace(), restricted)
    assert picks["fastest"] is ranked[0]
    assert picks["no_pipeline"] is ranked[1]  # a layout rule: answered by the exact top-k
    # Headroom depends on the split: the best does not qualify, so a search under 90 % of the limit runs.
    assert picks["headroom"]["peak_memory_mb"] == pytest.approx(90)
    assert calls == [((1,), (8,), 1.0), (None, None, 0.9)]
    assert "keeps_checkpoint" not in picks and "tp8 pp1 ep1" in missing["keeps_checkpoint"]


def test_no_checkpoint_no_checkpoint_pick():
    assert [r.name for r in pick_rules(400)] == ["fastest", "headroom", "no_pipeline"]
    with pytest.raises(ConfigError, match="percentage"):
        pick_rules(400, headroom_pct=100)
