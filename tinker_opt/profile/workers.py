"""Profiling on several local devices at once: one worker process per device, the rows spread over them.

The parent (`measure_in_workers`) deals the rows still to measure round-robin over N workers
(in the space's least-memory-first order, so each worker's share keeps that order and its own
out-of-memory frontier), starts `python -m tinker_opt.profile.workers JOB RANK` per device
(npu / cuda: device RANK; cpu: N processes sharing the cores), and reads the rows each worker
appends as JSON lines, so blocks.csv grows while they run and an interrupted run resumes as a
single-process one does. A row is measured by the same `rows.measure_row` in either mode, so the
two give the same rows (times aside, which are measurements).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinker_opt.errors import ProfileDataError
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.space import ProfilePoint
from tinker_opt.specs import ModelSpec

POLL_S = 0.2


def deal(points: list[ProfilePoint], num_workers: int) -> list[list[ProfilePoint]]:
    """Round-robin shares, each in the original order."""
    return [points[rank::num_workers] for rank in range(num_workers)]


def _point_to_json(point: ProfilePoint) -> dict[str, Any]:
    return {"block": point.block, "shape": dataclasses.asdict(point.shape)}


def _point_from_json(data: dict[str, Any]) -> ProfilePoint:
    return ProfilePoint(data["block"], Shape(**data["shape"]))


def _spawn(job_file: Path, num_workers: int, threads: int) -> list[subprocess.Popen]:
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(threads),
        PYTHONPATH=os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p),
    )
    return [
        subprocess.Popen(
            [sys.executable, "-m", "tinker_opt.profile.workers", str(job_file), str(rank)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(num_workers)
    ]


class _Reader:
    """Reads the complete JSON lines a worker appended since the last call."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def new_records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("r", encoding="utf-8") as handle:
            handle.seek(self.offset)
            text = handle.read()
        complete = text[: text.rfind("\n") + 1]
        self.offset += len(complete.encode("utf-8"))
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


def measure_in_workers(
    model: ModelSpec,
    settings,
    points: list[ProfilePoint],
    *,
    device_kind: str,
    num_workers: int,
    on_row: Callable[[ProfilePoint, dict[str, Any]], None],
    log: Callable[[str], None],
    timeout_s: float | None = None,
) -> None:
    """Measure `points` with one process per device; `on_row` gets each row as it arrives."""
    shares = deal(points, num_workers)
    threads = max(1, (os.cpu_count() or 1) // num_workers) if device_kind == "cpu" else 1
    with tempfile.TemporaryDirectory(prefix="tinker-opt-workers-") as tmp:
        job = {
            "model": model.to_dict(),
            "settings": dataclasses.asdict(settings),
            "device_kind": device_kind,
            "threads": threads,
            "shares": [[_point_to_json(p) for p in share] for share in shares],
            "outputs": [str(Path(tmp) / f"rows-{rank}.jsonl") for rank in range(num_workers)],
        }
        job_file = Path(tmp) / "job.json"
        job_file.write_text(json.dumps(job), encoding="utf-8")
        readers = [_Reader(Path(path)) for path in job["outputs"]]
        processes = _spawn(job_file, num_workers, threads)
        log(f"{num_workers} workers on {device_kind}: {[len(s) for s in shares]} rows each")
        _collect(processes, readers, on_row, log, timeout_s)


def _drain(readers: list[_Reader], on_row, log) -> None:
    for rank, reader in enumerate(readers):
        for record in reader.new_records():
            if "log" in record:
                log(f"[worker {rank}] {record['log']}")
            else:
                on_row(_point_from_json(record["point"]), record["row"])


def _collect(processes, readers, on_row, log, timeout_s: float | None) -> None:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while any(p.poll() is None for p in processes):
            _drain(readers, on_row, log)
            if deadline is not None and time.monotonic() > deadline:
                raise ProfileDataError(
                    f"profile workers still running after {timeout_s:.0f} s; stopped them"
                )
            time.sleep(POLL_S)
        _drain(readers, on_row, log)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    failed = [(rank, p) for rank, p in enumerate(processes) if p.returncode != 0]
    if failed:
        rank, process = failed[0]
        tail = (process.stderr.read() or "").strip().splitlines()
        raise ProfileDataError(
            f"profile worker {rank} failed: {tail[-1] if tail else f'exit code {process.returncode}'}"
        )


def _worker(job: dict[str, Any], rank: int) -> None:
    """One device's share: measure each row and append it (and the log lines) to its JSON-lines file."""
    import torch

    from tinker_opt.profile.device import detect_device
    from tinker_opt.profile.rows import kernel_set, measure_row
    from tinker_opt.profile.settings import MeasureSettings
    from tinker_opt.profile.space import OomFrontier

    torch.set_num_threads(job["threads"])
    kind = job["device_kind"]
    if kind != "cpu":
        if kind == "npu":
            import torch_npu  # noqa: F401
        getattr(torch, kind).set_device(rank)
    device = detect_device(kind)
    settings = MeasureSettings.from_dict(job["settings"])
    model = ModelSpec.from_dict(job["model"])
    kernels = kernel_set(model, settings, device)
    rows: dict[tuple, dict[str, Any]] = {}
    frontier = OomFrontier()
    with open(job["outputs"][rank], "a", encoding="utf-8") as out:

        def log(message: str) -> None:
            out.write(json.dumps({"log": message}) + "\n")
            out.flush()

        budget = settings.memory_budget_bytes(device)
        for data in job["shares"][rank]:
            point = _point_from_json(data)
            rows[point.key] = measure_row(
                model, point, device, settings, rows, frontier, budget, log, kernels
            )
            out.write(json.dumps({"point": data, "row": rows[point.key]}) + "\n")
            out.flush()


if __name__ == "__main__":
    _worker(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")), int(sys.argv[2]))
