"""Communication profile: collective times with torch.distributed, the timing code of every run.

`measure_group` times send/recv, all-reduce, all-gather, reduce-scatter and all-to-all on one
group for each buffer size 16 KiB x 2^i up to the maximum (comm.csv semantics: `bytes` is one
rank's full buffer, the gathered size for all-gather and the input of reduce-scatter, as
`tinker_opt.comm_cost` counts it). Sizes a factor 2 apart, from below the 64 KiB the planner
starts at, give each size regime of the library (comm_cost.Regime) enough rows to fit its
own latency and bandwidth. The sizes of one op are timed interleaved (every repeat calls each
size once) and each size reports the fastest of its calls (`ROW_QUANTILE`).
Its callers are the ranks of profile/comm_dist.py: under
torchrun on the user's nodes (`tinker-opt profile-comm`, intra- and inter-node groups), or the
processes `measure_comm` spawns on this node (npu: hccl, cuda: nccl; cpu: gloo), which set
torchrun's environment themselves, so there is one implementation. Without torchrun all groups
are on this node and every row is `intra_node`. An op the backend lacks (gloo has no
reduce-scatter) is left out and named in the notes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tinker_opt.comm_cost import COMM_OPS
from tinker_opt.profile.comm_groups import group_sizes
from tinker_opt.profile.store import COMM_COLUMNS, empty_comm

__all__ = ["CommPlan", "comm_sizes", "group_sizes", "measure_comm", "measure_group", "rows_frame"]


@dataclass(frozen=True)
class CommPlan:
    """What the ranks measure."""

    backend: str
    device_kind: str
    sizes: tuple[int, ...]
    warmup: int
    repeats: int
    timeout_s: float = 300.0
    """Longest wait of any rank (rendezvous, collective, barrier) before the run stops."""


SMALLEST_BYTES = 16 * 1024
"""The smallest buffer measured: a quarter of the 64 KiB where the planner's tables start
(hardware/comm_rows.py DEFAULT_COMM_SIZES), so that a small-message regime below 128 KiB has three sizes of
its own (hardware/regime_fit.py MIN_REGIME_SIZES). An all-to-all sends buffer / ranks to each
peer, twice the message of a ring's segment (gloo alltoall.cc vs allreduce.cc, allgather.cc:
buffer / (2 x ranks)), so it reaches a transport's switch at half the ring's buffer: on
loopback gloo its curve bends at 128 KiB, the rings' at 256 KiB; NCCL sends an all-to-all's
peers LL up to NCCL_P2P_LL_THRESHOLD (16 KiB) a channel (enqueue.cc addP2pToPlan)."""

ROW_QUANTILE = 0.0
"""Each size's time is this quantile of its timed calls, the fastest (per rank; then the median
over the ranks). Interference from other processes only adds time, so the fastest call is the
best estimate of the collective's own time (Chen & Revels, "Robust benchmarking in noisy
environments", arXiv:1608.04295, 2016: under such noise the minimum is the estimator to take;
Python's timeit documentation says the same of repeated timings), and the median over the ranks
keeps one rank's short call, its partner already waiting, from setting the row. Measured on the
shared 2-core machine (benchmarks/comm_row_statistic.py, benchmarks/results/comm28_*.md): at
load 10-12 the fastest call's rows fit 39-40 of 44 all-reduce / all-to-all rows within 10 %,
the lower quartile's 26-34, the median's 25-31, and the fastest varies least between runs."""


def comm_sizes(max_bytes: int) -> tuple[int, ...]:
    """16 KiB, 32 KiB, 64 KiB, ... (a factor 2 apart) up to max_bytes (at least the smallest)."""
    sizes = [SMALLEST_BYTES]
    while sizes[-1] * 2 <= max_bytes:
        sizes.append(sizes[-1] * 2)
    return tuple(sizes)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def setup_device(device_kind: str, local_rank: int):
    """The rank's device (its local rank's accelerator) and the buffers' dtype."""
    import torch

    torch.set_num_threads(1)
    if device_kind == "cpu":
        return torch.device("cpu"), torch.float32
    if device_kind == "npu":
        import torch_npu  # noqa: F401
    getattr(torch, device_kind).set_device(local_rank)
    return torch.device(device_kind, local_rank), torch.bfloat16


def sync_fn(kind: str):
    if kind == "cpu":
        return lambda: None
    import torch

    return getattr(torch, kind).synchronize


