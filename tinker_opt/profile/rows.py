"""One row of the profile space: build the block, measure it, or find it out of memory.

runner.py (one process) and workers.py (one process per device) both measure a row with
`measure_row`, so the two modes give the same rows (times aside, which are measurements). The
block comes from the reference sub-graphs (subgraphs.py) or Megatron-core's layers
(mcore_blocks.py), with the ops the script's fused-kernel flags select (kernels.py).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from tinker_opt.profile import store
from tinker_opt.profile.device import Device
from tinker_opt.profile.kernels import KernelSet, requested_ops, select_kernels
from tinker_opt.profile.measure import Measurement, measure_block
from tinker_opt.profile.settings import MIB, MeasureSettings
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.space import OomFrontier, ProfilePoint
from tinker_opt.profile.subgraphs import build_block
from tinker_opt.specs import ModelSpec

Log = Callable[[str], None]


def row_key(row: dict[str, Any]) -> tuple:
    """The key of a blocks.csv row: block, then the shape columns (store.BLOCK_KEY)."""
    return (str(row["block"]),) + tuple(int(row[c]) for c in store.BLOCK_KEY[1:])


def make_row(
    point: ProfilePoint, status: str, measurement: Measurement | None = None
) -> dict[str, Any]:
    """A blocks.csv row of `point`: its measurement, or empty measures for `oom` and failures."""
    row = dict(zip(store.BLOCK_KEY, point.key, strict=True))
    row.update(
        measurement.as_row() if measurement is not None else dict.fromkeys(store.BLOCK_MEASURES)
    )
    row["status"] = status
    return row


def _row_bytes(row: dict[str, Any], batch_scale: float = 1.0, shard_scale: float = 1.0) -> float:
    per_batch = sum(
        int(row[c]) for c in ("activation_bytes", "transient_bytes", "input_bytes", "output_bytes")
    )
    return (int(row["weight_bytes"]) + per_batch * batch_scale) * shard_scale


def predicted_bytes(point: ProfilePoint, rows: dict[tuple, dict[str, Any]]) -> float | None:
    """Memory of `point` extrapolated from a measured row: linearly in mbs from the largest smaller
    mbs of the same shape, else (first mbs) from the nearest larger tp, scaled by the tp ratio."""
    ok = [r for r in rows.values() if r["status"] == "ok" and r["block"] == point.block]
    key = point.key
    smaller = [r for r in ok if row_key(r)[:-1] == key[:-1] and int(r["mbs"]) < point.shape.mbs]
    if smaller:
        base = max(smaller, key=lambda r: int(r["mbs"]))
        return _row_bytes(base, batch_scale=point.shape.mbs / int(base["mbs"]))
    # key: block, tp, sp, cp, ep, etp, mbs -- same cp, ep, etp and mbs, a larger tp (sp off or on)
    wider = [r for r in ok if row_key(r)[3:] == key[3:] and int(r["tp"]) > point.shape.tp]
    if wider:
        base = min(wider, key=lambda r: (int(r["tp"]), int(r["sp"])))
        return _row_bytes(base, shard_scale=int(base["tp"]) / point.shape.tp)
    return None


def kernel_set(model: ModelSpec, settings: MeasureSettings, device: Device) -> KernelSet:
    """The implementation of each op on `device` for the script's flags (kernels.py)."""
    requested = requested_ops(settings.kernel_flags, flash_attn=model.use_flash_attn)
    return select_kernels(requested | frozenset(model.fused_kernels), device.kind)


def block_builder(source: str):
    """`build_block` of the block source: the reference sub-graphs or Megatron-core's layers."""
    if source == "megatron-core":
        from tinker_opt.profile.mcore_blocks import build_block as build_mcore_block

        return build_mcore_block
    return build_block


def measure_point(
    model: ModelSpec,
    point: ProfilePoint,
    device: Device,
    settings: MeasureSettings,
    kernels: KernelSet | None,
) -> dict[str, Any]:
    """Build the block of `point` on `device` and measure it (raises what the block raises)."""
    build = block_builder(settings.blocks)
    block = build(model, point.block, point.shape, device=device.torch_device, kernels=kernels)
    measurement = measure_block(
        block,
        device,
        warmup=max(settings.warmup - 1, 0),
        repeats=settings.repeats,
        selective=settings.selective,
    )
    return make_row(point, "ok", measurement)


def _attempt(
    model, point, device, settings, rows, budget_bytes, log: Log, kernels
) -> dict[str, Any]:
    """Measure one row; out-of-memory (real or predicted) gives status `oom`, other failures their error."""
    predicted = predicted_bytes(point, rows)
    if predicted is not None and predicted > budget_bytes:
        log(
            f"{point.label}: oom (predicted {predicted / MIB:.0f} MiB > budget {budget_bytes / MIB:.0f} MiB)"
        )
        return make_row(point, "oom")
    try:
        row = measure_point(model, point, device, settings, kernels)
    except Exception as exc:  # one bad row must not stop the profile: record it and go on
        gc.collect()
        device.empty_cache()
        if device.is_oom(exc):
            log(f"{point.label}: oom ({str(exc).splitlines()[0][:160]})")
            return make_row(point, "oom")
        message = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        log(f"{point.label}: failed, {message}")
        return make_row(point, f"error: {message}")
    log(
        f"{point.label}: fwd {row['fwd_us']} us (spread {row['fwd_us_spread']}), bwd {row['bwd_us']} us "
        f"(spread {row['bwd_us_spread']}), activations {row['activation_bytes'] / MIB:.2f} MiB, "
        f"transient {row['transient_bytes'] / MIB:.2f} MiB"
    )
    return row


def measure_row(
    model: ModelSpec,
    point: ProfilePoint,
    device: Device,
    settings: MeasureSettings,
    rows,
    frontier: OomFrontier,
    budget_bytes: float,
    log: Log,
    kernels: KernelSet | None,
) -> dict[str, Any]:
    """One row: `oom` when an out-of-memory row of `frontier` needs no more memory, else measured."""
    if frontier.blocks(point):
        log(f"{point.label}: oom (needs at least the memory of an out-of-memory row)")
        return make_row(point, "oom")
    row = _attempt(model, point, device, settings, rows, budget_bytes, log, kernels)
    if row["status"] == "oom":
        frontier.add(point)
    return row


def block_kernels(
    model: ModelSpec, settings: MeasureSettings, rows, kernels: KernelSet
) -> dict[str, dict[str, str]]:
    """{block: {op: implementation}} for each measured block, from a copy built on the meta device."""
    out: dict[str, dict[str, str]] = {}
    sources: dict[str, set[str]] = {}
    for row in rows.values():
        name = str(row["block"])
        if row["status"] != "ok":
            continue
        shape = Shape(
            tp=int(row["tp"]),
            sp=bool(int(row["sp"])),
            cp=int(row["cp"]),
            ep=int(row["ep"]),
            etp=int(row["etp"]),
            mbs=int(row["mbs"]),
        )
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
