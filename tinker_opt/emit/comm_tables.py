"""Tables of `calibrate --comm` (rich): the fitted links, and the residuals of each op and size."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _percent(value: float) -> str:
    return f"{100 * value:+.1f} %"


def comm_links_table(report: dict[str, Any]) -> Table:
    """Each fitted tier: its own bandwidth and latency, then each op's size regimes, and the
    figures fitted against the rows they were fitted on."""
    table = Table(
        title=f"links fitted on {report['nodes']} node(s) x {report['devices_per_node']} devices"
    )
    for column in ("tier", "op", "from", "bandwidth GB/s", "latency us", "figures / rows"):
        table.add_column(column, justify="left" if column in ("tier", "op") else "right")
    for tier in report["tiers"]:
        count = f"{tier['parameters']} / {tier['rows']}"
        table.add_row(
            tier["tier"],
            "(all)",
            "",
            f"{tier['bandwidth_gbs']:.4g}",
            f"{tier['latency_us']:.4g}",
            count,
        )
        for op, link in tier["ops"].items():
            small = link.get("small", [])
            starts = [0, *(regime["below_bytes"] for regime in small)]
            for regime, start in zip([*small, link], starts, strict=True):
                table.add_row(
                    "",
                    op if start == starts[0] else "",
                    _size(start) if start else "",
                    f"{regime['bandwidth_gbs']:.4g}",
                    f"{regime['latency_us']:.4g}",
                    "",
                )
    return table


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20}M" if nbytes >= 1 << 20 else f"{nbytes >> 10}K"


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


def comm_goal_line(report: dict[str, Any]) -> str:
    """The all-reduce and all-to-all rows the fit saw (intra- and inter-node tiers): their
    largest error, against the 10 % of issue 31."""
    rows = [
        row
        for row in report["residuals"]
        if row["op"] in ("all_reduce", "all_to_all") and not row["tier"].startswith("world")
    ]
    if not rows:
        return "no all-reduce or all-to-all rows"
    worst = max(rows, key=lambda row: row["max_abs_error"])
    mean = sum(r["mean_abs_error"] * r["rows"] for r in rows) / sum(r["rows"] for r in rows)
    return (
        f"all-reduce and all-to-all, fitted tiers: mean |err| {100 * mean:.1f} %, max "
        f"{100 * worst['max_abs_error']:.1f} % ({worst['tier']} {worst['op']} group "
        f"{worst['group_size']})"
    )


def comm_report(report: dict[str, Any]) -> list[Table | str]:
    """What `calibrate --comm` prints: the links, the residuals, the goal's line."""
    return [comm_links_table(report), comm_residuals_table(report), comm_goal_line(report)]
