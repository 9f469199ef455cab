"""Rich tables for the terminal: ranked strategies and the per-stage breakdown."""

from __future__ import annotations

from typing import Any, Sequence

from rich.table import Table


def strategies_table(evaluations: Sequence[dict[str, Any]], title: str) -> Table:
    table = Table(title=title)
    for column in ("#", "tp", "pp", "dp", "cp", "ep", "vpp", "sp", "dist-opt", "mbs", "recompute",
                   "layers/stage", "time (ms)", "memory (MB)", "tokens/s/dev"):
        table.add_column(column, justify="right")
    for rank, evaluation in enumerate(evaluations, start=1):
        s = evaluation["strategy"]
        recompute = s["recompute"] if s["recompute"] != "full" else f"full {s['recompute_num_layers'] or ''}".strip()
        table.add_row(
            str(rank), str(s["tp"]), str(s["pp"]), str(s["dp"]), str(s["cp"]), str(s["ep"]), str(s["vpp"]),
            "on" if s["sp"] else "off", "on" if s["dist_opt"] else "off", str(s["mbs"]), recompute,
            ",".join(str(st["layers"]) for st in evaluation["stages"]),
            f"{evaluation['iteration_time_ms']:.1f}", f"{evaluation['peak_memory_mb']:.0f}",
            f"{evaluation['tokens_per_s_per_device']:.0f}")
    return table


def stages_table(evaluation: dict[str, Any]) -> Table:
    """Every numeric per-stage field of an Evaluation, one row per stage."""
    stages = evaluation["stages"]
    keys = [k for k in stages[0] if isinstance(stages[0][k], (int, float)) and not isinstance(stages[0][k], bool)]
    table = Table(title="per-stage breakdown")
    for key in keys:
        table.add_column(key, justify="right")
    for stage in stages:
        table.add_row(*(f"{stage[k]:.2f}" if isinstance(stage[k], float) else str(stage[k]) for k in keys))
    return table
