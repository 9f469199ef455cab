"""`tinker-opt search SCRIPT --profiled-data-path FOLDER` on a Tinker 1.3 folder (tests/tinker_folder.py)."""

from __future__ import annotations

import json

import pytest
from cli_support import ROOT, read_json, run_cli
from tinker_folder import TINY, write_tinker_folder

STATUSES = ("optimal", "feasible")


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return write_tinker_folder(tmp_path_factory.mktemp("tinker"), TINY)


@pytest.mark.parametrize("num_nodes", [1, 4])
def test_search_on_a_tinker_folder_finishes_with_a_results_folder(tiny_folder, tmp_path, num_nodes):
    """1 and 4 nodes of 8 devices: exit 0, a status, a results folder labelled from the VERSION file."""
    out = tmp_path / "results"
    result = run_cli(
        "search",
        str(ROOT / TINY.script),
        "--profiled-data-path",
        str(tiny_folder),
        "--num-nodes",
        str(num_nodes),
        "--num-npus-per-node",
        "8",
        "--output-dir",
        str(out),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    (folder,) = list(out.iterdir())
    assert folder.name.startswith(f"llama-tiny-gbs64-57000-{num_nodes}nodes8npus-")
    summary = read_json(folder / "summary.json")
    assert summary["status"] in STATUSES and summary["best"]["fits"]
    assert summary["inputs"]["num_nodes"] == num_nodes and (folder / "results.csv").is_file()
    # Tinker's p2p table is no link: the intra-node figures are the documented defaults, with a warning.
    assert any("no intra-node communication figures" in warning for warning in summary["warnings"])


def test_search_on_a_tinker_folder_at_128_nodes(tiny_folder, tmp_path):
    """1,024 devices: the search still finishes with a status and a results folder."""
    out = tmp_path / "results"
    result = run_cli(
        "search",
        str(ROOT / TINY.script),
        "--profiled-data-path",
        str(tiny_folder),
        "--num-nodes",
        "128",
        "--num-npus-per-node",
        "8",
        "--output-dir",
        str(out),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    (folder,) = list(out.iterdir())
    assert read_json(folder / "summary.json")["status"] in STATUSES


def test_nothing_fits_still_writes_the_results_folder(tiny_folder, tmp_path):
    """No strategy fits: exit 2 with the one-line error, and a results folder whose summary.json
    has status infeasible and that message."""
    out = tmp_path / "results"
    result = run_cli(
        "search",
        str(ROOT / TINY.script),
        "--profiled-data-path",
        str(tiny_folder),
        "--num-nodes",
        "1",
        "--num-npus-per-node",
        "8",
        "--memory-limit",
        "1",
        "--output-dir",
        str(out),
        "--quiet",
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "no strategy fits in 1 MB per device" in result.stderr
    (folder,) = list(out.iterdir())
    summary = read_json(folder / "summary.json")
    assert summary["status"] == "infeasible" and summary["best"] is None and summary["top"] == []
    assert summary["message"].startswith("no strategy fits in 1 MB per device")
    assert summary["inputs"]["script_path"] == str((ROOT / TINY.script).resolve())


def test_simulate_evaluates_a_tinker_pick_with_the_script_positional(tiny_folder):
    """simulate SCRIPT --profiled-data-path FOLDER with Tinker's simu flags: the breakdown names the
    terms left out because Tinker's block times include them."""
    result = run_cli(
        "simulate",
        str(ROOT / TINY.script),
        "--profiled-data-path",
        str(tiny_folder),
        "--num-nodes",
        "1",
        "--num-npus-per-node",
        "8",
        "--simu-tp",
        "2",
        "--simu-pp",
        "2",
        "--simu-sp",
        "1",
        "--num-layer-list",
        "3,5",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["in_block_times"] == ["tp_comm", "ep_comm"]
    assert [stage["layers"] for stage in out["stages"]] == [3, 5]
