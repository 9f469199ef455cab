"""Mapping computing-layer splits to script layer lists with noop layers (script/noop_layers.py)."""

from hypothesis import given
from hypothesis import strategies as st

from tinker_opt.script.noop_layers import script_stage_layers, strategy_for_script
from tinker_opt.strategy import Strategy


def test_trailing_noop_layers_join_last_stage():
    """DeepSeek-V3: 61 computing layers + noop 61,62,63 over 8 stages of 8 -> even 8 x 8."""
    assert script_stage_layers((8,) * 7 + (5,), (61, 62, 63), 64) == (8,) * 8


def test_uneven_split_becomes_layer_list():
    """A split even in script layers needs no list; an uneven one is written as a layer list."""
    strategy = Strategy(pp=2, dp=1, num_layer_list=(3, 2))
    assert strategy_for_script(strategy, (3, 2), (5,), 6).num_layer_list is None
    assert strategy_for_script(strategy, (4, 1), (5,), 6).num_layer_list == (4, 2)


@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.data())
def test_counts_add_up_and_keep_computing_layers(stage_layers, data):
    """Script counts sum to --num-layers and each stage keeps its computing layers."""
    total_computing = sum(stage_layers)
    num_noop = data.draw(st.integers(0, 4))
    total = total_computing + num_noop
    noop = sorted(
        data.draw(st.sets(st.integers(0, total - 1), min_size=num_noop, max_size=num_noop))
    )
    counts = script_stage_layers(stage_layers, noop, total)
    assert sum(counts) == total
    start = 0
    for computing, count in zip(stage_layers, counts, strict=True):
        assert sum(1 for i in range(start, start + count) if i not in set(noop)) == computing
        start += count
