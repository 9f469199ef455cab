"""The printed table of validate_published.py: predicted against measured iteration time,
activation and parameter + optimizer memory per row, the modelled peak against the device's
memory, and the summary (mean / max errors by device kind and category; the rows that ran with
the modelled peak above their device)."""

from __future__ import annotations

import numpy as np
from published_runs import PublishedRun


def measured_activation(run: PublishedRun, runs: list[PublishedRun]) -> tuple[float | None, str]:
    """Measured GiB, or the percentage of a measured baseline of the same model and layout."""
    if "activation_memory_gib" in run.measured:
        return float(run.measured["activation_memory_gib"]), ""
    pct = run.measured.get("activation_memory_pct_of_no_recompute_baseline")
    layout = ("tp", "pp", "vpp", "mbs", "gbs")
    for base in runs:
        if (
            base.model == run.model
            and all(base.strategy[k] == run.strategy[k] for k in layout)
            and base.strategy.get("recompute") == "none"
            and not base.strategy.get("sp")
            and "activation_memory_gib" in base.measured
            and pct is not None
        ):
            return pct / 100 * float(base.measured["activation_memory_gib"]), "d"
    return None, ""


def _err(pred: float, meas: float | None) -> float | None:
    return None if meas is None else 100 * (pred / meas - 1)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows, runs) -> dict[str, list[float]]:
    """Predicted against measured per row; iteration time also with the overlap-hideable
    communication taken off ("hidden": the run's overlap flags hiding all they could)."""
    header = (
        f"{'run':44} {'tp pp vpp mbs  gbs sp recompute':32} {'iter meas s':>11} {'pred s':>7} {'err %':>6} "
        f"{'hidden s':>8} {'err %':>6} "
        f"{'act meas GiB':>13} {'pred':>6} {'err %':>6} {'stage':>6} {'p+o meas GiB':>12} {'pred':>6} {'err %':>6} "
        f"{'peak GiB':>8} {'device':>6}"
    )
    print(header)
    print("-" * len(header))
    errors: dict[str, list[float]] = {"time": [], "activation": [], "params": []}
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for run, pred, _, hardware in rows:
        s = run.strategy
        layout = (
            f"{s['tp']:>2} {s['pp']:>2} {s.get('vpp', 1):>3} {s['mbs']:>3} {s['gbs']:>4} "
            f"{int(bool(s.get('sp'))):>2} {s.get('recompute', 'none'):9}"
        )
        t_meas = run.iteration_time_s
        a_meas, tag = measured_activation(run, runs)
        p_meas = run.measured.get("params_plus_optimizer_memory_gib")
        hidden = pred.iteration_s - pred.hideable_s
        t_err, h_err = _err(pred.iteration_s, t_meas), _err(hidden, t_meas)
        a_err, p_err = _err(pred.activation_gib, a_meas), _err(pred.params_optimizer_gib, p_meas)
        for key, value in (("time", t_err), ("activation", a_err), ("params", p_err)):
            if value is not None:
                errors[key].append(value)
        if t_err is not None:
            fp8 = " (FP8 rows)" if s.get("precision") == "fp8" else ""
            by_kind.setdefault(f"on {hardware.name}{fp8}", []).append((t_err, h_err))
            by_kind.setdefault(f"of the {run.category} rows", []).append((t_err, h_err))
            # The held-out groups (MoE H100, MoE 910B, cp, dense H100): category x device.
            by_kind.setdefault(f"of the {run.category} rows on {hardware.name}", []).append(
                (t_err, h_err)
            )
        print(
            f"{run.run_id:44} {layout:32} {_fmt(t_meas, '11.2f')} {pred.iteration_s:7.2f} {_fmt(t_err, '+6.1f')} "
            f"{hidden:8.2f} {_fmt(h_err, '+6.1f')} "
            f"{_fmt(a_meas, '12.2f')}{tag or ' '} {pred.activation_gib:6.2f} {_fmt(a_err, '+6.1f')} "
            f"{pred.stage_activation_gib:6.2f} "
            f"{_fmt(p_meas, '12.2f')} {pred.params_optimizer_gib:6.2f} {_fmt(p_err, '+6.1f')} "
            f"{pred.peak_gib:8.1f} {pred.device_gib:6.0f}{' OVER' if pred.peak_gib > pred.device_gib else ''}"
        )
    print_summary(rows, errors, by_kind)
    return errors


def print_summary(rows, errors: dict[str, list[float]], groups: dict[str, list]) -> None:
    """Mean / max |error| per quantity, per device kind (FP8 rows apart) and per category; the
    rows that ran with the modelled peak above the device's memory."""
    print()
    for key, label in (
        ("time", "iteration time"),
        ("activation", "activation memory"),
        ("params", "params+optimizer"),
    ):
        values = np.abs(errors[key])
        if len(values):
            print(
                f"{label:18}: {len(values)} rows, mean |error| {values.mean():.1f} %, max |error| {values.max():.1f} %"
            )
    # A row ran when it has a measured time or its source says it ran (PublishedRun.ran);
    # Korthikanti et al.'s memory-only rows include layouts that do not fit in 80 GB (their
    # Figure 1), which must stay above.
    ran = [(run, pred) for run, pred, _, _ in rows if run.ran]
    over = [run.run_id for run, pred in ran if pred.peak_gib > pred.device_gib]
    print(
        f"rows that ran with the modelled peak above the device's memory: {len(over)} of "
        f"{len(ran)}" + (f" ({', '.join(over)})" if over else "")
    )
    for group, pairs in groups.items():
        exposed, hidden = np.abs([p[0] for p in pairs]), np.abs([p[1] for p in pairs])
        print(
            f"iteration time {group}: {len(pairs)} rows, mean |error| {exposed.mean():.1f} %, max "
            f"{exposed.max():.1f} %; with overlap hidden: mean {hidden.mean():.1f} %, max {hidden.max():.1f} %"
        )
