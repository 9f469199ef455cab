"""profile-comm under torchrun: two agents on localhost play two nodes of two ranks each (gloo).

Each run is bounded (the verb's --timeout and a wall-clock limit here), so a hang fails the test
instead of blocking CI; few sizes and repeats keep a run near 20 s on two cores.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tinker_opt.comm_cost import COMM_OPS
from tinker_opt.profile.comm_dist import FAIL_RANK_ENV
from tinker_opt.profile.meta import read_meta

ROOT = Path(__file__).resolve().parents[1]
WALL_S = 150
MEASURE = ["--device", "cpu", "--max-bytes", str(1 << 19), "--warmup", "2", "--repeats", "7"]
SIZES = {16384 * 2**i for i in range(6)}  # 16 KiB .. 512 KiB, a factor 2 apart


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _verb() -> list[str]:
    """The console script beside this interpreter (as the README's launch line), else the module."""
    script = Path(sys.executable).parent / "tinker-opt"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tinker_opt.cli"]


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **extra}


def run_two_agents(out: Path, *args: str, env: dict[str, str] | None = None):
    """Start two torchrun agents (--nnodes 2 --nproc-per-node 2); their exit codes and output."""
    port = _free_port()
    agents = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
            + ["--nproc-per-node", "2", "--node-rank", str(node), "--rdzv-backend", "c10d"]
            + ["--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"test-{port}"]
            + ["--no-python", *_verb(), "profile-comm", "--output-dir", str(out), *args],
            env=env or _env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    outputs = []
    try:
        for agent in agents:
            outputs.append(agent.communicate(timeout=WALL_S)[0])
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    return [agent.returncode for agent in agents], "\n".join(outputs)


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory) -> Path:
    """One successful two-node run (shared by the checks of its output)."""
    out = tmp_path_factory.mktemp("comm") / "profile"
    codes, output = run_two_agents(out, *MEASURE, "--timeout", "60")
    assert codes == [0, 0], output[-3000:]
    return out


def test_both_tiers_with_the_right_group_sizes(cluster_run):
    """comm.csv holds intra- and inter-node rows of every op gloo has, groups of 2 (2 ranks a node,
    2 nodes); the whole world (4 ranks, 2 a node) is in comm_world.csv."""
    comm = pd.read_csv(cluster_run / "comm.csv")
    assert set(comm["scope"]) == {"intra_node", "inter_node"}
    for scope in ("intra_node", "inter_node"):
        rows = comm[comm["scope"] == scope]
        assert set(rows["op"]) == set(COMM_OPS) and set(rows["group_size"]) == {2}
        assert set(rows["bytes"]) == SIZES and (rows["time_us"] > 0).all()
    world = pd.read_csv(cluster_run / "comm_world.csv")
    assert set(world["group_size"]) == {4} and set(world["scope"]) == {"world"}
    assert set(world["op"]) == set(COMM_OPS) - {"send_recv"}


def test_meta_records_the_topology(cluster_run):
    """meta.json says what the ranks saw: 2 nodes of 2 devices, their hosts, the backend."""
    entry = read_meta(cluster_run).extra["comm_profile"]
    assert entry["topology"]["num_nodes"] == 2 and entry["topology"]["devices_per_node"] == 2
    assert len(entry["topology"]["hostnames"]) == 2 and entry["backend"] == "gloo"
    assert "2 node(s)" in (cluster_run / "profile-comm.log").read_text(encoding="utf-8")


def test_a_failing_rank_stops_every_rank_with_one_line(tmp_path):
    """Rank 3 fails: both agents end non-zero well before the timeout, one error line names it."""
    codes, output = run_two_agents(
        tmp_path / "profile", *MEASURE, "--timeout", "60", env=_env(**{FAIL_RANK_ENV: "3"})
    )
    assert codes[0] != 0 and codes[1] != 0
    errors = [line for line in output.splitlines() if line.startswith("error: profile-comm")]
    assert len(errors) == 1 and "rank 3 (node 1" in errors[0], output[-3000:]
    log = (tmp_path / "profile" / "profile-comm.log").read_text(encoding="utf-8")
    assert "rank 3 (node 1" in log


def test_a_rank_alone_times_out_with_one_line(tmp_path):
    """A rank whose peers never join (a node that failed before starting) stops at --timeout with a
    one-line error, exit code 2, no traceback."""
    env = _env(
        RANK="0",
        WORLD_SIZE="2",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        GROUP_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
    )
    done = subprocess.run(
        [*_verb(), "profile-comm", "--output-dir", str(tmp_path), "--device", "cpu"]
        + ["--timeout", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=WALL_S,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not join the 2 ranks within 3 s" in lines[0]


def test_calibrated_description_prices_the_measured_rate(cluster_run, tmp_path):
    """calibrate --comm on the run: the description prices a 2-node all-reduce (and all-to-all)
    at its fitted size regimes, as the profile folder's own comm.csv does (one fit,
    hardware/regime_fit.py fit_curves, and one pricing); search accepts the description.
    Every comparison is of two pricings of the same fit, none against a time: whichever regimes
    the F-tests keep on live rows, they agree (test_comm_regimes.py
    test_description_prices_as_the_fit_on_noisy_rows checks it on seeded rows of a loaded
    machine)."""
    from cli_support import invoke_cli, write_synthetic_profile

    from tinker_opt.comm_cost import collective_time_us
    from tinker_opt.costs.comm_model import CommModel, GroupPlacement
    from tinker_opt.hardware import comm_table, load_hardware
    from tinker_opt.profile.store import read_comm_csv

    mine = tmp_path / "mine.json"
    done = invoke_cli("calibrate", "--comm", str(cluster_run / "comm.csv"))
    assert done.returncode != 0  # --hardware and -o are required
    done = invoke_cli(
        "calibrate", "--comm", str(cluster_run / "comm.csv"), "--hardware", "a100-80gb", "-o", str(mine)
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "inter_node" in done.stdout and "all_reduce" in done.stdout
    spec = load_hardware(mine)
    described = CommModel(comm_table(spec, max_group_size=8), hardware=spec)
    comm = read_comm_csv(cluster_run / "comm.csv")
    direct = CommModel(comm)  # the measured folder's comm.csv, used as is
    two_nodes = GroupPlacement("inter_node", 1, 2)
    for op in ("all_reduce", "all_to_all"):
        for nbytes in sorted(SIZES):
            link = spec.inter_node.for_op(op, nbytes)  # a100-80gb: one card a device
            line = collective_time_us(op, 2, nbytes, link.bandwidth_gbs, link.latency_us)
            assert described.time_us(op, 2, two_nodes, nbytes) == pytest.approx(line, rel=1e-3)
            assert direct.time_us(op, 2, "inter_node", nbytes) == pytest.approx(line, rel=1e-3)
    profile = write_synthetic_profile(tmp_path / "profiled-data-llama-tiny-test")
    found = invoke_cli(
        "search", "--profiled-data-path", str(profile), "--hardware", str(mine),
        "--global-batch-size", "16", "--num-nodes", "2", "--num-npus-per-node", "2",
        "--output-dir", str(tmp_path / "results"), "--top-k", "2", "--time-limit", "20", "--quiet",
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
