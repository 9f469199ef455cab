"""`run_profile`: measure the profile space of a model and write the profiled-data folder.

The folder (README, "Output folders") gets blocks.csv (rewritten atomically after
every row, so an interrupted run loses at most one row), comm.csv, meta.json and profile.log. A
rerun into the same folder resumes: rows already measured (`ok`) or found out of memory (`oom`)
are kept; rows that failed otherwise are measured again.
"""

from __future__ import annotations

import dataclasses
import gc
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import torch

import tinker_opt
from tinker_opt.config import ProfileSettings
from tinker_opt.errors import ConfigError, ProfileDataError
from tinker_opt.profile import store
from tinker_opt.profile.device import Device, detect_device
from tinker_opt.profile.meta import META_FILE, ProfileMeta, read_meta, write_meta
from tinker_opt.profile.measure import Measurement, measure_block
from tinker_opt.profile.space import OomFrontier, ProfilePoint, SpaceLimits, profile_space
from tinker_opt.profile.subgraphs import build_block
from tinker_opt.specs import ModelSpec, TrainSpec

CPU_MEMORY_FRACTION = 0.5
"""On the CPU, rows predicted to need more than this share of the available memory count as `oom`."""
MIB = 2**20


@dataclass(frozen=True, kw_only=True)
class MeasureSettings:
    """How to measure: the `profile` settings (config.ProfileSettings, whose defaults are the only
    ones) plus the knobs the command line does not expose, which default here."""

    device: str
    """auto | npu | cuda | cpu"""
    max_npu: int
    """Largest tensor-parallel size to profile (devices per node); the script's own tp and prof_tp
    multiples of it are profiled too (tensor parallelism across nodes)."""
    max_mbs: int
    """Largest micro-batch size; 1, 2, 4, ... up to it (and the script's own) are profiled."""
    warmup: int
    """Untimed passes before the timed ones (the memory pass counts as the first)."""
    repeats: int
    """Timed forward + backward passes per row (the median is kept); at least 5."""
    prof_tp: tuple[int, ...] | None = None
    prof_sp: tuple[int, ...] | None = None
    max_ep: int | None = None
    """Largest expert-parallel size to profile (None: num_experts; the script's own ep is always profiled)."""
    hardware: str | None = None
    """A hardware description (shipped name or JSON file): comm.csv is computed from it."""
    prof_cp: tuple[int, ...] | None = None
    """Context-parallel sizes beyond 1 (default: the script's cp when > 1)."""
    prof_ep: tuple[int, ...] | None = None
    """Expert-parallel sizes to profile (default: every divisor of num_experts up to max_ep, and the script's)."""
    prof_etp: tuple[int, ...] | None = None
    """Expert tensor-parallel sizes beyond 1 and tp (always profiled; tp is Megatron's default) and the script's."""
    selective: bool = True
    """Also measure selective (core attention) recompute of the layers."""
    comm: str = "measure"
    """measure | skip: the communication profile (ignored when `hardware` is given)."""
    comm_procs: int | None = None
    """Processes of the communication profile; None: the device count (npu / cuda), 2 on cpu."""
    comm_max_bytes: int | None = None
    """Largest buffer; None: 256 MiB on npu / cuda, 16 MiB on cpu."""
    comm_repeats: int = 5
    memory_limit_mb: float | None = None
    """Rows predicted to need more are `oom`; None: the device memory (cpu: half of what is free)."""

    def __post_init__(self) -> None:
        if self.repeats < 5:
            raise ConfigError(f"repeats must be at least 5 (a median of fewer is noise), got {self.repeats}")
        if self.max_ep is not None and self.max_ep < 1:
            raise ConfigError(f"max_ep must be >= 1 (or unset for every divisor of num_experts), got {self.max_ep}")
        if self.warmup < 0 or self.max_npu < 1 or self.max_mbs < 1:
            raise ConfigError(f"warmup >= 0, max_npu >= 1 and max_mbs >= 1 are needed, got {self.warmup}, "
                              f"{self.max_npu}, {self.max_mbs}")
        if self.comm not in ("measure", "skip"):
            raise ConfigError(f"comm must be 'measure' or 'skip', got {self.comm!r}")
        if self.comm_procs is not None and self.comm_procs < 1:
            raise ConfigError(f"comm_procs must be >= 1, got {self.comm_procs}")

    @classmethod
    def from_settings(cls, settings: ProfileSettings, **extra: Any) -> MeasureSettings:
        """The measuring part of the `profile` settings; `extra` sets the knobs not on the command line."""
        return cls(device=settings.device, max_npu=settings.max_npu, max_mbs=settings.max_mbs,
                   warmup=settings.warmup, repeats=settings.repeats, prof_tp=settings.prof_tp,
                   prof_sp=settings.prof_sp, max_ep=settings.max_ep, hardware=settings.hardware, **extra)

    def limits(self, train: TrainSpec | None) -> SpaceLimits:
        """The profile space these settings (and the script's own strategy) ask for."""
        strategy = train.strategy if train is not None else None
        cp = set(self.prof_cp or ()) | ({strategy.cp} if strategy and strategy.cp > 1 else set())
        etp = set(self.prof_etp or ()) | ({strategy.etp} if strategy and strategy.etp else set())
        return SpaceLimits(max_npu=self.max_npu, max_mbs=self.max_mbs, prof_tp=self.prof_tp, prof_sp=self.prof_sp,
                           extra_tp=(strategy.tp,) if strategy and strategy.tp > 1 else (),
                           prof_cp=tuple(sorted(cp)) or None, prof_ep=self.prof_ep, max_ep=self.max_ep,
                           extra_ep=(strategy.ep,) if strategy and strategy.ep > 1 else (),
                           prof_etp=tuple(sorted(etp)) or None,
                           extra_mbs=(train.micro_batch_size,) if train is not None else ())


