"""Property tests: for every fixture and any valid strategy, apply then read gives that strategy."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from script_support import FIXTURE_PATHS, bash_syntax_ok, foreign_changes, strategies_for

from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.script.reader import read_script, read_script_text

_SETTINGS = settings(
    max_examples=int(os.environ.get("SCRIPT_EXAMPLES", "20")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_at_least_fifteen_fixtures():
    """The issue asks for at least 15 fixture scripts."""
    assert len(FIXTURE_PATHS) >= 15


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=lambda p: p.name)
@_SETTINGS
@given(data=st.data())
def test_apply_then_read_gives_the_strategy(path, data):
    """read(apply(s)) reports exactly s (normalised), on the target cluster, and bash -n passes."""
    info = read_script(path)
    strategy, nnodes, nproc, expected = data.draw(strategies_for(info))
    out = apply_strategy(
        info.text,
        strategy,
        nnodes=nnodes,
        nproc_per_node=nproc,
        header=[f"strategy {strategy.label()}", "modelled time 1.0 ms"],
    )
    back = read_script_text(out.text, path.name)
    assert back.train.strategy == expected
    assert (back.train.nnodes, back.train.nproc_per_node) == (nnodes, nproc)
    ok, err = bash_syntax_ok(out.text)
    assert ok, err
    assert foreign_changes(info.text, out.text) == []


_BROKEN = "pretrain_internlm3_8b_4k_ptd.sh"
"""Its `--num-layers-per-virtual-pipeline-stage ${VPP}` has no value (VPP is never set)."""


@pytest.mark.parametrize(
    "path", [p for p in FIXTURE_PATHS if p.name != _BROKEN], ids=lambda p: p.name
)
def test_applying_the_scripts_own_strategy_changes_nothing(path):
    """Writing back the strategy a script already runs leaves it byte for byte."""
    info = read_script(path)
    out = apply_strategy(
        info.text,
        info.train.strategy,
        nnodes=info.train.nnodes,
        nproc_per_node=info.train.nproc_per_node,
    )
    assert out.text == info.text


def test_own_strategy_removes_only_a_valueless_vpp_flag():
    """A vpp flag left without value (unset variable) is dropped with its reference, nothing else."""
    info = read_script(FIXTURE_PATHS[0].parent / _BROKEN)
    out = apply_strategy(info.text, info.train.strategy, nnodes=1, nproc_per_node=8)
    removed = [line for line in info.text.splitlines() if line not in out.text.splitlines()]
    assert removed == ["    --num-layers-per-virtual-pipeline-stage ${VPP} \\"]
    assert len(out.text.splitlines()) == len(info.text.splitlines()) - 1
