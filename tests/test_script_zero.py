"""ZeRO stages in Megatron-style scripts: DeepSpeed's --zero-stage (pre-1.0 ModelLink) and
Megatron-FSDP's --data-parallel-sharding-strategy, read and written; other scripts stay at 0/1."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.errors import StrategyError
from tinker_opt.expressible import search_space_for
from tinker_opt.script import versions
from tinker_opt.script.reader import read_script, read_script_text

SCRIPTS = Path(__file__).parent / "fixtures" / "scripts"
DEEPSPEED = SCRIPTS / "pretrain_llama_7b_zero_8p.sh"
PLAIN = SCRIPTS / "pretrain_llama2_7b_ptd.sh"


def _megatron_fsdp(stage: str | None) -> str:
    """The llama2 fixture with Megatron-FSDP switched on (and a sharding strategy when given)."""
    flags = "--use-megatron-fsdp" + (f" --data-parallel-sharding-strategy {stage}" if stage else "")
    return PLAIN.read_text().replace(
        "--use-distributed-optimizer \\", f"--use-distributed-optimizer {flags} \\"
    )


def test_deepspeed_zero_stage_is_read():
    assert read_script(DEEPSPEED).train.strategy.zero == 2


def test_deepspeed_stage_written_at_its_variable():
    """ZERO_STAGE feeds both --zero-stage and the JSON heredoc: the assignment changes, so both follow."""
    info = read_script(DEEPSPEED)
    out = apply_strategy(info.text, info.train.strategy.replace(zero=3), nnodes=1, nproc_per_node=8)
    assert "ZERO_STAGE=3\n" in out.text and "ZERO_STAGE=2" not in out.text
    assert read_script_text(out.text).train.strategy.zero == 3


@pytest.mark.parametrize(
    "stage, zero",
    [(None, 1), ("no_shard", 1), ("optim", 1), ("optim_grads", 2), ("optim_grads_params", 3)],
)
def test_megatron_fsdp_sharding_strategy_is_read(stage, zero):
    """no_shard (the default) with --use-distributed-optimizer is ZeRO-1; the others name their stage."""
    assert read_script_text(_megatron_fsdp(stage)).train.strategy.zero == zero


def test_megatron_fsdp_stage_is_written():
    info = read_script_text(_megatron_fsdp("optim_grads"))
    out = apply_strategy(
        info.text,
        info.train.strategy.replace(zero=3),
        nnodes=info.train.nnodes,
        nproc_per_node=info.train.nproc_per_node,
    )
    assert "--data-parallel-sharding-strategy optim_grads_params" in out.text
    assert read_script_text(out.text).train.strategy.zero == 3


def test_plain_script_cannot_take_zero_2():
    info = read_script(PLAIN)
    with pytest.raises(StrategyError, match="ZeRO stage 2 needs DeepSpeed"):
        apply_strategy(
            info.text,
            info.train.strategy.replace(zero=2),
            nnodes=info.train.nnodes,
            nproc_per_node=info.train.nproc_per_node,
        )


@pytest.mark.parametrize(
    "text, levels",
    [
        (PLAIN.read_text(), (0, 1)),
        (DEEPSPEED.read_text(), (0, 1, 2, 3)),
        (_megatron_fsdp("optim"), (0, 1, 2, 3)),
    ],
    ids=["plain", "deepspeed", "fsdp"],
)
def test_search_space_levels_follow_the_script(text, levels):
    info = read_script_text(text)
    vr = versions.resolve(None, info.text, info.train.framework.flavour)
    assert search_space_for(info, vr).zero_levels == levels
