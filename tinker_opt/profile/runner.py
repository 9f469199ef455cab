"""`run_profile`: measure the profile space of a model and write the profiled-data folder.

The folder (README, "Output folders") gets blocks.csv (rewritten atomically after
every row, so an interrupted run loses at most one row), comm.csv, meta.json and profile.log. A
rerun into the same folder resumes: rows already measured (`ok`) or found out of memory (`oom`)
are kept; rows that failed otherwise are measured again.

This module orchestrates: the space, resume, one process or one per device (workers.py), the
collectives and meta.json. How one row is measured is rows.py; the settings are settings.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import platform
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import torch

import tinker_opt
from tinker_opt.errors import ConfigError, ProfileDataError
from tinker_opt.profile import store
from tinker_opt.profile.device import Device, detect_device
from tinker_opt.profile.kernels import KernelSet
from tinker_opt.profile.meta import META_FILE, ProfileMeta, read_meta, write_meta
from tinker_opt.profile.rows import block_kernels, kernel_set, measure_row, row_key
from tinker_opt.profile.settings import MIB, MeasureSettings
from tinker_opt.profile.space import OomFrontier, ProfilePoint, profile_space
from tinker_opt.specs import ModelSpec, TrainSpec

__all__ = [
    "MeasureSettings",
    "comm_rows",
    "default_profile_dir",
    "existing_rows",
    "profile_blocks",
    "run_profile",
]


def default_profile_dir(
    model_name: str, model_size: str, root: Path = store.DEFAULT_PROFILE_ROOT
) -> Path:
    """`<root>/profiled-data-<name>-<size>-<yymmdd-HHMMSS>` (Tinker's naming)."""
    return Path(root) / f"profiled-data-{model_name}-{model_size}-{datetime.now():%y%m%d-%H%M%S}"


class _Log:
    """Appends to profile.log and forwards each line to the caller's `log`."""

    def __init__(self, path: Path, forward: Callable[[str], None] | None) -> None:
        self.path, self.forward = path, forward

    def __call__(self, message: str) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(f"{datetime.now():%Y-%m-%d %H:%M:%S} {message}\n")
        if self.forward is not None:
            self.forward(message)


def existing_rows(out_dir: Path) -> dict[tuple, dict[str, Any]]:
    """Rows of a previous run in out_dir worth keeping (`ok` and `oom`), by key."""
    path = out_dir / store.BLOCKS_FILE
    if not path.exists():
        return {}
    try:
        frame = pd.read_csv(path, dtype={"status": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError):
        return {}
    if any(c not in frame.columns for c in store.BLOCK_COLUMNS):
        return {}
    kept = frame[frame["status"].isin(["ok", "oom"])]
    return {row_key(row): row for row in kept.to_dict("records")}


def _same_model(stored: dict[str, Any], model: ModelSpec) -> bool:
    """A folder's model is this one; keys an older meta.json lacks (fields added since, such as
    fused_kernels) take their defaults."""
    try:
        return ModelSpec.from_dict(stored) == model
    except ConfigError:
        return False


def _check_same_model(out_dir: Path, model: ModelSpec) -> None:
    stored = read_meta(out_dir).model if (out_dir / META_FILE).exists() else None
    if stored is not None and not _same_model(stored, model):
        raise ProfileDataError(
            f"{out_dir} holds a profile of a different model; profile into a new folder "
            "(or delete that one)"
        )


def _write_blocks(out_dir: Path, rows: dict[tuple, dict[str, Any]]) -> None:
    frame = pd.DataFrame(list(rows.values()), columns=list(store.BLOCK_COLUMNS))
    for column in store.BLOCK_COLUMNS:
        if column not in ("block", "status"):
            frame[column] = pd.to_numeric(frame[column]).round().astype("Int64")
    store.write_blocks_csv(out_dir, frame)


def profile_blocks(
    model: ModelSpec,
    settings: MeasureSettings,
    out_dir: Path,
    device: Device,
    *,
    train: TrainSpec | None,
    progress,
    log,
    kernels: KernelSet | None = None,
) -> dict[tuple, dict[str, Any]]:
    """Measure every row of the space not already in out_dir, in one process or one per device
    (workers.py); blocks.csv is rewritten after each row."""
    points = profile_space(model, settings.limits(train))
    rows = existing_rows(out_dir)
    frontier = OomFrontier(p for p in points if rows.get(p.key, {}).get("status") == "oom")
    budget = settings.memory_budget_bytes(device)
    kept = sum(p.key in rows for p in points)
    workers = settings.num_workers(device)
    log(
        f"profile space: {len(points)} rows ({kept} kept from a previous run) on {device.kind} '{device.name}'"
        f"{f', {workers} workers' if workers > 1 else ''}"
    )
    done = 0

    def record(point: ProfilePoint, row: dict[str, Any] | None) -> None:
        nonlocal done
        if row is not None:
            rows[point.key] = row
            _write_blocks(out_dir, rows)
        done += 1
        if progress is not None:
            progress(done, len(points), point.label)

    pending = [p for p in points if p.key not in rows]
    for point in points:
        if point.key in rows:
            record(point, None)
    if workers > 1 and pending:
        from tinker_opt.profile.workers import measure_in_workers

        measure_in_workers(
            model,
            settings,
            pending,
            device_kind=device.kind,
            num_workers=workers,
            on_row=record,
            log=log,
        )
    else:
        for point in pending:
            record(
                point,
                measure_row(model, point, device, settings, rows, frontier, budget, log, kernels),
            )
    return rows


def comm_rows(
    settings: MeasureSettings, device: Device, log: Callable[[str], None]
) -> tuple[pd.DataFrame, str]:
    """comm.csv rows and where they come from: a hardware file, a measurement, or nothing."""
    if settings.hardware:
        from tinker_opt.hardware import comm_table, load_hardware

        return comm_table(
            load_hardware(settings.hardware), max_group_size=settings.max_npu
        ), f"hardware {settings.hardware}"
    if settings.comm == "skip":
        return store.empty_comm(), "skipped"
    from tinker_opt.profile.comm import measure_comm

    workers = settings.num_workers(device)
    procs = settings.comm_procs or (workers if workers > 1 else 2 if device.kind == "cpu" else 1)
    max_bytes = settings.comm_max_bytes or (16 * MIB if device.kind == "cpu" else 256 * MIB)
    frame, notes = measure_comm(
        backend=device.comm_backend,
        device_kind=device.kind,
        num_procs=procs,
        max_bytes=max_bytes,
        repeats=settings.comm_repeats,
    )
    for note in notes:
        log(note)
    return frame, f"measured ({device.comm_backend}, {procs} processes, up to {max_bytes} bytes)"


def _profile_comm(settings: MeasureSettings, device: Device, out_dir: Path, log) -> str:
    path = out_dir / store.COMM_FILE
    if path.exists() and settings.hardware is None:
        try:
            if not store.read_comm_csv(path).empty:
                log("comm.csv kept from a previous run")
                return "kept from a previous run"
        except ProfileDataError:
            pass
    started = time.perf_counter()
    frame, source = comm_rows(settings, device, log)
    store.write_comm_csv(out_dir, frame)
    log(f"comm.csv: {len(frame)} rows, {source}, {time.perf_counter() - started:.1f} s")
    return source


def _versions() -> dict[str, str]:
    versions = {
        "tinker_opt": tinker_opt.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    npu = getattr(torch, "npu", None)
    if npu is not None:
        import importlib.metadata

        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions["torch_npu"] = importlib.metadata.version("torch_npu")
    return versions


def _meta(
    model,
    settings,
    device,
    train,
    started: str,
    rows,
    comm_source: str,
    seconds: float,
    kernels: dict[str, Any],
) -> ProfileMeta:
    statuses = [str(r["status"]) for r in rows.values()]
    return ProfileMeta(
        tool="tinker-opt",
        format_version=1,
        model=model.to_dict(),
        device={"kind": device.kind, "name": device.name, "count": device.count},
        versions=_versions(),
        settings=dataclasses.asdict(settings),
        train=None
        if train is None
        else {
            "micro_batch_size": train.micro_batch_size,
            "global_batch_size": train.global_batch_size,
            "strategy": train.strategy.to_dict(),
        },
        kernels=kernels,
        comm_source=comm_source,
        started=started,
        finished=datetime.now().isoformat(timespec="seconds"),
        profile_seconds=round(seconds, 1),
        rows={
            "total": len(statuses),
            "ok": statuses.count("ok"),
            "oom": statuses.count("oom"),
            "failed": sum(s not in ("ok", "oom") for s in statuses),
        },
    )


def run_profile(
    model: ModelSpec,
    settings: MeasureSettings,
    out_dir: Path,
    *,
    train: TrainSpec | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Profile `model` on the local device into `out_dir` (blocks.csv, comm.csv, meta.json, profile.log)."""
    if settings.blocks == "megatron-core":  # a missing install is one error, not one per row
        from tinker_opt.profile.mcore_blocks import require_megatron

        require_megatron()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _check_same_model(out_dir, model)
    logger = _Log(out_dir / store.LOG_FILE, log)
    device = detect_device(settings.device)
    started, clock = datetime.now().isoformat(timespec="seconds"), time.perf_counter()
    logger(f"profiling into {out_dir} with {dataclasses.asdict(settings)}")
    if not (out_dir / META_FILE).exists():  # provisional, so that an interrupted run can resume
        write_meta(
            out_dir,
            ProfileMeta(
                tool="tinker-opt", format_version=1, model=model.to_dict(), started=started
            ),
        )
    kernels = kernel_set(model, settings, device)
    for warning in kernels.warnings:
        logger(f"WARNING {warning}")
    rows = profile_blocks(
        model,
        settings,
        out_dir,
        device,
        train=train,
        progress=progress,
        log=logger,
        kernels=kernels,
    )
    comm_source = _profile_comm(settings, device, out_dir, logger)
    seconds = time.perf_counter() - clock
    kernel_meta = {**kernels.summary(), "blocks": block_kernels(model, settings, rows, kernels)}
    write_meta(
        out_dir,
        _meta(model, settings, device, train, started, rows, comm_source, seconds, kernel_meta),
    )
    ok = sum(str(r["status"]) == "ok" for r in rows.values())
    logger(f"done in {seconds:.1f} s: {ok} of {len(rows)} rows measured")
    if ok == 0:
        raise ProfileDataError(
            f"no row of the profile space could be measured on {device.kind}; see {out_dir / store.LOG_FILE}"
        )
    return out_dir
