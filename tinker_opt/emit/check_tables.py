"""Terminal tables of `check` (measured vs predicted) and `calibrate --log` (before / after)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

ROWS = (
    ("iteration time (ms)", "iteration_time_ms", "{:.1f}"),
    ("tokens / s / device", "tokens_per_s_per_device", "{:.0f}"),
    ("peak allocated (MB, max over ranks)", "peak_allocated_mb", "{:.0f}"),
    ("peak reserved (MB, max over ranks)", "peak_reserved_mb", "{:.0f}"),
)


def _cell(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f} %"


def check_table(result: dict[str, Any]) -> Table:
    """Measured, predicted and the relative error per figure, then the predicted time terms."""
    table = Table(title=f"{result['log']['source']} ({result['log']['form']})")
    for column in ("", "measured", "predicted", "error"):
        table.add_column(column, justify="left" if not column else "right")
    measured, predicted = result["measured"], result["predicted"]
    for label, key, form in ROWS:
        error = result["error"].get(key)
        if error is None and key == "tokens_per_s_per_device":
            error = predicted[key] / measured[key] - 1
        table.add_row(
            label, _cell(measured[key], form), _cell(predicted[key], form), _percent(error)
        )
    for name, value in predicted["time_breakdown_ms"].items():
        table.add_row(f"  predicted {name.removesuffix('_ms')} (ms)", "", f"{value:.1f}", "")
    return table


def calibration_table(report: dict[str, Any]) -> Table:
    """Per log: measured time, prediction before and after the fit, and both errors."""
    comm, fixed = report.get("comm_scale"), report.get("fixed_ms_per_microbatch")
    links = f", communication x {comm:.4f}" if comm is not None else ", communication with it"
    if fixed is not None:
        links += f", fixed {fixed:.2f} ms per micro-batch"
    table = Table(title=f"calibrated: device time x {report['time_scale']:.4f}{links}")
    for column in ("log", "measured ms", "before ms", "error", "after ms", "error"):
        table.add_column(column, justify="left" if column == "log" else "right")
    for row in report["logs"]:
        path = Path(row["log"])
        table.add_row(
            f"{path.parent.name}/{path.name}",
            f"{row['measured_ms']:.1f}",
            f"{row['predicted_before_ms']:.1f}",
            _percent(row["error_before"]),
            f"{row['predicted_after_ms']:.1f}",
            _percent(row["error_after"]),
        )
    return table
