"""MindSpeed `--swap-optimizer`: the reader records its chunk count, the writer leaves it alone."""

from __future__ import annotations

import pytest
from script_support import FIXTURES

from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.errors import ScriptError
from tinker_opt.script.reader import inspect_dict, read_script_text
from tinker_opt.strategy import Strategy

DEEPSEEK = "pretrain_deepseek3_671b_4k_ptd.sh"
SWAP_LINE = "    --swap-optimizer \\\n"


def text_of(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def with_times(times: str) -> str:
    text = text_of(DEEPSEEK)
    assert SWAP_LINE in text
    return text.replace(
        SWAP_LINE, f"    --swap-optimizer \\\n    --swap-optimizer-times {times} \\\n"
    )


@pytest.mark.parametrize("name", [DEEPSEEK, "pretrain_qwen3_30b_a3b_4k_A3_ptd.sh"])
def test_flag_alone_reads_as_mindspeed_default_16(name):
    """--swap-optimizer without --swap-optimizer-times means 16 chunks (MindSpeed's default)."""
    assert read_script_text(text_of(name), name).train.swap_optimizer_times == 16


def test_explicit_times_are_read():
    """--swap-optimizer-times 8 gives 8 chunks."""
    assert read_script_text(with_times("8"), DEEPSEEK).train.swap_optimizer_times == 8


def test_times_without_the_flag_do_not_swap():
    """--swap-optimizer-times alone does not turn swapping on."""
    text = with_times("8").replace(SWAP_LINE, "")
    assert read_script_text(text, DEEPSEEK).train.swap_optimizer_times is None


def test_script_without_flag_does_not_swap():
    """A script without --swap-optimizer reads as not swapping."""
    name = "pretrain_llama2_7b_ptd.sh"
    assert read_script_text(text_of(name), name).train.swap_optimizer_times is None


def test_non_positive_times_are_a_script_error():
    """--swap-optimizer-times 0 names the flag and the default."""
    with pytest.raises(ScriptError, match=r"swap-optimizer-times.*16"):
        read_script_text(with_times("0"), DEEPSEEK)


def test_inspect_shows_swap_times_in_framework():
    """inspect --json carries framework.swap_optimizer_times."""
    info = read_script_text(with_times("4"), DEEPSEEK)
    assert inspect_dict(info)["framework"]["swap_optimizer_times"] == 4


def test_apply_strategy_keeps_swap_flags():
    """Writing a new strategy leaves --swap-optimizer and --swap-optimizer-times as written."""
    text = with_times("8")
    strategy = Strategy(
        tp=4,
        pp=4,
        dp=8,
        ep=8,
        sp=True,
        zero=1,
        recompute="full",
        recompute_method="block",
        recompute_num_layers=2,
    )
    out = apply_strategy(text, strategy, nnodes=16, nproc_per_node=8)
    assert "--swap-optimizer \\\n    --swap-optimizer-times 8 \\\n" in out.text
    assert read_script_text(out.text, DEEPSEEK).train.swap_optimizer_times == 8
