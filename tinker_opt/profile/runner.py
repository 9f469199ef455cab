"""`run_profile`: measure the profile space of a model and write the profiled-data folder.

The folder (ARCHITECTURE.md, "Profiled-data folder") gets blocks.csv (rewritten atomically after
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
from tinker_opt.errors import ConfigError, ProfileDataError
from tinker_opt.profile import store
from tinker_opt.profile.device import Device, detect_device
from tinker_opt.profile.kernels import FLAG_OPS, KernelSet, requested_ops, select_kernels
from tinker_opt.profile.measure import Measurement, measure_block
from tinker_opt.profile.space import OomFrontier, ProfilePoint, SpaceLimits, profile_space
from tinker_opt.profile.subgraphs import build_block
from tinker_opt.specs import ModelSpec, TrainSpec

BLOCK_SOURCES = ("reference", "megatron-core")
CPU_MEMORY_FRACTION = 0.5
"""On the CPU, rows predicted to need more than this share of the available memory count as `oom`."""
MIB = 2**20


@dataclass(frozen=True, kw_only=True)
class ProfileSettings:
    """How to profile (the CLI's `profile` options)."""

    device: str = "auto"
    """auto | npu | cuda | cpu"""
    max_npu: int = 8
    """Largest tensor-parallel size to profile (devices per node)."""
    max_mbs: int = 4
    """Largest micro-batch size; 1, 2, 4, ... up to it (and the script's own) are profiled."""
    prof_tp: tuple[int, ...] | None = None
    prof_sp: tuple[int, ...] | None = None
    prof_cp: tuple[int, ...] | None = None
    """Context-parallel sizes beyond 1 (default: the script's cp when > 1)."""
    prof_ep: tuple[int, ...] | None = None
    """Expert-parallel sizes to profile (default: every divisor of num_experts up to max_ep, and the script's)."""
    max_ep: int | None = None
    """Largest expert-parallel size to profile (None: num_experts; the script's own ep is always profiled)."""
    prof_etp: tuple[int, ...] | None = None
    """Expert tensor-parallel sizes beyond 1 and tp (always profiled; tp is Megatron's default) and the script's."""
    warmup: int = 1
    """Untimed passes before the timed ones (the memory pass counts as the first)."""
    repeats: int = 5
    """Timed forward + backward passes per row (the median is kept); at least 5."""
    selective: bool = True
    """Also measure selective (core attention) recompute of the layers."""
    comm: str = "measure"
    """measure | skip: the communication profile (ignored when `hardware` is given)."""
    hardware: str | None = None
    """A hardware description (shipped name or JSON file): comm.csv is computed from it."""
    comm_procs: int | None = None
    """Processes of the communication profile; None: the device count (npu / cuda), 2 on cpu."""
    comm_max_bytes: int | None = None
    """Largest buffer; None: 256 MiB on npu / cuda, 16 MiB on cpu."""
    comm_repeats: int = 5
    memory_limit_mb: float | None = None
    """Rows predicted to need more are `oom`; None: the device memory (cpu: half of what is free)."""
    kernel_flags: tuple[str, ...] = ()
    """The script's fused-kernel flags (kernels.FLAG_OPS): each op runs the device's fused kernel."""
    devices: int | None = None
    """Worker processes, one per local device (None: every device; 1 on the CPU)."""
    blocks: str = "reference"
    """Where the decoder layers come from: `reference` (subgraphs.py) or `megatron-core` (mcore_blocks.py)."""

    def __post_init__(self) -> None:
        unknown = [f for f in self.kernel_flags if f not in FLAG_OPS]
        if unknown:
            raise ConfigError(f"unknown fused-kernel flag(s) {unknown}; known: {sorted(FLAG_OPS)}")
        if self.devices is not None and self.devices < 1:
            raise ConfigError(f"devices must be >= 1, got {self.devices}")
        if self.blocks not in BLOCK_SOURCES:
            raise ConfigError(f"blocks must be one of {list(BLOCK_SOURCES)}, got {self.blocks!r}")
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

    def memory_budget_bytes(self, device: Device) -> float:
        """Rows predicted to need more than this are `oom`."""
        if self.memory_limit_mb is not None:
            return self.memory_limit_mb * MIB
        total = device.total_memory_bytes()
        return total * CPU_MEMORY_FRACTION if device.kind == "cpu" else total

    def num_workers(self, device: Device) -> int:
        """Processes that profile at once: `devices`, checked against the device count (cpu: any)."""
        wanted = self.devices if self.devices is not None else device.count
        if device.kind != "cpu" and wanted > device.count:
            raise ConfigError(f"--devices {wanted}, but this node has {device.count} {device.kind} device(s); "
                              f"pass --devices {device.count} or fewer")
        return wanted

    def limits(self, train: TrainSpec | None) -> SpaceLimits:
        """The profile space these settings (and the script's own strategy) ask for."""
        strategy = train.strategy if train is not None else None
        cp = set(self.prof_cp or ()) | ({strategy.cp} if strategy and strategy.cp > 1 else set())
        etp = set(self.prof_etp or ()) | ({strategy.etp} if strategy and strategy.etp else set())
        return SpaceLimits(max_npu=self.max_npu, max_mbs=self.max_mbs, prof_tp=self.prof_tp, prof_sp=self.prof_sp,
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
    meta_path = out_dir / store.META_FILE
    if meta_path.exists() and store.read_meta(meta_path).get("model") not in (None, model.to_dict()):
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


def settings_from_dict(data: dict[str, Any]) -> ProfileSettings:
    """ProfileSettings back from `dataclasses.asdict` (JSON lists become tuples)."""
    return ProfileSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def kernel_set(model: ModelSpec, settings: ProfileSettings, device: Device) -> KernelSet:
    """The implementation of each op on `device` for the script's flags (kernels.py)."""
    return select_kernels(requested_ops(settings.kernel_flags, flash_attn=model.use_flash_attn), device.kind)


def block_builder(source: str):
    """`build_block` of the block source: the reference sub-graphs or Megatron-core's layers."""
    if source == "megatron-core":
        from tinker_opt.profile.mcore_blocks import build_block as build_mcore_block

        return build_mcore_block
    return build_block


def _measure_point(model: ModelSpec, point: ProfilePoint, device: Device, settings: ProfileSettings,
                   kernels: KernelSet | None) -> dict[str, Any]:
    build = block_builder(settings.blocks)
    block = build(model, point.block, point.shape, device=device.torch_device, kernels=kernels)
    measurement = measure_block(block, device, warmup=max(settings.warmup - 1, 0), repeats=settings.repeats,
                                selective=settings.selective)
    return _row(point, "ok", measurement)


def _attempt(model, point, device, settings, rows, budget_bytes, log, kernels) -> dict[str, Any]:
    """Measure one row; out-of-memory (real or predicted) gives status `oom`, other failures their error."""
    predicted = _predicted_bytes(point, rows)
    if predicted is not None and predicted > budget_bytes:
        log(f"{point.label}: oom (predicted {predicted / MIB:.0f} MiB > budget {budget_bytes / MIB:.0f} MiB)")
        return _row(point, "oom")
    try:
        row = _measure_point(model, point, device, settings, kernels)
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


def measure_row(model, point: ProfilePoint, device: Device, settings: ProfileSettings, rows, frontier: OomFrontier,
                budget_bytes: float, log, kernels: KernelSet | None) -> dict[str, Any]:
    """One row: `oom` when an out-of-memory row of `frontier` needs no more memory, else measured."""
    if frontier.blocks(point):
        log(f"{point.label}: oom (needs at least the memory of an out-of-memory row)")
        return _row(point, "oom")
    row = _attempt(model, point, device, settings, rows, budget_bytes, log, kernels)
    if row["status"] == "oom":
        frontier.add(point)
    return row


def profile_blocks(model: ModelSpec, settings: ProfileSettings, out_dir: Path, device: Device, *,
                   train: TrainSpec | None, progress, log, kernels: KernelSet | None = None) -> dict[tuple, dict[str, Any]]:
    """Measure every row of the space not already in out_dir, in one process or one per device
    (workers.py); blocks.csv is rewritten after each row."""
    points = profile_space(model, settings.limits(train))
    rows = existing_rows(out_dir)
    frontier = OomFrontier(p for p in points if rows.get(p.key, {}).get("status") == "oom")
    budget = settings.memory_budget_bytes(device)
    kept = sum(p.key in rows for p in points)
    workers = settings.num_workers(device)
    log(f"profile space: {len(points)} rows ({kept} kept from a previous run) on {device.kind} '{device.name}'"
        f"{f', {workers} workers' if workers > 1 else ''}")
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

        measure_in_workers(model, settings, pending, device_kind=device.kind, num_workers=workers,
                           on_row=record, log=log)
    else:
        for point in pending:
            record(point, measure_row(model, point, device, settings, rows, frontier, budget, log, kernels))
    return rows


def comm_rows(settings: ProfileSettings, device: Device, log: Callable[[str], None]) -> tuple[pd.DataFrame, str]:
    """comm.csv rows and where they come from: a hardware file, a measurement, or nothing."""
    if settings.hardware:
        from tinker_opt.hardware import comm_table, load_hardware

        return comm_table(load_hardware(settings.hardware), max_group_size=settings.max_npu), f"hardware {settings.hardware}"
    if settings.comm == "skip":
        return store.empty_comm(), "skipped"
    from tinker_opt.profile.comm import measure_comm

    workers = settings.num_workers(device)
    procs = settings.comm_procs or (workers if workers > 1 else 2 if device.kind == "cpu" else 1)
    max_bytes = settings.comm_max_bytes or (16 * MIB if device.kind == "cpu" else 256 * MIB)
    frame, notes = measure_comm(backend=device.comm_backend, device_kind=device.kind, num_procs=procs,
                                max_bytes=max_bytes, repeats=settings.comm_repeats)
    for note in notes:
        log(note)
    return frame, f"measured ({device.comm_backend}, {procs} processes, up to {max_bytes} bytes)"


def _profile_comm(settings: ProfileSettings, device: Device, out_dir: Path, log) -> str:
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


def _meta(model, settings, device, train, started: str, rows, comm_source: str, seconds: float,
          kernels: dict[str, Any]) -> dict[str, Any]:
    statuses = [str(r["status"]) for r in rows.values()]
    return {
        "tool": "tinker-opt", "format_version": 1, "model": model.to_dict(),
        "device": {"kind": device.kind, "name": device.name, "count": device.count},
        "versions": _versions(), "settings": dataclasses.asdict(settings),
        "train": None if train is None else {"micro_batch_size": train.micro_batch_size,
                                             "global_batch_size": train.global_batch_size,
                                             "strategy": train.strategy.to_dict()},
        "kernels": kernels, "comm_source": comm_source, "started": started, "finished": datetime.now().isoformat(timespec="seconds"),
        "profile_seconds": round(seconds, 1),
        "rows": {"total": len(statuses), "ok": statuses.count("ok"), "oom": statuses.count("oom"),
                 "failed": sum(s not in ("ok", "oom") for s in statuses)},
    }


def block_kernels(model: ModelSpec, settings: ProfileSettings, rows, kernels: KernelSet) -> dict[str, dict[str, str]]:
    """{block: {op: implementation}} for each measured block, from a copy built on the meta device."""
    from tinker_opt.profile.shape import Shape

    out: dict[str, dict[str, str]] = {}
    sources: dict[str, set[str]] = {}
    for row in rows.values():
        name = str(row["block"])
        if row["status"] != "ok":
            continue
        shape = Shape(tp=int(row["tp"]), sp=bool(int(row["sp"])), cp=int(row["cp"]), ep=int(row["ep"]),
                      etp=int(row["etp"]), mbs=int(row["mbs"]))
        record = build_block(model, name, shape, device="meta", kernels=kernels).kernels
        if settings.blocks == "megatron-core":
            from tinker_opt.profile.mcore_blocks import source_record

            record = source_record(name, shape, record, kernels.device_kind)
        out.setdefault(name, record)
        sources.setdefault(name, set()).add(record.get("source", "reference"))
    for name, found in sources.items():
        if len(found) > 1:  # megatron-core layers at some shapes, reference ones at others
            out[name] = {**out[name], "source": "; ".join(sorted(found))}
    return out


def run_profile(model: ModelSpec, settings: ProfileSettings, out_dir: Path, *, train: TrainSpec | None = None,
                progress: Callable[[int, int, str], None] | None = None,
                log: Callable[[str], None] | None = None) -> Path:
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
    if not (out_dir / store.META_FILE).exists():  # provisional, so that an interrupted run can resume
        store.write_meta(out_dir, {"tool": "tinker-opt", "format_version": 1, "model": model.to_dict(),
                                   "started": started, "finished": None})
    kernels = kernel_set(model, settings, device)
    for warning in kernels.warnings:
        logger(f"WARNING {warning}")
    rows = profile_blocks(model, settings, out_dir, device, train=train, progress=progress, log=logger,
                          kernels=kernels)
    comm_source = _profile_comm(settings, device, out_dir, logger)
    seconds = time.perf_counter() - clock
    kernel_meta = {**kernels.summary(), "blocks": block_kernels(model, settings, rows, kernels)}
    store.write_meta(out_dir, _meta(model, settings, device, train, started, rows, comm_source, seconds, kernel_meta))
    ok = sum(str(r["status"]) == "ok" for r in rows.values())
    logger(f"done in {seconds:.1f} s: {ok} of {len(rows)} rows measured")
    if ok == 0:
        raise ProfileDataError(f"no row of the profile space could be measured on {device.kind}; see {out_dir / store.LOG_FILE}")
    return out_dir
