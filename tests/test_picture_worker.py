"""The picture worker (emit/picture_worker.py): it draws what it is sent, reports a failure to the
parent, is joined on leaving, and draws the same files as drawing in the process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tinker_opt.emit.picture_worker import PictureWorker, draw_here, draw_split, picture_worker

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the worker forks (Linux only)")

EVALUATION = {
    "strategy": {"pp": 2, "vpp": 1, "tp": 1, "dp": 1, "mbs": 1},
    "iteration_time_ms": 10.0,
    "peak_memory_mb": 100.0,
    "stages": [
        {"stage": 0, "layers": 2, "time_ms": 1.0, "fwd_ms": 0.3, "bwd_ms": 0.7},
        {"stage": 1, "layers": 2, "time_ms": 1.2, "fwd_ms": 0.4, "bwd_ms": 0.8},
    ],
}


@pytest.fixture(autouse=True)
def _no_matplotlib(monkeypatch):
    """As in a fresh `tinker-opt` process: matplotlib not imported yet (else no worker starts)."""
    monkeypatch.delitem(sys.modules, "matplotlib.figure", raising=False)


def _schedule_job(path: Path):
    return [("plot_schedule", (EVALUATION, 4, path), {})]


def test_worker_draws_what_drawing_here_draws(tmp_path: Path) -> None:
    with picture_worker() as worker:
        assert worker is not None
        worker.submit(_schedule_job(tmp_path / "worker.svg"))
        worker.wait()
        process = worker.process
    assert not process.is_alive() and process.exitcode == 0
    draw_here(_schedule_job(tmp_path / "here.svg"))
    assert (tmp_path / "worker.svg").read_bytes() == (tmp_path / "here.svg").read_bytes()


def test_a_failed_drawing_is_raised_in_the_parent(tmp_path: Path) -> None:
    with picture_worker() as worker:
        assert worker is not None
        worker.submit(_schedule_job(tmp_path / "missing" / "folder.svg"))
        with pytest.raises(RuntimeError, match="drawing the pictures failed"):
            worker.wait()


def test_no_worker_once_matplotlib_is_imported(monkeypatch) -> None:
    import matplotlib.figure

    monkeypatch.setitem(sys.modules, "matplotlib.figure", matplotlib.figure)
    with picture_worker() as worker:
        assert worker is None


def test_a_failed_search_stops_the_worker() -> None:
    with pytest.raises(ValueError), picture_worker() as worker:
        assert isinstance(worker, PictureWorker)
        process = worker.process
        raise ValueError("the search failed")
    assert not process.is_alive()


def test_split_drawing_draws_every_picture_as_drawing_here(tmp_path: Path) -> None:
    """The helper draws all but the first job: every file is written, byte for byte as here."""
    split = [*_schedule_job(tmp_path / "a.svg"), *_schedule_job(tmp_path / "b.svg")]
    draw_split(split)
    draw_here(_schedule_job(tmp_path / "here.svg"))
    here = (tmp_path / "here.svg").read_bytes()
    assert (tmp_path / "a.svg").read_bytes() == here
    assert (tmp_path / "b.svg").read_bytes() == here


def test_a_failed_drawing_in_the_helper_is_raised(tmp_path: Path) -> None:
    """A job the helper draws fails: its traceback reaches the caller; the first is drawn."""
    split = [*_schedule_job(tmp_path / "a.svg"), *_schedule_job(tmp_path / "no" / "b.svg")]
    with pytest.raises(RuntimeError, match="FileNotFoundError"):
        draw_split(split)
    assert (tmp_path / "a.svg").exists()