def default_profile_dir(model_name: str, model_size: str, root: Path = store.DEFAULT_PROFILE_ROOT) -> Path:
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


def _key(row: dict[str, Any]) -> tuple:
    return (str(row["block"]),) + tuple(int(row[c]) for c in store.BLOCK_KEY[1:])


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
    return {_key(row): row for row in kept.to_dict("records")}


def _check_same_model(out_dir: Path, model: ModelSpec) -> None:
    if (out_dir / META_FILE).exists() and read_meta(out_dir).model not in (None, model.to_dict()):
        raise ProfileDataError(f"{out_dir} holds a profile of a different model; profile into a new folder "
                               "(or delete that one)")


def _write_blocks(out_dir: Path, rows: dict[tuple, dict[str, Any]]) -> None:
    frame = pd.DataFrame(list(rows.values()), columns=list(store.BLOCK_COLUMNS))
    for column in store.BLOCK_COLUMNS:
        if column not in ("block", "status"):
            frame[column] = pd.to_numeric(frame[column]).round().astype("Int64")
    store.write_blocks_csv(out_dir, frame)


def _row(point: ProfilePoint, status: str, measurement: Measurement | None = None) -> dict[str, Any]:
    row = dict(zip(store.BLOCK_KEY, point.key))
    row.update(measurement.as_row() if measurement is not None else {c: None for c in store.BLOCK_MEASURES})
    row["status"] = status
    return row


def _row_bytes(row: dict[str, Any], batch_scale: float = 1.0, shard_scale: float = 1.0) -> float:
    per_batch = sum(int(row[c]) for c in ("activation_bytes", "transient_bytes", "input_bytes", "output_bytes"))
    return (int(row["weight_bytes"]) + per_batch * batch_scale) * shard_scale


