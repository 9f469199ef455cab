"""The results folder writer (tinker_opt/emit/results.py): layout, formats, atomicity."""

import json
import os
from datetime import datetime

import pandas as pd
import pytest

from tinker_opt.emit.results import (
    config_script_name,
    results_folder_name,
    write_results_folder,
)
from tinker_opt.emit.search_report import RunLabels, SearchReport
from tinker_opt.errors import ConfigError
from tinker_opt.strategy import Strategy

LABELS = RunLabels("llama", "tiny", 64, 400, 2, 8, 1024)


def _evaluation(tp: int, time_ms: float) -> dict:
    strategy = Strategy(tp=tp, pp=2, dp=8 // tp, sp=tp > 1, mbs=1, num_layer_list=(5, 3))
    return {
        "strategy": strategy.to_dict(),
        "iteration_time_ms": time_ms,
        "peak_memory_mb": 300.0 + tp,
        "tokens_per_s_per_device": 1000.0 / time_ms,
        "stages": [
            {"stage": 0, "layers": 5, "time_ms": 2.0, "memory_mb": 301.0},
            {"stage": 1, "layers": 3, "time_ms": 1.5, "memory_mb": 250.0},
        ],
        "fits": True,
        "estimated": False,
    }


def _report() -> SearchReport:
    return SearchReport(
        labels=LABELS,
        inputs={"gbs": 64},
        solver="cpsat",
        status="optimal",
        gap=0.0,
        solve_time_s=0.5,
        objective_ms=10.0,
        bound_ms=10.0,
        top=[_evaluation(2, 10.0), _evaluation(1, 12.0)],
        log_lines=["line one"],
    )


def test_folder_name_follows_tinker_layout():
    """<model>-<size>-gbs<G>-<mem>-<N>nodes<M>npus-<timestamp>."""
    name = results_folder_name(LABELS, datetime(2026, 1, 2, 3, 4, 5))
    assert name == "llama-tiny-gbs64-400-2nodes8npus-2026-01-02-03-04-05"


def test_config_name_carries_strategy_and_figures():
    """The tuned script name holds the knobs, the layer split, time and memory."""
    name = config_script_name(LABELS, 1, _evaluation(2, 10.0))
    assert name.startswith(
        "llama-tiny-rank1_seq1024_tp2_pp2_dp4_cp1_ep1_vpp1_sp1_distopt0_mbs1_gbs64_L5_3"
    )
    assert name.endswith("_time10_mem302.sh")


def test_folder_contents(tmp_path):
    """results.csv reads back with pandas, summary.json has the interface keys, configs are written."""
    folder = write_results_folder(
        _report(),
        tmp_path,
        write_script=lambda rank, ev, header, name: "#!/bin/bash\n# " + header[0] + "\n",
    )
    frame = pd.read_csv(folder / "results.csv")
    assert list(frame["rank"]) == [1, 2]
    assert "iteration_time_ms" in frame.columns and "peak_memory_mb" in frame.columns
    summary = json.loads((folder / "summary.json").read_text())
    assert {"inputs", "solver", "status", "gap", "solve_time_s", "best", "top"} <= set(summary)
    assert summary["best"]["strategy"]["tp"] == 2
    assert len(list((folder / "configs").glob("*.sh"))) == 2
    assert (folder / "search.log").read_text().startswith("line one")
    assert (folder / "best_stages.svg").stat().st_size > 0
    assert (folder / "candidates_time_vs_memory.svg").stat().st_size > 0


def test_failure_leaves_no_folder(tmp_path):
    """An error while writing leaves neither the folder nor its staging copy behind."""

    def broken(rank, evaluation, header, name):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_results_folder(_report(), tmp_path, write_script=broken)
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_output_is_one_line_error(tmp_path):
    """An output folder that cannot be written is a ConfigError naming it."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    with pytest.raises(ConfigError, match="cannot be written"):
        write_results_folder(_report(), locked / "sub", write_script=None)


def test_output_path_that_is_a_file_is_one_line_error(tmp_path):
    """An output 'folder' that is a regular file is a ConfigError naming it."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot be written"):
        write_results_folder(_report(), blocker, write_script=None)
