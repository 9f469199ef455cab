"""Calibration: fit a hardware description's efficiency curves (and links) to a measured profile.

`calibrate(profiled, hardware)` re-traces every measured block row of a profiled-data folder with
the analytic device's tracer (same sub-graph, same shapes, fake tensors), pairs each traced op
sequence with the measured forward / backward time, and fits the saturating matmul and memory
curves by bounded linear least squares (hardware/fit.py). When the folder holds measured
collectives, each scope's latency and bandwidth are fitted too. The result is a complete hardware
description (the JSON form of HardwareSpec) that `analytic_profile` can use to extend a short
measured profile to shapes that were not measured (other tp, micro-batch sizes, bigger models).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tinker_opt.errors import ProfileDataError
from tinker_opt.hardware import HardwareSpec, LinkSpec
from tinker_opt.hardware.fit import FitResult, TimedOps, fit_efficiency, fit_link
from tinker_opt.profile.analytic import BlockTrace, trace_block
from tinker_opt.profile.op_timing import OpArrays, fused_kernels
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.store import ProfiledData

Log = Callable[[str], None]


def _timed(kernels, hardware: HardwareSpec, measured_us: float) -> TimedOps:
    arrays = OpArrays.from_ops(kernels, hardware)
    return TimedOps(arrays.flops, arrays.bytes_moved, arrays.peak_flops_per_us, float(measured_us))


def _row_shape(row) -> Shape:
    return Shape(
        tp=int(row.tp),
        sp=bool(row.sp),
        cp=int(row.cp),
        ep=int(row.ep),
        etp=int(row.etp),
        mbs=int(row.mbs),
    )


def timed_samples(
    profiled: ProfiledData, hardware: HardwareSpec, log: Log | None = None
) -> list[TimedOps]:
    """(traced ops, measured time) pairs: forward and backward of every measured block row."""
    model = profiled.model
    samples: list[TimedOps] = []
    for row in profiled.blocks.itertuples(index=False):
        trace: BlockTrace = trace_block(model, row.block, _row_shape(row))
        kernels = fused_kernels(trace.fwd_ops + trace.bwd_ops, hardware.efficiency.fuse_elementwise)
        for phase, measured_us in (("fwd", row.fwd_us), ("bwd", row.bwd_us)):
            samples.append(_timed([k for k in kernels if k.phase == phase], hardware, measured_us))
        if log:
            log(
                f"traced {row.block} tp={row.tp} sp={row.sp} mbs={row.mbs}: measured {row.fwd_us} / {row.bwd_us} us"
            )
    return [s for s in samples if s.measured_us > 0 and len(s.flops)]


def _fit_links(
    profiled: ProfiledData, hardware: HardwareSpec
) -> tuple[dict[str, LinkSpec], dict[str, FitResult]]:
    links, results = {}, {}
    comm = profiled.comm
    for scope in ("intra_node", "inter_node"):
        rows = comm[comm["scope"] == scope] if not comm.empty else comm
        if len(rows) < 2:
            links[scope] = hardware.link(scope)
            continue
        latency_us, bandwidth_gbs, result = fit_link(
            list(rows["op"]),
            [int(g) for g in rows["group_size"]],
            list(rows["bytes"]),
            list(rows["time_us"]),
        )
        links[scope], results[scope] = (
            LinkSpec(bandwidth_gbs=bandwidth_gbs, latency_us=latency_us),
            result,
        )
    return links, results


def _note(what: str, result: FitResult, source: Path) -> str:
    return (
        f"{what} fitted by least squares to {result.num_samples} measured times of {source}: "
        f"mean |error| {100 * result.mean_abs_rel_error:.1f} %, max {100 * result.max_abs_rel_error:.1f} %"
    )


def eager_device(profiled: ProfiledData) -> bool:
    """A CPU profile ran eager aten ops one by one: no kernel fusion to model."""
    device = profiled.meta.device
    kind = device.get("kind") if isinstance(device, dict) else str(device or "")
    return kind == "cpu"


def calibrate(
    profiled: ProfiledData, hardware: HardwareSpec, *, log: Log | None = None
) -> dict[str, Any]:
    """The hardware description (JSON form) with curves and links fitted to the measured profile.

    `hardware` gives the peak rates (kept) and the starting curves; a CPU profile is fitted with
    kernel fusion off, since eager CPU execution runs every aten op as its own kernel."""
    if eager_device(profiled) and hardware.efficiency.fuse_elementwise:
        hardware = replace(
            hardware, efficiency=replace(hardware.efficiency, fuse_elementwise=False)
        )
    samples = timed_samples(profiled, hardware, log)
    if not samples:
        raise ProfileDataError(
            f"{profiled.path}: no measured block time to calibrate against; "
            "run `tinker-opt profile` on the device first"
        )
    fitted, result = fit_efficiency(samples, hardware.memory_bytes_per_us, hardware.efficiency)
    efficiency = replace(fitted, fuse_elementwise=hardware.efficiency.fuse_elementwise)
    links, link_results = _fit_links(profiled, hardware)
    notes = [_note("matmul and memory curves", result, profiled.path)]
    notes += [_note(f"{scope} link", r, profiled.path) for scope, r in link_results.items()]
    data = hardware.to_dict()
    data["name"] = f"{hardware.name} (calibrated)"
    data["efficiency"] = {**efficiency.to_dict(), "notes": notes}
    data["intra_node"] = {
        "bandwidth_gbs": links["intra_node"].bandwidth_gbs,
        "latency_us": links["intra_node"].latency_us,
    }
    data["inter_node"] = {
        "bandwidth_gbs": links["inter_node"].bandwidth_gbs,
        "latency_us": links["inter_node"].latency_us,
    }
    data["calibration"] = {
        "profile": str(profiled.path),
        "device": profiled.meta.device,
        "num_samples": result.num_samples,
        "mean_abs_rel_error": result.mean_abs_rel_error,
        "max_abs_rel_error": result.max_abs_rel_error,
        "scopes_fitted": sorted(link_results),
    }
    return data