def _predicted_bytes(point: ProfilePoint, rows: dict[tuple, dict[str, Any]]) -> float | None:
    """Memory of `point` extrapolated from a measured row: linearly in mbs from the largest smaller
    mbs of the same shape, else (first mbs) from the nearest larger tp, scaled by the tp ratio."""
    ok = [r for r in rows.values() if r["status"] == "ok" and r["block"] == point.block]
    key = point.key
    smaller = [r for r in ok if _key(r)[:-1] == key[:-1] and int(r["mbs"]) < point.shape.mbs]
    if smaller:
        base = max(smaller, key=lambda r: int(r["mbs"]))
        return _row_bytes(base, batch_scale=point.shape.mbs / int(base["mbs"]))
    # key: block, tp, sp, cp, ep, etp, mbs -- same cp, ep, etp and mbs, a larger tp (sp off or on)
    wider = [r for r in ok if _key(r)[3:] == key[3:] and int(r["tp"]) > point.shape.tp]
    if wider:
        base = min(wider, key=lambda r: (int(r["tp"]), int(r["sp"])))
        return _row_bytes(base, shard_scale=int(base["tp"]) / point.shape.tp)
    return None


def _memory_budget_bytes(device: Device, settings: MeasureSettings) -> float:
    if settings.memory_limit_mb is not None:
        return settings.memory_limit_mb * MIB
    total = device.total_memory_bytes()
    return total * CPU_MEMORY_FRACTION if device.kind == "cpu" else total


def _measure_point(model: ModelSpec, point: ProfilePoint, device: Device, settings: MeasureSettings) -> dict[str, Any]:
    block = build_block(model, point.block, point.shape, device=device.torch_device)
    measurement = measure_block(block, device, warmup=max(settings.warmup - 1, 0), repeats=settings.repeats,
                                selective=settings.selective)
    return _row(point, "ok", measurement)


def _attempt(model, point, device, settings, rows, budget_bytes, log) -> dict[str, Any]:
    """Measure one row; out-of-memory (real or predicted) gives status `oom`, other failures their error."""
    predicted = _predicted_bytes(point, rows)
    if predicted is not None and predicted > budget_bytes:
        log(f"{point.label}: oom (predicted {predicted / MIB:.0f} MiB > budget {budget_bytes / MIB:.0f} MiB)")
        return _row(point, "oom")
    try:
        row = _measure_point(model, point, device, settings)
    except Exception as exc:  # one bad row must not stop the profile: record it and go on
        gc.collect()
        device.empty_cache()
        if device.is_oom(exc):
            log(f"{point.label}: oom ({str(exc).splitlines()[0][:160]})")
            return _row(point, "oom")
        message = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        log(f"{point.label}: failed, {message}")
        return _row(point, f"error: {message}")
    log(f"{point.label}: fwd {row['fwd_us']} us (spread {row['fwd_us_spread']}), bwd {row['bwd_us']} us "
        f"(spread {row['bwd_us_spread']}), activations {row['activation_bytes'] / MIB:.2f} MiB, "
        f"transient {row['transient_bytes'] / MIB:.2f} MiB")
    return row


def profile_blocks(model: ModelSpec, settings: MeasureSettings, out_dir: Path, device: Device, *,
                   train: TrainSpec | None, progress, log) -> dict[tuple, dict[str, Any]]:
    """Measure every row of the space not already in out_dir; blocks.csv is rewritten after each."""
    points = profile_space(model, settings.limits(train))
    rows = existing_rows(out_dir)
    frontier = OomFrontier(p for p in points if rows.get(p.key, {}).get("status") == "oom")
    budget = _memory_budget_bytes(device, settings)
    kept = sum(p.key in rows for p in points)
    log(f"profile space: {len(points)} rows ({kept} kept from a previous run) on {device.kind} '{device.name}'")
    for done, point in enumerate(points, start=1):
        if point.key not in rows:
            if frontier.blocks(point):
                rows[point.key] = _row(point, "oom")
                log(f"{point.label}: oom (needs at least the memory of an out-of-memory row)")
            else:
                rows[point.key] = _attempt(model, point, device, settings, rows, budget, log)
                if rows[point.key]["status"] == "oom":
                    frontier.add(point)
            _write_blocks(out_dir, rows)
        if progress is not None:
            progress(done, len(points), point.label)
    return rows


