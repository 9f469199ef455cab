"""`calibrate --log`: fit a hardware description to the iteration times of real runs.

A log gives one number per job, its steady-state iteration time (logs/steady.py), so one log
determines one parameter: the factor by which the machine runs slower or faster than its
description says, the device's efficiency curves and its links alike (one time cannot separate
them; verbs/log_factors.py says why alike); the fixed time is kept as described. Two or more logs
also determine a fixed time per micro-batch where their jobs differ in size, and a communication
factor where their layouts' communication shares differ (verbs/log_factors.py; never more factors
than logs). The device factor divides every efficiency curve (hardware/efficiency.py slowed), the
communication factor (the device factor where the logs fix none of its own) divides every link's
bandwidth and multiplies its latency (`_slowed_links`, so each collective's alpha-beta time,
comm_cost, scales by it), the fixed time is written as the description's
`fixed_ms_per_microbatch`. The written description is then used for any job on the machine (`check
LOG2 --hardware calibrated.json`, `search --hardware calibrated.json`); its `calibration.fitted`
says which factors were fitted and from which logs. Every log is checked again on the fitted
description: the residuals are measured, not derived (overlap and the costs priced at the raw
memory bandwidth make the prediction not exactly linear in the factors).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tinker_opt.errors import ConfigError
from tinker_opt.verbs.check import DeviceChoice, run_check

LINK_KEYS = ("intra_node", "inter_node", "domain")
"""The links of a hardware file (hardware/links.py `link_dict`, hardware/__init__.py `_network_fields`)."""


def _slowed_links(data: dict[str, Any], factor: float) -> None:
    """Every link of the description's JSON (and its per-op figures, each size regime) `factor`
    times slower, in place: bandwidth / factor,
    latency x factor (time = steps x latency + traffic / bandwidth, comm_cost)."""
    for key in LINK_KEYS:
        if key in data:
            ops = data[key].get("ops", {}).values()
            small = [regime for op in ops for regime in op.get("small", [])]
            for link in (data[key], *ops, *small):
                link["bandwidth_gbs"] = link["bandwidth_gbs"] / factor
                link["latency_us"] = link["latency_us"] * factor


def _fitted_description(
    hardware,
    scale: float,
    comm: float | None,
    fit,
    sources: list[str],
    fixed_ms: float | None = None,
) -> tuple[dict, bool]:
    """The description's JSON with every curve (matmul, memory, and the FP8 matmul and attention
    curves where the description has them) `scale` times slower, every link `comm` times slower
    (`scale` times where the logs determine no comm factor), and whether a cap was hit."""
    from tinker_opt.hardware.efficiency import OPTIONAL_CURVES, slowed

    curves, capped = {}, False
    for name in ("matmul", "memory", *OPTIONAL_CURVES):
        curve = getattr(hardware.efficiency, name)
        if curve is not None:
            curves[name], hit = slowed(curve, scale)
            capped = capped or hit
    efficiency = replace(hardware.efficiency, **curves)
    link = comm if comm is not None else scale  # no factor of their own: the device's
    links = f", link bandwidths divided and latencies multiplied by {link:.4f}" + (
        "" if comm is not None else " (with the device: the logs do not separate them)"
    )
    if fixed_ms is not None:
        links += f", fixed time {fixed_ms:.3f} ms per micro-batch and stage"
    note = (
        f"efficiencies of {hardware.name} divided by {scale:.4f}{links}, fitted by least squares "
        f"to the steady-state iteration times of {fit.num_samples} log(s) "
        f"({', '.join(sources)}): mean |error| {100 * fit.mean_abs_rel_error:.1f} %, "
        f"max {100 * fit.max_abs_rel_error:.1f} %"
    )
    data = hardware.to_dict()
    data["name"] = f"{hardware.name} (calibrated on logs)"
    data["efficiency"] = {**efficiency.to_dict(), "notes": [*hardware.efficiency.notes, note]}
    _slowed_links(data, link)
    if fixed_ms is not None:
        data["fixed_ms_per_microbatch"] = fixed_ms
    data["calibration"] = {
        "logs": sources,
        "time_scale": scale,
        "comm_scale": comm,
        "links_scale": link,
        "fixed_ms_per_microbatch": fixed_ms,
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


def _fixed_slots(pairs, device: DeviceChoice, hardware, base, skip_first: int, scratch: Path):
    """Per log, the iteration time one more ms of fixed time per micro-batch adds (the job priced
    again on the description with it: the schedule's count of micro-batch slots)."""
    from tinker_opt.hardware import write_hardware_json

    data = hardware.to_dict()
    data["fixed_ms_per_microbatch"] = hardware.fixed_ms_per_microbatch + 1.0
    probe = scratch / "probe-fixed.json"
    write_hardware_json(data, probe)
    probed = replace(device, hardware=str(probe))
    return [
        run_check(log, script, probed, skip_first=skip_first)[0]["predicted"]["iteration_time_ms"]
        - result["predicted"]["iteration_time_ms"]
        for (log, script), result in zip(pairs, base, strict=True)
    ]


def _rows(before: list[dict], after: list[dict]) -> list[dict[str, Any]]:
    return [
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


def run_calibrate_log(
    logs: list[Path], scripts: list[str], device: DeviceChoice, output: Path, *, skip_first: int
) -> dict[str, Any]:
    """Fit (verbs/log_factors.py: the factors the logs determine), write the description to
    `output`, check every log again; returns the report. `scripts`: as `paired_scripts` takes
    them."""
    import tempfile

    from tinker_opt.hardware import load_hardware, write_hardware_json
    from tinker_opt.verbs.log_factors import fit_logs, sizes_differ, split_of

    if not device.hardware:
        raise ConfigError("calibrate --log needs --hardware NAME (the description to fit)")
    device = replace(device, device="analytic", profiled_data_path=None)
    pairs = list(zip(logs, paired_scripts(logs, scripts), strict=True))
    before = [run_check(log, script, device, skip_first=skip_first)[0] for log, script in pairs]
    splits = [split_of(result) for result in before]
    hardware = load_hardware(device.hardware)
    sources = [result["log"]["source"] for result in before]
    with tempfile.TemporaryDirectory(prefix="tinker-calibrate-") as scratch:
        slots = (
            _fixed_slots(pairs, device, hardware, before, skip_first, Path(scratch))
            if sizes_differ(splits)
            else None
        )
    try:
        factors = fit_logs(splits, sources, slots)
    except ValueError as exc:
        raise ConfigError(f"calibrate --log: {exc}") from None
    data, capped = _fitted_description(
        hardware, factors.scale, factors.comm, factors.fit, sources, factors.fixed_ms
    )
    data["calibration"]["fitted"] = list(factors.fitted)
    write_hardware_json(data, output)
    after_device = replace(device, hardware=str(output))
    after = [
        run_check(log, script, after_device, skip_first=skip_first)[0] for log, script in pairs
    ]
    return {
        "output": str(output),
        "time_scale": factors.scale,
        "comm_scale": factors.comm,
        "fixed_ms_per_microbatch": factors.fixed_ms,
        "fitted": list(factors.fitted),
        "capped": capped,
        "logs": _rows(before, after),
    }
