"""`search --allow-fp8` / `all --allow-fp8`: FP8 searched beside the script's precision on a
device with FP8, the faster chosen and written into the tuned scripts; refused on devices
without FP8 and on measured profiles; precision stays the job's without the switch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import results_folder, run_all, run_cli, write_synthetic_profile

from tinker_opt.script.reader import read_script, read_script_text
from tinker_opt.strategy import Strategy

GPT3 = """#!/bin/bash
GPUS_PER_NODE=8
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes 1 pretrain_gpt.py \\
    --num-layers 4 --hidden-size 4096 --num-attention-heads 32 \\
    --seq-length 2048 --max-position-embeddings 2048 --vocab-size 51200 \\
    --micro-batch-size 1 --global-batch-size 64 \\
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \\
    --use-flash-attn --bf16
"""
"""GPT-3's layer shape at 6.7B width (hidden 4096, 32 heads, seq 2048), 4 layers on 8 GPUs."""
SMALL_PROFILE = ("--max-mbs", "2", "--prof-tp", "1,2")


@pytest.fixture(scope="module")
def fp8_run(tmp_path_factory):
    """(summary.json, results folder, script, profile folder) of `all --allow-fp8` on h100."""
    tmp = tmp_path_factory.mktemp("allow_fp8")
    script = tmp / "gpt3_small.sh"
    script.write_text(GPT3, encoding="utf-8")
    summary, folder = run_all(
        script, tmp, "--device", "analytic", "--hardware", "h100-80gb", "--allow-fp8",
        *SMALL_PROFILE,
    )  # fmt: skip
    return summary, folder, script, next((tmp / "prof").iterdir())


def _search(profile: Path, out: Path, *options: str) -> dict:
    """summary.json of `search` on `profile`, micro-batches up to 2 as `all --max-mbs 2` searched."""
    proc = run_cli(
        "search", "--profiled-data-path", str(profile), "--output-dir", str(out),
        "--cpus", "1", "--quiet", "--max-mbs", "2", *options,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads((results_folder(out) / "summary.json").read_text())


def test_allow_fp8_picks_fp8_and_is_faster(fp8_run):
    """Both precisions are searched; FP8's best is faster on H100 and chosen; the script's own
    strategy stays in BF16, so the speedup includes the FP8 gain."""
    summary, *_ = fp8_run
    bf16, fp8 = summary["precisions"]
    assert (bf16["precision"], fp8["precision"]) == ("bf16", "fp8 (hybrid, delayed)")
    assert fp8["chosen"] and not bf16["chosen"]
    assert fp8["best_ms"] < bf16["best_ms"]
    assert summary["best"]["iteration_time_ms"] == pytest.approx(fp8["best_ms"])
    assert summary["best"]["precision"] == {
        "dtype": "bf16",
        "fp8_format": "hybrid",
        "fp8_recipe": "delayed",
    }
    assert summary["current"]["precision"]["fp8_format"] is None
    assert summary["inputs"]["allow_fp8"] is True
    ratio = summary["current"]["iteration_time_ms"] / summary["best"]["iteration_time_ms"]
    assert summary["speedup_vs_current"] == pytest.approx(ratio)


def test_tuned_script_carries_the_fp8_flags(fp8_run):
    """The rank-1 script reads back in FP8 (hybrid, delayed) with the ranked strategy; its
    16-bit flag stays."""
    summary, folder, _, _ = fp8_run
    text = next((folder / "configs").glob("*-rank1_*.sh")).read_text()
    assert "--fp8-format hybrid" in text and "--bf16" in text and "--fp8-recipe" not in text
    info = read_script_text(text)
    assert (info.model.fp8_format, info.model.fp8_recipe) == ("hybrid", "delayed")
    best = Strategy.from_dict(summary["best"]["strategy"])
    assert info.train.strategy.label() == best.label()


def test_apply_writes_the_chosen_precision_back(fp8_run, tmp_path):
    """`apply SCRIPT summary.json` writes the best strategy and its FP8 flags; a bare strategy
    keeps the script's precision."""
    summary, folder, script, _ = fp8_run
    out = tmp_path / "tuned.sh"
    proc = run_cli("apply", str(script), str(folder / "summary.json"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert read_script(out).model.fp8_format == "hybrid"
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(summary["best"]["strategy"]), encoding="utf-8")
    proc = run_cli("apply", str(script), str(bare), "-o", str(tmp_path / "bare.sh"))
    assert proc.returncode == 0, proc.stderr
    assert not read_script(tmp_path / "bare.sh").model.is_fp8


def test_without_allow_fp8_precision_stays_the_jobs(fp8_run, tmp_path):
    """The same profile searched without the switch: one precision, BF16, the BF16 best."""
    summary, _, _, profile = fp8_run
    plain = _search(profile, tmp_path / "plain")
    assert plain["precisions"] == [] and plain["inputs"]["allow_fp8"] is False
    assert plain["best"]["precision"]["fp8_format"] is None
    assert plain["best"]["iteration_time_ms"] == pytest.approx(summary["precisions"][0]["best_ms"])


@pytest.mark.parametrize("solver", ["milp", "enum"])
def test_solvers_agree_with_fp8_in_the_space(fp8_run, tmp_path, solver):
    """MILP and the enumeration rank the same bests per precision as CP-SAT did."""
    summary, _, _, profile = fp8_run
    other = _search(profile, tmp_path / solver, "--allow-fp8", "--solver", solver)
    got = [(p["precision"], p["chosen"]) for p in other["precisions"]]
    assert got == [(p["precision"], p["chosen"]) for p in summary["precisions"]]
    for mine, theirs in zip(other["precisions"], summary["precisions"], strict=True):
        assert mine["best_ms"] == pytest.approx(theirs["best_ms"], rel=1e-9)


@pytest.mark.parametrize(("hardware", "device"), [("910b", "910B"), ("a100-80gb", "A100")])
def test_devices_without_fp8_refuse_allow_fp8(fp8_run, tmp_path, hardware, device):
    """--allow-fp8 on a description without an FP8 rate: one line naming the device."""
    *_, profile = fp8_run
    proc = run_cli(
        "search", "--profiled-data-path", str(profile), "--output-dir", str(tmp_path),
        "--hardware", hardware, "--allow-fp8", "--quiet",
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--allow-fp8: hardware '" in proc.stderr and "has no FP8 rate" in proc.stderr
    assert device in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_measured_profile_refuses_allow_fp8(tmp_path):
    """A measured (here synthetic) profile cannot be re-timed in FP8: a one-line error."""
    profile = write_synthetic_profile(tmp_path / "prof")
    proc = run_cli(
        "search", "--profiled-data-path", str(profile), "--output-dir", str(tmp_path / "res"),
        "--hardware", "h100-80gb", "--allow-fp8", "--quiet",
    )  # fmt: skip
    assert proc.returncode == 2
    assert "search --allow-fp8 re-times an analytic profile" in proc.stderr
