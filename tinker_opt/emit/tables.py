"""Rich tables for the terminal: ranked strategies and the per-stage breakdown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from tinker_opt.solve.picks import FOLD_MEMORY_SHARE, comparison_sentence
from tinker_opt.strategy import Strategy


def _short(evaluation: dict[str, Any]) -> str:
    return Strategy.from_dict(evaluation["strategy"]).replace(num_layer_list=None).label()


def strategies_table(
    evaluations: Sequence[dict[str, Any]],
    title: str,
    *,
    current: dict[str, Any] | None = None,
    folded: int = 0,
) -> Table:
    """One row per strategy: its short label, the layer split and the modelled figures; the
    script's own strategy (`current`: an Evaluation or {"error": ...}) as a last row of its own
    ("now!" in red where it is modelled above the memory limit).

    Fits an 80-column terminal with labels up to about 50 characters: the label never wraps
    (no_wrap), the layer split folds, light borders; tokens/s per device is in results.csv."""
    caption = (
        f"{folded} near-copies folded (same layout, slower, < {FOLD_MEMORY_SHARE:.0%} less memory)"
        if folded
        else None
    )
    table = Table(
        title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0)
    )
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("strategy", justify="left", no_wrap=True)
    table.add_column("layers", justify="left", overflow="fold")
    for column in ("time ms", "mem MB"):
        table.add_column(column, justify="right", no_wrap=True)
    for rank, evaluation in enumerate(evaluations, start=1):
        table.add_row(str(rank), *_cells(evaluation))
    if current is not None:
        table.add_section()
        if "error" in current:
            table.add_row("now", _short(current) if "strategy" in current else "", "", "-", "-")
        elif not current["fits"]:  # priced, above the memory limit: its figures, marked
            table.add_row("now!", *_cells(current), style="red")
        else:
            table.add_row("now", *_cells(current), style="yellow")
    return table


def _cells(evaluation: dict[str, Any]) -> list[str]:
    return [
        _short(evaluation),
        ",".join(str(st["layers"]) for st in evaluation["stages"]),
        f"{evaluation['iteration_time_ms']:.1f}",
        f"{evaluation['peak_memory_mb']:.0f}",
    ]


PICK_SHORT = {"keeps_checkpoint": "checkpoint", "no_pipeline": "no pp"}
"""Terminal names of the picks (summary.json keeps the full ones)."""


def picks_table(picks: dict[str, dict[str, Any]], titles: dict[str, str]) -> Table:
    """The named picks with short names; the caption says what each means (80 columns)."""
    caption = "; ".join(
        f"{PICK_SHORT.get(name, name)}: {titles[name]}"
        for name in picks
        if name in titles and name != "fastest"
    )
    table = Table(
        title="picks", caption=caption or None, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0)
    )
    table.add_column("pick", justify="left", no_wrap=True)
    table.add_column("strategy", justify="left", no_wrap=True)
    for column in ("time ms", "mem MB"):
        table.add_column(column, justify="right", no_wrap=True)
    for name, evaluation in picks.items():
        table.add_row(
            PICK_SHORT.get(name, name),
            _short(evaluation),
            f"{evaluation['iteration_time_ms']:.1f}",
            f"{evaluation['peak_memory_mb']:.0f}",
        )
    return table


def current_line(best: dict[str, Any] | None, current: dict[str, Any] | None) -> str | None:
    """One sentence comparing the best strategy with the script's own (None without a script)."""
    if current is None or best is None:
        return None
    if "error" in current:
        return f"the script's own strategy cannot be compared: {current['error']}"
    return comparison_sentence(best, current)  # says so where the script's does not fit


def search_summary(outcome: Any, title: str) -> Group:
    """What `search` and `all` print: the ranking with the script's own row, the picks, the comparison."""
    parts: list[Any] = [
        strategies_table(outcome.top, title, current=outcome.current, folded=outcome.folded)
    ]
    if outcome.picks:
        parts.append(picks_table(outcome.picks, outcome.pick_titles))
    comparison = current_line(outcome.top[0] if outcome.top else None, outcome.current)
    if comparison:
        parts.append(Text(comparison))
    return Group(*parts)


STAGE_COLUMNS = (
    ("stage", "stage", "{:d}"),
    ("layers", "layers", "{:d}"),
    ("recompute_layers", "rc", "{:d}"),
    ("time_ms", "time ms", "{:.1f}"),
    ("compute_ms", "compute ms", "{:.1f}"),
    ("comm_ms", "comm ms", "{:.1f}"),
    ("comm_hidden_ms", "hidden ms", "{:.1f}"),
    ("sync_ms", "sync ms", "{:.1f}"),
    ("sync_hidden_ms", "sync hidden ms", "{:.1f}"),
    ("memory_mb", "memory MB", "{:.0f}"),
    ("weights_mb", "weights MB", "{:.0f}"),
    ("gradients_mb", "grads MB", "{:.0f}"),
    ("optimizer_mb", "optim MB", "{:.0f}"),
    ("activations_mb", "activ MB", "{:.0f}"),
    ("transient_mb", "transient MB", "{:.0f}"),
    ("recompute_work_mb", "rc work MB", "{:.0f}"),
    ("attention_mask_mb", "mask MB", "{:.0f}"),
)
"""(Evaluation stage key, column title, format) of the `simulate --detail` table. Communication per
micro-batch: `comm ms` exposed (in `time ms`), `hidden ms` hidden behind compute; gradient sync
per iteration: `sync ms` exposed, `sync hidden ms` hidden (costs/overlap.py)."""


def stages_table(evaluation: dict[str, Any]) -> Table:
    """The per-stage breakdown of one Evaluation (the memory columns add up to `memory MB`)."""
    table = Table(title="per-stage breakdown")
    for _, title, _ in STAGE_COLUMNS:
        table.add_column(title, justify="right", overflow="fold")
    for stage in evaluation["stages"]:
        table.add_row(*(fmt.format(stage.get(key, 0)) for key, _, fmt in STAGE_COLUMNS))
    return table


def breakdown_line(evaluation: dict[str, Any]) -> str:
    """Iteration time by term, peak memory and whether the figures are interpolated."""
    parts = ", ".join(
        f"{key.removesuffix('_ms')} {value:.1f}"
        for key, value in evaluation["time_breakdown_ms"].items()
    )
    estimated = "; estimated (micro-batch interpolated)" if evaluation.get("estimated") else ""
    inside = evaluation.get("in_block_times") or []
    included = f"; not added, in the profiled block times: {', '.join(inside)}" if inside else ""
    return (
        f"iteration {evaluation['iteration_time_ms']:.3f} ms ({parts} ms); peak "
        f"{evaluation['peak_memory_mb']:.0f} MB{estimated}{included}"
    )
