"""Rich tables for the terminal: ranked strategies and the per-stage breakdown."""

from __future__ import annotations

from typing import Any, Sequence

from rich.table import Table

from tinker_opt.strategy import Strategy


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


STAGE_COLUMNS = (("stage", "stage", "{:d}"), ("layers", "layers", "{:d}"), ("recompute_layers", "rc", "{:d}"),
                 ("time_ms", "time ms", "{:.1f}"), ("compute_ms", "compute ms", "{:.1f}"),
                 ("comm_ms", "comm ms", "{:.1f}"), ("memory_mb", "memory MB", "{:.0f}"),
                 ("weights_mb", "weights MB", "{:.0f}"), ("gradients_mb", "grads MB", "{:.0f}"),
                 ("optimizer_mb", "optim MB", "{:.0f}"), ("activations_mb", "activ MB", "{:.0f}"),
                 ("transient_mb", "transient MB", "{:.0f}"), ("recompute_work_mb", "rc work MB", "{:.0f}"))
"""(Evaluation stage key, column title, format) of the `simulate --detail` table."""


def stages_table(evaluation: dict[str, Any]) -> Table:
    """The per-stage breakdown of one Evaluation (the memory columns add up to `memory MB`)."""
    table = Table(title="per-stage breakdown")
    for _, title, _ in STAGE_COLUMNS:
        table.add_column(title, justify="right", overflow="fold")
    for stage in evaluation["stages"]:
        table.add_row(*(fmt.format(stage[key]) for key, _, fmt in STAGE_COLUMNS))
    return table


def breakdown_line(evaluation: dict[str, Any]) -> str:
    """Iteration time by term, peak memory and whether the figures are interpolated."""
    parts = ", ".join(f"{key.removesuffix('_ms')} {value:.1f}" for key, value in evaluation["time_breakdown_ms"].items())
    estimated = "; estimated (micro-batch interpolated)" if evaluation.get("estimated") else ""
    return f"iteration {evaluation['iteration_time_ms']:.3f} ms ({parts} ms); peak {evaluation['peak_memory_mb']:.0f} MB{estimated}"
