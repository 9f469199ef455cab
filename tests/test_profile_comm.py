"""Measured communication profile (gloo, two processes on the CPU)."""

from __future__ import annotations

from tinker_opt.profile.comm import comm_sizes, group_sizes, measure_comm
from tinker_opt.profile.store import COMM_OPS


def test_sizes_and_groups():
    """Sizes run 64 KiB x 4^i up to the maximum; groups 2, 4, ... up to the process count, and the count itself."""
    assert comm_sizes(1 << 20) == (65536, 262144, 1048576)
    assert group_sizes(8) == [2, 4, 8] and group_sizes(6) == [2, 4, 6]


def test_gloo_measures_every_collective():
    """Two gloo processes time every op at every size; the rows are intra-node and positive."""
    frame, notes = measure_comm(
        backend="gloo",
        device_kind="cpu",
        num_procs=2,
        max_bytes=256 * 1024,
        warmup=1,
        repeats=5,
        timeout_s=120,
    )
    assert notes == []
    assert set(frame["op"]) == set(COMM_OPS) and len(frame) == len(COMM_OPS) * 2
    assert (frame["time_us"] > 0).all() and set(frame["scope"]) == {"intra_node"}


def test_single_process_measures_nothing():
    """With one process there is nothing to measure, and the note says why."""
    frame, notes = measure_comm(backend="gloo", device_kind="cpu", num_procs=1, max_bytes=65536)
    assert frame.empty and "fewer than 2" in notes[0]
