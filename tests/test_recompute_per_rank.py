"""MindSpeed's `--enable-recompute-layers-per-pp-rank` (script/recompute_args.py): with block
recompute over virtual stages `--recompute-num-layers` counts a pipeline rank's layers, read as
the per-chunk count the Strategy holds and written back per rank (the switch dropped where the
strategy has no virtual stages, which MindSpeed refuses)."""

from __future__ import annotations

import pytest
from script_support import FIXTURES

from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.script.reader import read_script_text

LLAMA = (FIXTURES / "pretrain_llama2_7b_ptd.sh").read_text()
"""32 layers, pp 2: 16 layers a stage."""
FLAG = "--enable-recompute-layers-per-pp-rank"


def _text(count: int, per_rank: bool = True, vpp_layers: int = 4) -> str:
    flags = (
        f"--num-layers-per-virtual-pipeline-stage {vpp_layers} --recompute-granularity full "
        f"--recompute-method block --recompute-num-layers {count}"
        + (f" {FLAG}" if per_rank else "")
    )
    return LLAMA.replace("--use-flash-attn", f"--use-flash-attn {flags}")


@pytest.mark.parametrize(
    ("count", "per_rank", "read", "warned"),
    [
        (8, True, 2, False),  # 4 chunks of 4 layers: 8 of a rank's 16 = 2 a chunk
        (6, True, 2, True),  # chunks recompute 2, 2, 1, 1: read as 2, warned
        (16, True, 4, False),  # every layer
        (2, False, 2, False),  # Megatron's count: per chunk already
    ],
)
def test_the_per_rank_count_reads_per_chunk(count, per_rank, read, warned):
    info = read_script_text(_text(count, per_rank))
    s = info.train.strategy
    assert (s.vpp, s.recompute, s.recompute_method) == (4, "full", "block")
    assert s.recompute_num_layers == read
    assert any(FLAG in w and "read as" in w for w in info.warnings) == warned


def _write(text: str, **change) -> str:
    info = read_script_text(text)
    s = info.train.strategy.replace(**change)
    nodes, per_node = info.train.nnodes, info.train.nproc_per_node
    return apply_strategy(text, s, nnodes=nodes, nproc_per_node=per_node).text


def test_the_count_is_written_back_per_rank():
    """The same strategy leaves the script as it is (also a count the reading rounded up); a new
    per-chunk count is written times vpp with the switch kept; without virtual stages or with
    the uniform method the switch goes and the count is per chunk."""
    for count in (8, 6):
        assert _write(_text(count)) == _text(count)
    three = _write(_text(8), recompute_num_layers=3)
    assert "--recompute-num-layers 12" in three and FLAG in three
    assert read_script_text(three).train.strategy.recompute_num_layers == 3
    flat = _write(_text(8), vpp=1)
    assert FLAG not in flat and "--recompute-num-layers 2 " in flat
    uniform = _write(_text(8), recompute_method="uniform")
    assert FLAG not in uniform and "--recompute-num-layers 2 " in uniform
    none = _write(_text(8), recompute="none", recompute_method=None, recompute_num_layers=None)
    assert FLAG not in none and "--recompute-num-layers" not in none
