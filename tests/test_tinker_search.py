"""`tinker-opt search SCRIPT --profiled-data-path FOLDER` on a Tinker 1.3 folder (tests/tinker_folder.py)."""

from __future__ import annotations

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
    result = run_cli("search", str(ROOT / TINY.script), "--profiled-data-path", str(tiny_folder),
                     "--num-nodes", str(num_nodes), "--num-npus-per-node", "8", "--output-dir", str(out), "--quiet")
    assert result.returncode == 0, result.stderr
    (folder,) = list(out.iterdir())
    assert folder.name.startswith(f"llama-tiny-gbs64-57000-{num_nodes}nodes8npus-")
    summary = read_json(folder / "summary.json")
    assert summary["status"] in STATUSES and summary["best"]["fits"]
    assert summary["inputs"]["num_nodes"] == num_nodes and (folder / "results.csv").is_file()
    # Tinker's p2p table is no link: the intra-node figures are the documented defaults, with a warning.
    assert any("no intra-node communication figures" in warning for warning in summary["warnings"])