def comm_rows(settings: MeasureSettings, device: Device, log: Callable[[str], None]) -> tuple[pd.DataFrame, str]:
    """comm.csv rows and where they come from: a hardware file, a measurement, or nothing."""
    if settings.hardware:
        from tinker_opt.hardware import comm_table, load_hardware

        return comm_table(load_hardware(settings.hardware), max_group_size=settings.max_npu), f"hardware {settings.hardware}"
    if settings.comm == "skip":
        return store.empty_comm(), "skipped"
    from tinker_opt.profile.comm import measure_comm

    procs = settings.comm_procs or (2 if device.kind == "cpu" else min(device.count, settings.max_npu))
    max_bytes = settings.comm_max_bytes or (16 * MIB if device.kind == "cpu" else 256 * MIB)
    frame, notes = measure_comm(backend=device.comm_backend, device_kind=device.kind, num_procs=procs,
                                max_bytes=max_bytes, repeats=settings.comm_repeats)
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
    versions = {"tinker_opt": tinker_opt.__version__, "torch": torch.__version__, "python": platform.python_version()}
    npu = getattr(torch, "npu", None)
    if npu is not None:
        import importlib.metadata

        try:
            versions["torch_npu"] = importlib.metadata.version("torch_npu")
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def _meta(model, settings, device, train, started: str, rows, comm_source: str, seconds: float) -> ProfileMeta:
    statuses = [str(r["status"]) for r in rows.values()]
    return ProfileMeta(
        tool="tinker-opt", format_version=1, model=model.to_dict(),
        device={"kind": device.kind, "name": device.name, "count": device.count},
        versions=_versions(), settings=dataclasses.asdict(settings),
        train=None if train is None else {"micro_batch_size": train.micro_batch_size,
                                          "global_batch_size": train.global_batch_size,
                                          "strategy": train.strategy.to_dict()},
        comm_source=comm_source, started=started, finished=datetime.now().isoformat(timespec="seconds"),
        profile_seconds=round(seconds, 1),
        rows={"total": len(statuses), "ok": statuses.count("ok"), "oom": statuses.count("oom"),
              "failed": sum(s not in ("ok", "oom") for s in statuses)},
    )


def run_profile(model: ModelSpec, settings: MeasureSettings, out_dir: Path, *, train: TrainSpec | None = None,
                progress: Callable[[int, int, str], None] | None = None,
                log: Callable[[str], None] | None = None) -> Path:
    """Profile `model` on the local device into `out_dir` (blocks.csv, comm.csv, meta.json, profile.log)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _check_same_model(out_dir, model)
    logger = _Log(out_dir / store.LOG_FILE, log)
    device = detect_device(settings.device)
    started, clock = datetime.now().isoformat(timespec="seconds"), time.perf_counter()
    logger(f"profiling into {out_dir} with {dataclasses.asdict(settings)}")
    if not (out_dir / META_FILE).exists():  # provisional, so that an interrupted run can resume
        write_meta(out_dir, ProfileMeta(tool="tinker-opt", format_version=1, model=model.to_dict(), started=started))
    rows = profile_blocks(model, settings, out_dir, device, train=train, progress=progress, log=logger)
    comm_source = _profile_comm(settings, device, out_dir, logger)
    seconds = time.perf_counter() - clock
    write_meta(out_dir, _meta(model, settings, device, train, started, rows, comm_source, seconds))
    ok = sum(str(r["status"]) == "ok" for r in rows.values())
    logger(f"done in {seconds:.1f} s: {ok} of {len(rows)} rows measured")
    if ok == 0:
        raise ProfileDataError(f"no row of the profile space could be measured on {device.kind}; see {out_dir / store.LOG_FILE}")
    return out_dir
