"""One definition of a stage's layers (tinker_opt/layer_stack.py): noop padding, virtual stages and
DualPipeV's V, checked against what MindSpeed-LLM and Megatron-LM accept, and DeepSeek-V3's
dualpipev scripts priced as written."""

from __future__ import annotations

import pytest
from script_support import FIXTURES

from tinker_opt.errors import StrategyError
from tinker_opt.layer_stack import (
    computing_chunks,
    dualpipev_layer_list,
    dualpipev_message,
    layers_in_script,
    rank_chunks,
)
from tinker_opt.rules import check_strategy
from tinker_opt.script.noop_layers import computing_layer_strategy, strategy_for_script
from tinker_opt.script.reader import read_script
from tinker_opt.specs import ClusterSpec
from tinker_opt.strategy import Strategy

DEEPSEEK_V_SCRIPTS = (
    "pretrain_deepseek3_671b_4k_dualpipev_ptd.sh",
    "pretrain_deepseek3_671b_4k_A3_dualpipev_ptd.sh",
)
V_CHUNKS = (4,) * 15 + (1,)
"""DeepSeek-V3: 64 = 61 + noop 61, 62, 63 over pp 8 is 16 chunks of 4; the last (rank 0's second)
computes one."""


def test_interleaved_chunks_follow_megatron_layout_order():
    """Megatron's virtual stage k is chunk k // pp of rank k % pp
    (pipeline_parallel_layer_layout.py)."""
    assert rank_chunks(4, 2, False, 1) == (1, 5)
    assert rank_chunks(4, 1, False, 3) == (3,)


def test_dualpipev_rank_holds_both_ends_of_the_v():
    """MindSpeed's get_transformer_layer_offset: rank r's chunks start at r * L / 2p and at
    L - (r + 1) * L / 2p, the layer-order chunks r and 2p - 1 - r."""
    assert rank_chunks(8, 1, True, 0) == (0, 15)
    assert rank_chunks(8, 1, True, 7) == (7, 8)


def test_dualpipev_checks_the_padded_count():
    """MindSpeed-LLM checks `--num-layers` (noop layers included): 61 + 3 = 64 over pp 8 splits
    into 2 * 8 chunks; 61 alone does not; pp 1 is refused (dualpipev_feature.py)."""
    assert layers_in_script(61, (61, 62, 63)) == 64
    assert dualpipev_message(61, (61, 62, 63), 8, 480) is None
    assert "num_layers (61)" in dualpipev_message(61, (), 8, 480)
    assert "pp >= 2" in dualpipev_message(64, (), 1, 480)
    assert "micro-batches" in dualpipev_message(61, (61, 62, 63), 8, 15)


def test_noop_layers_leave_the_last_chunk_short():
    assert computing_chunks((4,) * 16, (61, 62, 63)) == V_CHUNKS
    assert dualpipev_layer_list(61, (61, 62, 63), 8) == V_CHUNKS
    assert dualpipev_layer_list(64, (), 8) is None  # equal chunks need no list


def test_dualpipev_strategy_sums_each_rank_over_its_v():
    s = Strategy(pp=8, dp=2, dualpipev=True, num_layer_list=V_CHUNKS)
    assert s.per_virtual_stage
    assert s.stage_layers(61) == (5,) + (8,) * 7
    assert s.chunk_layers(61) == V_CHUNKS
    even = Strategy(pp=8, dp=2, dualpipev=True)
    assert even.chunk_layers(64) == (4,) * 16


def test_dualpipev_layer_list_must_be_the_noop_one():
    """The V's split is MindSpeed's own: only the list its noop layers give is accepted."""
    info = read_script(FIXTURES / DEEPSEEK_V_SCRIPTS[0])
    model, gbs = info.model, info.train.global_batch_size
    own = computing_layer_strategy(
        info.train.strategy, model.noop_layers, info.num_layers_in_script
    )
    cluster = ClusterSpec(num_nodes=own.world_size // 8, devices_per_node=8, memory_limit_mb=64e3)
    check_strategy(own, model, cluster, gbs)
    for wrong in (None, (5,) * 12 + (1,) * 4):
        with pytest.raises(StrategyError, match="dualpipev"):
            check_strategy(own.replace(num_layer_list=wrong), model, cluster, gbs)


@pytest.mark.parametrize("name", DEEPSEEK_V_SCRIPTS)
def test_deepseek_v3_dualpipev_scripts_map_to_the_v_and_back(name):
    """Read as written (`--noop-layers 61,62,63`, `--schedules-method dualpipev`): the cost
    model's strategy holds the V's computing layers, and the writer says no layer list."""
    info = read_script(FIXTURES / name)
    script = info.train.strategy
    assert script.dualpipev and script.pp == 8 and info.num_layers_in_script == 64
    own = computing_layer_strategy(script, info.model.noop_layers, info.num_layers_in_script)
    assert own.num_layer_list == V_CHUNKS
    back = strategy_for_script(
        own, own.stage_layers(61), info.model.noop_layers, info.num_layers_in_script
    )
    assert back.num_layer_list is None
