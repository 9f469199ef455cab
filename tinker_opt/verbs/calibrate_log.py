"""`calibrate --log`: fit a hardware description to the iteration times of real runs.

A log gives one number per job, its steady-state iteration time (logs/steady.py), so the logs
determine one parameter: the factor by which the device's ops run slower or faster than the
description's efficiency curves say (hardware/fit.py fit_time_scale, least squares over the
logs). Exposed communication is kept as described (one time per log cannot separate it from
compute); the fitted factor divides both efficiency curves (hardware/efficiency.py slowed).
Every log is then checked again on the fitted description: the residuals are measured, not
derived.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tinker_opt.errors import ConfigError
from tinker_opt.verbs.check import DeviceChoice, run_check

DEVICE_TERMS = ("compute_ms", "recompute_ms", "bubble_ms", "optimizer_ms")
"""Breakdown terms (costs/evaluate.py _breakdown) that run at the device's efficiency."""
FIXED_TERMS = ("comm_ms", "dp_sync_ms")


def _split(result: dict[str, Any]) -> tuple[float, float, float]:
    """(device-bound ms, communication ms, measured ms) of one check result."""
    parts = result["predicted"]["time_breakdown_ms"]
    device = sum(parts.get(k, 0.0) for k in DEVICE_TERMS)
    fixed = sum(parts.get(k, 0.0) for k in FIXED_TERMS)
    return device, fixed, result["measured"]["iteration_time_ms"]


def _fitted_description(hardware, scale: float, fit, sources: list[str]) -> tuple[dict, bool]:
    """The description's JSON with every curve (matmul, memory, FP8 matmul where the description
    has one) `scale` times slower, and whether a cap was hit."""
    from tinker_opt.hardware.efficiency import slowed

    matmul, capped_matmul = slowed(hardware.efficiency.matmul, scale)
    memory, capped_memory = slowed(hardware.efficiency.memory, scale)
    fp8 = hardware.efficiency.matmul_fp8
    matmul_fp8, capped_fp8 = slowed(fp8, scale) if fp8 is not None else (None, False)
    efficiency = replace(hardware.efficiency, matmul=matmul, memory=memory, matmul_fp8=matmul_fp8)
    note = (
        f"efficiencies of {hardware.name} divided by {scale:.4f}, fitted by least squares to the "
        f"steady-state iteration times of {fit.num_samples} log(s) ({', '.join(sources)}): "
        f"mean |error| {100 * fit.mean_abs_rel_error:.1f} %, max {100 * fit.max_abs_rel_error:.1f} %"
    )
    data = hardware.to_dict()
    data["name"] = f"{hardware.name} (calibrated on logs)"
    data["efficiency"] = {**efficiency.to_dict(), "notes": [*hardware.efficiency.notes, note]}
    data["calibration"] = {"logs": sources, "time_scale": scale, "num_samples": fit.num_samples}
    return data, capped_matmul or capped_memory or capped_fp8


def run_calibrate_log(
    logs: list[Path], script: str | None, device: DeviceChoice, output: Path, *, skip_first: int
) -> dict[str, Any]:
    """Fit, write the description to `output`, check every log again; returns the report."""
    from tinker_opt.hardware import load_hardware
    from tinker_opt.hardware.fit import fit_time_scale
    from tinker_opt.profile.calibrate import write_hardware_json

    if not device.hardware:
        raise ConfigError("calibrate --log needs --hardware NAME (the description to fit)")
    device = replace(device, device="analytic", profiled_data_path=None)
    before = [run_check(log, script, device, skip_first=skip_first)[0] for log in logs]
    splits = [_split(result) for result in before]
    try:
        scale, fit = fit_time_scale(*zip(*splits, strict=True))
    except ValueError as exc:
        raise ConfigError(f"calibrate --log: {exc}") from None
    hardware = load_hardware(device.hardware)
    sources = [result["log"]["source"] for result in before]
    data, capped = _fitted_description(hardware, scale, fit, sources)
    write_hardware_json(data, output)
    after_device = replace(device, hardware=str(output))
    after = [run_check(log, script, after_device, skip_first=skip_first)[0] for log in logs]
    rows = [
        {
            "log": b["log"]["source"],
            "measured_ms": b["measured"]["iteration_time_ms"],
            "predicted_before_ms": b["predicted"]["iteration_time_ms"],
            "predicted_after_ms": a["predicted"]["iteration_time_ms"],
            "error_before": b["error"]["iteration_time_ms"],
            "error_after": a["error"]["iteration_time_ms"],
        }
        for b, a in zip(before, after, strict=True)
    ]
    return {"output": str(output), "time_scale": scale, "capped": capped, "logs": rows}
