"""Profiling with several worker processes (profile/workers.py): same rows as one process.

A reduced profile space of the bundled example (tp 2 with sequence parallel, mbs 1: one row per
block) keeps the two profiles to a few seconds each on the CPU.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from cli_support import EXAMPLE

from tinker_opt.errors import ConfigError
from tinker_opt.profile import runner, store
from tinker_opt.profile.device import detect_device
from tinker_opt.profile.runner import MeasureSettings, run_profile
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.space import ProfilePoint
from tinker_opt.profile.workers import deal
from tinker_opt.script.reader import read_script

TIMES = [c for c in store.BLOCK_COLUMNS if c.endswith("_us") or c.endswith("_us_spread")]


BASE = dict(device="cpu", max_npu=2, max_mbs=1, warmup=0, repeats=5)


def _settings(devices: int | None, flags: tuple[str, ...]) -> MeasureSettings:
    return MeasureSettings(
        device="cpu",
        max_npu=2,
        max_mbs=1,
        prof_tp=(2,),
        prof_sp=(1,),
        warmup=0,
        repeats=5,
        selective=False,
        comm="skip",
        devices=devices,
        kernel_flags=flags,
    )


def test_two_workers_give_the_same_rows_as_one(tmp_path):
    """The example profiled by 2 CPU workers: the same shapes, parameter counts and bytes as 1 worker
    (times are measurements and may differ); the kernels and their warnings are recorded alike."""
    from tinker_opt.profile.kernels import script_flags

    info = read_script(EXAMPLE)
    flags = script_flags(info.launch)
    folders = {
        n: run_profile(info.model, _settings(n, flags), tmp_path / f"w{n}", train=info.train)
        for n in (1, 2)
    }
    frames = {
        n: pd.read_csv(folder / store.BLOCKS_FILE).drop(columns=TIMES)
        for n, folder in folders.items()
    }
    assert len(frames[1]) == 4 and set(frames[1]["status"]) == {"ok"}
    pd.testing.assert_frame_equal(frames[1], frames[2])
    metas = {n: json.loads((folder / store.META_FILE).read_text()) for n, folder in folders.items()}
    assert metas[1]["kernels"] == metas[2]["kernels"]
    assert metas[2]["kernels"]["blocks"]["layer"]["rmsnorm"].startswith("reference")
    log = (folders[2] / store.LOG_FILE).read_text()
    assert "WARNING --use-fused-rmsnorm" in log and "[worker 1]" in log


def test_rows_are_dealt_round_robin_in_order():
    """Each worker gets every N-th row, keeping the least-memory-first order within its share."""
    points = [ProfilePoint("layer", Shape(mbs=m)) for m in (1, 2, 3, 4, 5)]
    shares = deal(points, 2)
    assert [[p.shape.mbs for p in share] for share in shares] == [[1, 3, 5], [2, 4]]


def test_collectives_use_one_process_per_device(monkeypatch):
    """With --devices N the communication profile runs N processes (gloo on the CPU)."""
    seen = {}

    def fake_measure(**kwargs):
        seen.update(kwargs)
        return store.empty_comm(), []

    import tinker_opt.profile.comm as comm

    monkeypatch.setattr(comm, "measure_comm", fake_measure)
    cpu = detect_device("cpu")
    runner.comm_rows(MeasureSettings(**BASE, devices=3), cpu, lambda _: None)
    assert seen["num_procs"] == 3 and seen["backend"] == "gloo"
    runner.comm_rows(MeasureSettings(**BASE), cpu, lambda _: None)
    assert seen["num_procs"] == 2  # one CPU worker: still a 2-process measurement


def test_more_devices_than_the_node_has_is_an_error():
    """--devices above the accelerator count is a ConfigError naming both numbers (cpu: any count)."""
    from dataclasses import replace

    cpu = detect_device("cpu")
    assert MeasureSettings(**BASE, devices=4).num_workers(cpu) == 4
    assert MeasureSettings(**BASE).num_workers(cpu) == 1
    fake_gpu = replace(cpu, kind="cuda", count=2)
    with pytest.raises(ConfigError, match=r"--devices 4.*2 cuda"):
        MeasureSettings(**BASE, devices=4).num_workers(fake_gpu)
    assert MeasureSettings(**BASE).num_workers(fake_gpu) == 2


def test_cli_megatron_core_blocks_without_megatron_is_one_line_error(tmp_path):
    """`profile --blocks megatron-core` where megatron-core does not import: exit 2, one line naming the pin."""
    import os
    import subprocess
    import sys

    from cli_support import ROOT, assert_one_line_error

    code = (
        "import sys; sys.modules['megatron'] = None; sys.modules['megatron.core'] = None; "
        "from tinker_opt.cli import main; sys.argv = ['tinker-opt'] + sys.argv[1:]; main()"
    )
    args = (
        "profile",
        str(EXAMPLE),
        "--device",
        "cpu",
        "--prof-path",
        str(tmp_path / "p"),
        "--blocks",
        "megatron-core",
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_one_line_error(result, "megatron-core==0.16.1")
