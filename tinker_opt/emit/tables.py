"""Rich tables for the terminal: ranked strategies and the per-stage breakdown."""

from __future__ import annotations

from typing import Any, Sequence

from rich.table import Table

from tinker_opt.model.strategy import Strategy


def strategies_table(evaluations: Sequence[dict[str, Any]], title: str) -> Table:
    """One row per strategy: its short label, the layer split and the modelled figures."""
    table = Table(title=title)
    for column, justify in (("#", "right"), ("strategy", "left"), ("layers/stage", "left"),
                            ("time (ms)", "right"), ("memory (MB)", "right"), ("tokens/s/dev", "right")):
        table.add_column(column, justify=justify, overflow="fold")
    for rank, evaluation in enumerate(evaluations, start=1):
        strategy = Strategy.from_dict(evaluation["strategy"]).replace(num_layer_list=None)
        table.add_row(
            str(rank), strategy.label(), ",".join(str(st["layers"]) for st in evaluation["stages"]),
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
