"""Tables of `calibrate --comm` (rich): the fitted links, and the residuals of each op and size."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _percent(value: float) -> str:
    return f"{100 * value:+.1f} %"


def comm_links_table(report: dict[str, Any]) -> Table:
    """Each fitted tier: its own bandwidth and latency, then each op's."""
    table = Table(
        title=f"links fitted on {report['nodes']} node(s) x {report['devices_per_node']} devices"
    )
    for column in ("tier", "op", "bandwidth GB/s", "latency us"):
        table.add_column(column, justify="left" if column in ("tier", "op") else "right")
    for tier in report["tiers"]:
        table.add_row(
            tier["tier"], "(all)", f"{tier['bandwidth_gbs']:.4g}", f"{tier['latency_us']:.4g}"
        )
        for op, link in tier["ops"].items():
            table.add_row("", op, f"{link['bandwidth_gbs']:.4g}", f"{link['latency_us']:.4g}")
    return table


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def comm_residuals_table(report: dict[str, Any]) -> Table:
    """Per tier, op and group size: the priced time's error at each measured size, mean and max."""
    sizes = sorted({int(b) for row in report["residuals"] for b in row["by_bytes"]})
    table = Table(title="priced on the written description vs measured (predicted / measured - 1)")
    for column in ("tier", "op", "group", *map(_size, sizes), "mean |err|", "max |err|"):
        table.add_column(column, justify="left" if column in ("tier", "op") else "right")
    for row in report["residuals"]:
        by_size = [row["by_bytes"].get(b) for b in sizes]
        table.add_row(
            row["tier"],
            row["op"],
            str(row["group_size"]),
            *("" if e is None else _percent(e) for e in by_size),
            f"{100 * row['mean_abs_error']:.1f} %",
            f"{100 * row['max_abs_error']:.1f} %",
        )
    return table
