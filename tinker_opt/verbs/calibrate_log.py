"""`calibrate --log`: fit a hardware description to the iteration times of real runs.

A log gives one number per job, its steady-state iteration time (logs/steady.py), so one log
determines one parameter: the factor by which the device's ops run slower or faster than the
description's efficiency curves say; exposed communication is kept as described (one time
cannot separate it from compute). Two or more logs of different layouts on the machine (their
communication shares differ, e.g. tp 1 pp 4 and tp 4 pp 1) also determine a communication
factor: how much slower the links run than described (hardware/fit.py fit_time_scales, least
squares over the logs, never more parameters than logs). The device factor divides every
efficiency curve (hardware/efficiency.py slowed), the communication factor divides every link's
bandwidth and multiplies its latency (`_slowed_links`, so each collective's alpha-beta time,
comm_cost, scales by it). Every log is then checked again on the fitted description: the
residuals are measured, not derived (overlap and the costs priced at the raw memory bandwidth
make the prediction not exactly linear in the factors).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tinker_opt.errors import ConfigError
from tinker_opt.verbs.check import DeviceChoice, run_check

DEVICE_TERMS = ("compute_ms", "recompute_ms", "bubble_ms", "optimizer_ms")
"""Breakdown terms (costs/evaluate.py _breakdown) that run at the device's efficiency."""
FIXED_TERMS = ("comm_ms", "dp_sync_ms", "host_ms")
"""The rest: exposed communication, and the host's issue time above the GPU's (costs/fixed_costs.py;
not the device's efficiency, so kept out of the device scale)."""


def _split(result: dict[str, Any]) -> tuple[float, float, float]:
    """(device-bound ms, communication ms, measured ms) of one check result."""
    parts = result["predicted"]["time_breakdown_ms"]
    device = sum(parts.get(k, 0.0) for k in DEVICE_TERMS)
    fixed = sum(parts.get(k, 0.0) for k in FIXED_TERMS)
    return device, fixed, result["measured"]["iteration_time_ms"]


LINK_KEYS = ("intra_node", "inter_node", "domain")
"""The links of a hardware file (hardware/__init__.py `_link_dict`, `_network_dict`)."""


def _slowed_links(data: dict[str, Any], factor: float) -> None:
    """Every link of the description's JSON (and its per-op figures) `factor` times slower, in
    place: bandwidth / factor,
    latency x factor (time = steps x latency + traffic / bandwidth, comm_cost)."""
    for key in LINK_KEYS:
        if key in data:
            for link in (data[key], *data[key].get("ops", {}).values()):
                link["bandwidth_gbs"] = link["bandwidth_gbs"] / factor
                link["latency_us"] = link["latency_us"] * factor


def _fitted_description(
    hardware, scale: float, comm: float | None, fit, sources: list[str]
) -> tuple[dict, bool]:
    """The description's JSON with every curve (matmul, memory, and the FP8 matmul and attention
    curves where the description has them) `scale` times slower, every link `comm` times slower
    where the logs determine it, and whether a cap was hit."""
    from tinker_opt.hardware.efficiency import OPTIONAL_CURVES, slowed

    curves, capped = {}, False
    for name in ("matmul", "memory", *OPTIONAL_CURVES):
        curve = getattr(hardware.efficiency, name)
        if curve is not None:
            curves[name], hit = slowed(curve, scale)
            capped = capped or hit
    efficiency = replace(hardware.efficiency, **curves)
    links = (
        f", link bandwidths divided and latencies multiplied by {comm:.4f}"
        if comm is not None
        else ", links as described"
    )
    note = (
        f"efficiencies of {hardware.name} divided by {scale:.4f}{links}, fitted by least squares "
        f"to the steady-state iteration times of {fit.num_samples} log(s) "
        f"({', '.join(sources)}): mean |error| {100 * fit.mean_abs_rel_error:.1f} %, "
        f"max {100 * fit.max_abs_rel_error:.1f} %"
    )
    data = hardware.to_dict()
    data["name"] = f"{hardware.name} (calibrated on logs)"
    data["efficiency"] = {**efficiency.to_dict(), "notes": [*hardware.efficiency.notes, note]}
    if comm is not None:
        _slowed_links(data, comm)
    data["calibration"] = {
        "logs": sources,
        "time_scale": scale,
        "comm_scale": comm,
        "num_samples": fit.num_samples,
    }
    return data, capped


def paired_scripts(logs: list[Path], scripts: list[str]) -> list[str | None]:
    """The launch script of each log: none (each log's argument dump), one for all the logs, or
    one per log in order; any other count is a one-line ConfigError."""
    if not scripts:
        return [None] * len(logs)
    if len(scripts) == 1:
        return [scripts[0]] * len(logs)
    if len(scripts) != len(logs):
        raise ConfigError(
            f"calibrate --log: {len(logs)} log(s) and {len(scripts)} scripts; give one script "
            "for all the logs or one per log, in the order of the --log options"
        )
    return list(scripts)


def run_calibrate_log(
    logs: list[Path], scripts: list[str], device: DeviceChoice, output: Path, *, skip_first: int
) -> dict[str, Any]:
    """Fit, write the description to `output`, check every log again; returns the report.
    `scripts`: as `paired_scripts` takes them."""
    from tinker_opt.hardware import load_hardware, write_hardware_json
    from tinker_opt.hardware.fit import fit_time_scales

    if not device.hardware:
        raise ConfigError("calibrate --log needs --hardware NAME (the description to fit)")
    device = replace(device, device="analytic", profiled_data_path=None)
    pairs = list(zip(logs, paired_scripts(logs, scripts), strict=True))
    before = [run_check(log, script, device, skip_first=skip_first)[0] for log, script in pairs]
    splits = [_split(result) for result in before]
    try:
        scale, comm, fit = fit_time_scales(*zip(*splits, strict=True))
    except ValueError as exc:
        raise ConfigError(f"calibrate --log: {exc}") from None
    hardware = load_hardware(device.hardware)
    sources = [result["log"]["source"] for result in before]
    data, capped = _fitted_description(hardware, scale, comm, fit, sources)
    write_hardware_json(data, output)
    after_device = replace(device, hardware=str(output))
    after = [
        run_check(log, script, after_device, skip_first=skip_first)[0] for log, script in pairs
    ]
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
    return {
        "output": str(output),
        "time_scale": scale,
        "comm_scale": comm,
        "capped": capped,
        "logs": rows,
    }