def _run_op(op: str, nbytes: int, group, members: tuple[int, ...], rank: int, device, dtype):
    """One call of `op` on a buffer of `nbytes`; returns a function that repeats it."""
    import torch
    import torch.distributed as dist

    group_size = len(members)
    numel = max(nbytes // torch.tensor([], dtype=dtype).element_size(), group_size)
    numel -= numel % group_size
    full = torch.ones(numel, device=device, dtype=dtype)
    part = torch.ones(numel // group_size, device=device, dtype=dtype)
    if op == "all_reduce":
        return lambda: dist.all_reduce(full, group=group)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(full, part, group=group)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(part, full, group=group)
    if op == "all_to_all":
        out = torch.empty_like(full)
        return lambda: dist.all_to_all_single(out, full, group=group)

    # send_recv: a ping-pong between the group's two members, half the round trip per message
    first, second = members

    def ping_pong():
        if rank == first:
            dist.send(full, second)
            dist.recv(full, second)
        else:
            dist.recv(full, first)
            dist.send(full, first)

    return ping_pong


def _time_sizes_us(calls: list, plan: CommPlan, group, sync) -> list[float]:
    """Each call's time (us): `plan.warmup` untimed calls each, then `plan.repeats` rounds that
    call every size once, each after a barrier of the group, so that a change of the machine's
    load during the run hits every size alike (sizes timed one after the other would each see
    another load: rows not monotone in the size). Each round's order is a permutation drawn
    from the round's number (the same on every rank): a fixed order would time one size always
    right after the largest (its buffers out of the caches, the socket's window grown), a cost
    of the order, not of the size. ROW_QUANTILE of each size's times."""
    import torch.distributed as dist

    for call in calls:
        for _ in range(plan.warmup):
            call()
    samples: list[list[float]] = [[] for _ in calls]
    for step in range(plan.repeats):
        for index in np.random.default_rng(step).permutation(len(calls)):
            dist.barrier(group=group)
            sync()
            start = time.perf_counter()
            calls[index]()
            sync()
            samples[index].append((time.perf_counter() - start) * 1e6)
    return [float(np.quantile(times, ROW_QUANTILE)) for times in samples]


def measure_group(
    plan: CommPlan, members: tuple[int, ...], rank: int, group, device, dtype, sync
) -> tuple[list[tuple], list[str]]:
    """(op, group_size, bytes, time_us) rows of this rank in `group`, and the ops it lacks."""
    rows, missing = [], []
    size = len(members)
    for op in COMM_OPS:
        if op == "send_recv" and size != 2:
            continue
        try:
            calls = [_run_op(op, n, group, members, rank, device, dtype) for n in plan.sizes]
            times = _time_sizes_us(calls, plan, group, sync)
        except (RuntimeError, NotImplementedError, ValueError) as exc:
            missing.append(f"{op}: {str(exc).splitlines()[0][:120]}")
            continue
        half = 2 if op == "send_recv" else 1  # a ping-pong is two messages
        rows += [(op, size, n, round(t / half, 3)) for n, t in zip(plan.sizes, times, strict=True)]
    return rows, missing


def rows_frame(rows: list[tuple], scope: str | None = None) -> pd.DataFrame:
    """comm.csv rows from every rank's (scope, op, group_size, bytes, time_us, rank): the median
    over the ranks of each rank's median time (the concurrent groups of a kind and their
    members), only `scope`'s rows when given."""
    frame = pd.DataFrame(rows, columns=["scope", "op", "group_size", "bytes", "time_us", "rank"])
    if scope is not None:
        frame = frame[frame["scope"] == scope]
    if frame.empty:
        return empty_comm()
    keys = ["op", "group_size", "scope", "bytes"]
    merged = frame.groupby(keys, as_index=False, sort=True)["time_us"].median()
    merged["time_us"] = merged["time_us"].round(3)
    return merged[list(COMM_COLUMNS)].reset_index(drop=True)


def _spawn(plan: CommPlan, num_procs: int, out_file: str) -> list[subprocess.Popen]:
    """One `python -m tinker_opt.profile.comm_dist` per rank with torchrun's environment for one node
    (no re-import of the caller's __main__)."""
    package_root = str(Path(__file__).resolve().parents[2])
    base = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        WORLD_SIZE=str(num_procs),
        LOCAL_WORLD_SIZE=str(num_procs),
        GROUP_RANK="0",
    )
    plan_json = json.dumps(asdict(plan))
    return [
        subprocess.Popen(
            [sys.executable, "-m", "tinker_opt.profile.comm_dist", plan_json, out_file],
            env={**base, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(num_procs)
    ]


def _wait(processes: list[subprocess.Popen], timeout_s: float) -> str | None:
    """None when every rank exited cleanly, else why not (the ranks are killed)."""
    deadline = time.monotonic() + timeout_s
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            break
    failed = [p for p in processes if p.poll() is None or p.returncode != 0]
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()
    if not failed:
        return None
    if any(p.returncode is None or p.returncode < 0 for p in failed):
        return f"communication measurement timed out after {timeout_s:.0f} s"
    lines = [(p.stderr.read() or "").strip().splitlines() for p in failed]
    tail = next((line[-1] for line in lines if line), f"exit code {failed[0].returncode}")
    return f"communication measurement failed: {tail}"


def measure_comm(
    *,
    backend: str,
    device_kind: str,
    num_procs: int,
    max_bytes: int,
    warmup: int = 3,
    repeats: int = 5,
    timeout_s: float = 300.0,
) -> tuple[pd.DataFrame, list[str]]:
    """comm.csv rows measured with `num_procs` processes on this node, and notes on what could
    not be measured."""
    if num_procs < 2:
        return empty_comm(), ["communication not measured: fewer than 2 processes"]
    plan = CommPlan(
        backend=backend,
        device_kind=device_kind,
        sizes=comm_sizes(max_bytes),
        warmup=warmup,
        repeats=repeats,
        timeout_s=timeout_s,
    )
    with tempfile.TemporaryDirectory(prefix="tinker-opt-comm-") as tmp:
        out_file = os.path.join(tmp, "comm.json")
        problem = _wait(_spawn(plan, num_procs, out_file), timeout_s + 30)
        if problem is not None:
            return empty_comm(), [problem]
        result = json.loads(Path(out_file).read_text(encoding="utf-8"))
    return rows_frame([tuple(row) for row in result["rows"]]), result["missing"]
