"""MindSpeed's `--swap-attention` with `--recompute-num-layers N` (script/swap_recompute.py): the
MLP of every layer recomputed when N covers a model chunk, read as selective recompute of the
`mlp` / `moe` modules; and the held-out MindSpeed-LLM RC3 Mixtral-8x22B 32K row, which runs that
policy, modelled within its 64 GiB device."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from script_support import FIXTURES

from tinker_opt.script.reader import read_script_text
from tinker_opt.script.swap_recompute import SWAP_RECOMPUTE_MODULES

ROOT = Path(__file__).resolve().parents[1]
LLAMA = (FIXTURES / "pretrain_llama2_7b_ptd.sh").read_text()
"""32 layers, pp 2: 16 layers a stage."""


def _read(flags: str):
    return read_script_text(LLAMA.replace("--use-flash-attn", f"--use-flash-attn {flags}"))


@pytest.mark.parametrize(
    "flags",
    [
        "--swap-attention --recompute-method block --recompute-num-layers 16",
        "--swap-attention --recompute-num-layers 30",  # more than the stage has: every layer
        "--swap-attention --num-layers-per-virtual-pipeline-stage 4 --recompute-num-layers 4",
        "--swap-attention --recompute-method uniform --recompute-num-layers 1",
    ],
)
def test_a_policy_over_every_layer_reads_as_mlp_recompute(flags):
    """N at least a chunk's layers (or the uniform method): selective, mlp and moe, no core_attn."""
    info = _read(flags)
    assert info.train.strategy.recompute == "selective"
    assert info.train.recompute_modules == SWAP_RECOMPUTE_MODULES
    assert info.train.swap_attention


@pytest.mark.parametrize(
    ("flags", "recompute", "warned"),
    [
        # Some layers only (4 of each stage's 16): not expressible per layer, warned.
        ("--swap-attention --recompute-method block --recompute-num-layers 4", "none", True),
        # The per-pp-rank count: 8 of 16 even though a chunk holds 4.
        (
            "--swap-attention --num-layers-per-virtual-pipeline-stage 4 "
            "--enable-recompute-layers-per-pp-rank --recompute-num-layers 8",
            "none",
            True,
        ),
        # Without the swap the method and count alone recompute nothing (Megatron).
        ("--recompute-method block --recompute-num-layers 16", "none", False),
        # A granularity keeps Megatron's own checkpointing.
        (
            "--swap-attention --recompute-granularity full --recompute-method block "
            "--recompute-num-layers 16",
            "full",
            False,
        ),
    ],
)
def test_other_settings_keep_their_reading(flags, recompute, warned):
    info = _read(flags)
    assert info.train.strategy.recompute == recompute
    assert info.train.recompute_modules != SWAP_RECOMPUTE_MODULES
    assert any("MLP of only some" in w for w in info.warnings) == warned


def test_rc3_mixtral_8x22b_32k_row_fits_its_device():
    """The RC3 script (tp 8 pp 4 cp 2, vpp 7, swap-attention, recompute-num-layers 30) ran on
    64 GiB 910B NPUs; modelled with the policy it runs, its peak is below the device's memory
    (without it the first stage was modelled at 115 GiB)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from published_runs import hardware_for, launch_script, load_runs
    from validate_published import Profiles, limits_for, predict, read_run

    runs = load_runs(ROOT / "benchmarks" / "data" / "heldout_runs.json")
    run = next(r for r in runs if r.run_id == "mindspeed_rc3_mixtral_8x22b_32k_64npu_tp8_pp4_cp2")
    model, strategy, _, job = read_run(run, launch_script(run))
    assert job.swap_attention and job.recompute_modules == SWAP_RECOMPUTE_MODULES
    hardware = hardware_for(run, None)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Profiles(Path(tmp)).folder("row", model, limits_for(run), hardware)
        prediction = predict(run, model, strategy, folder, hardware, job)
    assert run.ran and prediction.peak_gib < prediction.device_gib == 64


@pytest.mark.parametrize(
    ("flags", "target", "count"),
    [
        # The same strategy: the script's own flags, untouched.
        ("--swap-attention --recompute-method block --recompute-num-layers 16", {}, "16"),
        # pp 4: 8 layers a stage, 16 still covers them.
        ("--swap-attention --recompute-num-layers 16", {"pp": 4, "dp": 2}, "16"),
        # pp 1: 32 layers a stage, N grows to cover them.
        ("--swap-attention --recompute-num-layers 16", {"pp": 1, "dp": 8}, "32"),
        # uniform lists every layer whatever N is.
        (
            "--swap-attention --recompute-method uniform --recompute-num-layers 1",
            {"pp": 1, "dp": 8},
            "1",
        ),
    ],
)
def test_the_swap_policy_is_written_back_as_the_script_has_it(flags, target, count):
    """Selective recompute read from the swap policy is written back as that policy (no
    `--recompute-granularity selective`: Megatron's would recompute core attention, and RC3 has no
    `--recompute-modules`), with a count that covers the new strategy's chunks; read again, the
    written script gives the same reading."""
    from tinker_opt.emit.script_writer import apply_strategy

    text = LLAMA.replace("--use-flash-attn", f"--use-flash-attn {flags}")
    info = read_script_text(text)
    s = info.train.strategy.replace(**target)
    out = apply_strategy(
        text, s, nnodes=info.train.nnodes, nproc_per_node=info.train.nproc_per_node
    ).text
    assert "--recompute-granularity" not in out and "--recompute-modules" not in out
    assert f"--recompute-num-layers {count}" in out
    if not target:
        assert out == text
    again = read_script_text(out)
    assert again.train.strategy.recompute == "selective"
    assert again.train.recompute_modules == SWAP_RECOMPUTE_MODULES
    assert again.train.strategy.pp == s.pp
