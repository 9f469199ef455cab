"""Communication profile: collective times with torch.distributed across the local devices.

Spawns one process per device (npu: hccl, cuda: nccl; cpu: gloo with several processes) and
times send/recv, all-reduce, all-gather, reduce-scatter and all-to-all for each group size
2, 4, ... up to the process count and each buffer size 64 KiB x 4^i up to the maximum
(comm.csv semantics: `bytes` is one rank's full buffer, the gathered size for all-gather and the
input of reduce-scatter, as `tinker_opt.comm_cost` counts it). All groups are on this node, so
every row is `intra_node`; inter-node figures come from a hardware file or the cost model.
An op the backend lacks (gloo has no reduce-scatter) is left out and named in the log.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from tinker_opt.comm_cost import COMM_OPS
from tinker_opt.hardware import DEFAULT_COMM_SIZES
from tinker_opt.profile.store import COMM_COLUMNS, empty_comm


@dataclass(frozen=True)
class CommPlan:
    """What the worker processes measure."""

    backend: str
    device_kind: str
    num_procs: int
    sizes: tuple[int, ...]
    warmup: int
    repeats: int
    port: int


def comm_sizes(max_bytes: int) -> tuple[int, ...]:
    """64 KiB, 256 KiB, ... up to max_bytes (at least the smallest)."""
    return tuple(s for s in DEFAULT_COMM_SIZES if s <= max_bytes) or DEFAULT_COMM_SIZES[:1]


def group_sizes(num_procs: int) -> list[int]:
    return [2**i for i in range(1, num_procs.bit_length()) if 2**i <= num_procs]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _setup_device(plan: CommPlan, rank: int):
    import torch

    torch.set_num_threads(1)
    if plan.device_kind == "cpu":
        return torch.device("cpu"), torch.float32
    if plan.device_kind == "npu":
        import torch_npu  # noqa: F401
    getattr(torch, plan.device_kind).set_device(rank)
    return torch.device(plan.device_kind, rank), torch.bfloat16


def _run_op(op: str, nbytes: int, group, group_size: int, rank: int, device, dtype):
    """One call of `op` on a buffer of `nbytes`; returns a function that repeats it."""
    import torch
    import torch.distributed as dist

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

    # send_recv: a ping-pong between ranks 0 and 1, half the round trip per message
    def ping_pong():
        if rank == 0:
            dist.send(full, 1)
            dist.recv(full, 1)
        else:
            dist.recv(full, 0)
            dist.send(full, 0)

    return ping_pong


def _time_us(call, plan: CommPlan, group, sync) -> float:
    import torch.distributed as dist

    samples = []
    for step in range(plan.warmup + plan.repeats):
        dist.barrier(group=group)
        sync()
        start = time.perf_counter()
        call()
        sync()
        if step >= plan.warmup:
            samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def _measure_group(
    plan: CommPlan, rank: int, group, group_size: int, device, dtype, sync
) -> tuple[list, list]:
    rows, missing = [], []
    for op in COMM_OPS:
        if op == "send_recv" and group_size != 2:
            continue
        try:
            for nbytes in plan.sizes:
                time_us = _time_us(
                    _run_op(op, nbytes, group, group_size, rank, device, dtype), plan, group, sync
                )
                rows.append(
                    (
                        op,
                        group_size,
                        "intra_node",
                        nbytes,
                        round(time_us / (2 if op == "send_recv" else 1), 3),
                    )
                )
        except (RuntimeError, NotImplementedError, ValueError) as exc:
            missing.append(f"{op} (group {group_size}): {str(exc).splitlines()[0][:120]}")
    return rows, missing


def _worker(rank: int, plan: CommPlan, out_file: str) -> None:
    """One process of the measurement; rank 0 writes the rows as JSON."""
    import torch.distributed as dist

    device, dtype = _setup_device(plan, rank)
    dist.init_process_group(
        plan.backend,
        init_method=f"tcp://127.0.0.1:{plan.port}",
        rank=rank,
        world_size=plan.num_procs,
    )
    sync = _sync_fn(plan.device_kind)
    rows, missing = [], []
    try:
        for group_size in group_sizes(plan.num_procs):
            group = dist.new_group(list(range(group_size)))
            if rank < group_size:
                got, lacks = _measure_group(plan, rank, group, group_size, device, dtype, sync)
                rows, missing = rows + got, missing + lacks
            dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out_file).write_text(json.dumps({"rows": rows, "missing": missing}), encoding="utf-8")


def _sync_fn(kind: str):
    if kind == "cpu":
        return lambda: None
    import torch

    return getattr(torch, kind).synchronize


def _spawn(plan: CommPlan, out_file: str) -> list[subprocess.Popen]:
    """One `python -m tinker_opt.profile.comm` per rank (no re-import of the caller's __main__)."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p),
    )
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tinker_opt.profile.comm",
                str(rank),
                json.dumps(asdict(plan)),
                out_file,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(plan.num_procs)
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
    tail = (failed[0].stderr.read() or "").strip().splitlines()
    return f"communication measurement failed: {tail[-1] if tail else f'exit code {failed[0].returncode}'}"


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
    """comm.csv rows measured with `num_procs` processes, and notes on what could not be measured."""
    if num_procs < 2:
        return empty_comm(), ["communication not measured: fewer than 2 processes"]
    plan = CommPlan(
        backend=backend,
        device_kind=device_kind,
        num_procs=num_procs,
        sizes=comm_sizes(max_bytes),
        warmup=warmup,
        repeats=repeats,
        port=_free_port(),
    )
    with tempfile.TemporaryDirectory(prefix="tinker-opt-comm-") as tmp:
        out_file = os.path.join(tmp, "comm.json")
        problem = _wait(_spawn(plan, out_file), timeout_s)
        if problem is not None:
            return empty_comm(), [problem]
        result = json.loads(Path(out_file).read_text(encoding="utf-8"))
    frame = (
        pd.DataFrame(result["rows"], columns=list(COMM_COLUMNS)) if result["rows"] else empty_comm()
    )
    return frame, result["missing"]


if __name__ == "__main__":
    _plan = json.loads(sys.argv[2])
    _worker(int(sys.argv[1]), CommPlan(**{**_plan, "sizes": tuple(_plan["sizes"])}), sys.argv[3])
