"""Measured communication profile (gloo, two processes on the CPU)."""

from __future__ import annotations

from tinker_opt.profile.comm import comm_sizes, group_sizes, measure_comm
from tinker_opt.profile.store import COMM_OPS


def test_sizes_and_groups():
    """Sizes run 16 KiB x 2^i up to the maximum (at least the smallest); groups 2, 4, ... up to
    the process count, and the count itself."""
    assert comm_sizes(1 << 20) == tuple(16384 * 2**i for i in range(7))
    assert comm_sizes(100_000) == (16384, 32768, 65536) and comm_sizes(1) == (16384,)
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
    assert set(frame["op"]) == set(COMM_OPS) and len(frame) == len(COMM_OPS) * 5  # 16..256 KiB
    assert (frame["time_us"] > 0).all() and set(frame["scope"]) == {"intra_node"}


def test_single_process_measures_nothing():
    """With one process there is nothing to measure, and the note says why."""
    frame, notes = measure_comm(backend="gloo", device_kind="cpu", num_procs=1, max_bytes=65536)
    assert frame.empty and "fewer than 2" in notes[0]


def test_profile_comm_without_torchrun_measures_this_node(tmp_path, monkeypatch):
    """profile-comm outside torchrun: this node's processes (2 on the CPU), intra-node rows, the
    topology of one node in meta.json."""
    from cli_support import invoke_cli

    from tinker_opt.profile.meta import read_meta
    from tinker_opt.profile.store import read_comm_csv

    monkeypatch.delenv("RANK", raising=False)
    done = invoke_cli(
        "profile-comm", "--output-dir", str(tmp_path), "--device", "cpu",
        "--max-bytes", "65536", "--warmup", "0", "--repeats", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    comm = read_comm_csv(tmp_path / "comm.csv")
    assert set(comm["scope"]) == {"intra_node"} and set(comm["group_size"]) == {2}
    assert set(comm["op"]) == set(COMM_OPS) and not (tmp_path / "comm_world.csv").exists()
    topology = read_meta(tmp_path).extra["comm_profile"]["topology"]
    assert topology["num_nodes"] == 1 and topology["devices_per_node"] == 2
