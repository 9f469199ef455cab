"""The pictures of a results folder, as SVG files (emit/svg.py: no plotting library, no display).

* `plot_stage_breakdown`: per stage, where an iteration goes (compute, recompute, exposed
  communication, pipeline bubble, gradient sync + optimizer) and what memory holds (weights,
  gradients, optimizer states, activations, transient peak, recompute working set), for the best
  strategy and the script's own side by side, on shared axes.
* `plot_schedule`: the pipeline schedule of a strategy as a timeline (schedule.py).
* `plot_candidates`: every evaluated strategy's time against memory, the Pareto front, the picks,
  the script's own strategy and the memory limit.

Each picture is drawn once, as text (issue 30: the matplotlib pictures cost more than the search).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tinker_opt.emit.schedule import Op, num_microbatches, pipeline_ops
from tinker_opt.emit.svg import Axes, Svg, draw_axes, legend

TIME_PARTS = (
    ("compute", "tab:blue"),
    ("recompute", "tab:orange"),
    ("communication (exposed)", "tab:red"),
    ("pipeline bubble", "lightgray"),
    ("grad sync + optimizer", "tab:purple"),
)
MEMORY_PARTS = (
    ("weights_mb", "weights", "tab:blue"),
    ("gradients_mb", "gradients", "tab:cyan"),
    ("optimizer_mb", "optimizer states", "tab:green"),
    ("activations_mb", "activations", "tab:orange"),
    ("transient_mb", "transient peak", "tab:red"),
    ("recompute_work_mb", "recompute working set", "tab:brown"),
)
OP_COLOURS = {"F": "tab:blue", "B": "tab:green", "R": "tab:orange"}
MAX_LABELLED_OPS = 600
"""Beyond this many boxes the micro-batch numbers are left out (they would not be legible)."""
MAX_STAGE_LABELS = 16
"""Beyond this many stages every k-th stage is labelled on the x axis."""


def stage_time_parts(evaluation: Mapping[str, Any], microbatches: int) -> list[list[float]]:
    """Per stage, the iteration time (ms) by TIME_PARTS; each stage adds up to the pipeline span plus
    its own tail. The bubble is the span less the stage's busy time (m micro-batches of its time)."""
    stages = evaluation["stages"]
    vpp = evaluation["strategy"]["vpp"]
    times = [st["time_ms"] for st in stages]
    span = (sum(times) + (microbatches * vpp - 1) * max(times)) / vpp
    parts = []
    for st in stages:
        recompute, comm = st.get("recompute_ms", 0.0), st.get("comm_ms", 0.0)
        compute = st.get("compute_ms", st["time_ms"] - comm) - recompute
        parts.append(
            [
                microbatches * compute,
                microbatches * recompute,
                microbatches * comm,
                max(span - microbatches * st["time_ms"], 0.0),
                st.get("tail_ms", 0.0),
            ]
        )
    return parts


def _write(svg: Svg, path: Path) -> Path:
    path.write_text(svg.content(), encoding="utf-8")
    return path


def _stacked(svg: Svg, axes: Axes, rows: Sequence[Sequence[float]], colours: Sequence[str]) -> None:
    """One stacked bar per row (stage), bottom to top in column order."""
    for index, row in enumerate(rows):
        bottom = 0.0
        for value, fill in zip(row, colours, strict=True):
            if value > 0:
                top = axes.y(bottom + value)
                svg.rect(
                    axes.x(index - 0.35), top, axes.x(0.7) - axes.x(0), axes.y(bottom) - top, fill
                )
            bottom += value


def _stage_ticks(evaluation: Mapping[str, Any]) -> list[tuple[float, str]]:
    stages = evaluation["stages"]
    step = math.ceil(len(stages) / MAX_STAGE_LABELS)
    return [(i, f"s{st['stage']}\n{st['layers']}L") for i, st in enumerate(stages) if i % step == 0]


def _limit_line(svg: Svg, axes: Axes, limit_mb: float, tallest_mb: float) -> None:
    """The memory limit as a dashed line, or a note when it is far above every bar (the bars stay readable)."""
    if limit_mb <= 4 * tallest_mb:
        y = axes.y(limit_mb)
        svg.line([(axes.left, y), (axes.left + axes.width, y)], "black", 1, "5,4")
    else:
        svg.text(axes.left + 8, axes.top + 14, f"limit {limit_mb:g} MB is off the scale", 9)


def plot_stage_breakdown(
    best: Mapping[str, Any],
    current: Mapping[str, Any] | None,
    global_batch_size: int,
    memory_limit_mb: float,
    path: Path,
    *,
    current_note: str | None = None,
) -> Path:
    """Per-stage stacked time and memory of the best strategy, and of the script's own beside it."""
    columns = [("best", best)] + ([("current (the script's own)", current)] if current else [])
    times = [stage_time_parts(e, num_microbatches(e, global_batch_size)) for _, e in columns]
    memories = [
        [[st.get(key, 0.0) for key, _, _ in MEMORY_PARTS] for st in e["stages"]] for _, e in columns
    ]
    tallest_mb = max(sum(row) for rows in memories for row in rows)
    time_top = 1.05 * max(sum(row) for rows in times for row in rows)
    memory_top = 1.05 * max(tallest_mb, memory_limit_mb if memory_limit_mb <= 4 * tallest_mb else 0)
    panel, gap, left = 430, 95, 85
    svg = Svg(left + len(columns) * (panel + gap) + 110, 760)
    for col, (name, evaluation) in enumerate(columns):
        x = left + col * (panel + gap)
        n = len(evaluation["stages"])
        time_axes = Axes(x, 55, panel, 250, (-0.5, n - 0.5), (0, time_top))
        memory_axes = Axes(x, 425, panel, 250, (-0.5, n - 0.5), (0, memory_top))
        ticks = _stage_ticks(evaluation)
        label = _short_label(evaluation)
        title = f"{name}: {evaluation['iteration_time_ms']:.1f} ms / iteration\n{label}"
        draw_axes(svg, time_axes, title=title, x_ticks=ticks, y_label="" if col else _TIME_Y)
        _stacked(svg, time_axes, times[col], [c for _, c in TIME_PARTS])
        memory_y = f"memory per device (MB), limit {memory_limit_mb:g}"
        title = f"{name}: peak {evaluation['peak_memory_mb']:.0f} MB"
        draw_axes(svg, memory_axes, title=title, x_ticks=ticks, y_label="" if col else memory_y)
        _stacked(svg, memory_axes, memories[col], [c for _, _, c in MEMORY_PARTS])
        _limit_line(svg, memory_axes, memory_limit_mb, tallest_mb)
    right = left + len(columns) * (panel + gap) - gap + 12
    legend(svg, right, 55, [(n, c, "box") for n, c in reversed(TIME_PARTS)])
    entries = [(n, c, "box") for _, n, c in reversed(MEMORY_PARTS)]
    legend(svg, right, 425, [*entries, ("memory limit", "black", "dash")])
    if current is None and current_note:
        note = f"the script's own strategy: {current_note}"[:160]
        svg.text(svg.width / 2, 752, note, 9, anchor="middle")
    return _write(svg, path)


_TIME_Y = "time per iteration (ms)"


def plot_schedule(
    evaluation: Mapping[str, Any], global_batch_size: int, path: Path, *, max_microbatches: int = 8
) -> Path:
    """The pipeline timeline of one strategy: forward, recompute and backward per stage and
    micro-batch, for the first micro-batches (the steady phase repeats) and the flush."""
    ops, shown, total = pipeline_ops(
        evaluation, global_batch_size, max_microbatches=max_microbatches
    )
    stages = evaluation["strategy"]["pp"]
    height = 30 * stages
    svg = Svg(1200, height + 100)
    end = max(op.end for op in ops) * 1.01
    axes = Axes(80, 40, 1000, height, (0, end), (stages, 0))
    vpp = evaluation["strategy"]["vpp"]
    kind = "1F1B" if vpp == 1 else f"interleaved 1F1B, {vpp} chunks per stage"
    more = (
        f"first {shown} of {total} micro-batches; the steady phase repeats"
        if shown < total
        else f"all {total} micro-batches"
    )
    title = f"pipeline schedule of the best strategy ({kind}; {more})"
    draw_axes(svg, axes, title=title, x_label="time (ms)", y_ticks=False)
    _draw_ops(svg, axes, ops, labels=len(ops) <= MAX_LABELLED_OPS)
    for s in range(stages):
        svg.text(axes.left - 6, axes.y(s + 0.5) + 3, f"stage {s}", 9, anchor="end")
    entries = [("forward", "F"), ("recompute", "R"), ("backward", "B")]
    legend(
        svg, axes.left + axes.width + 12, axes.top, [(n, OP_COLOURS[k], "box") for n, k in entries]
    )
    return _write(svg, path)


def _draw_ops(svg: Svg, axes: Axes, ops: Sequence[Op], *, labels: bool) -> None:
    """One box per operation (later chunks of an interleaved stage lighter), numbered by
    micro-batch when there are few enough and the box is wide enough to hold the number."""
    for op in ops:
        x, top = axes.x(op.start), axes.y(op.stage + 0.1)
        width = axes.x(op.end) - x
        extra = {"fill_opacity": "0.65"} if op.chunk % 2 else {}
        svg.rect(x, top, width, axes.y(op.stage + 0.9) - top, OP_COLOURS[op.kind], **extra)
        if labels and width >= 9:
            y = axes.y(op.stage + 0.5) + 3
            svg.text(x + width / 2, y, str(op.microbatch + 1), 7, anchor="middle", fill="white")


def _short_label(evaluation: Mapping[str, Any]) -> str:
    from tinker_opt.strategy import Strategy

    return Strategy.from_dict(evaluation["strategy"]).replace(num_layer_list=None).label()


def _padded(values: Sequence[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    pad = 0.05 * (high - low) or 0.05 * abs(high) or 1.0
    return low - pad, high + pad


def plot_candidates(
    evaluated: Sequence[Mapping[str, Any]],
    pareto: Sequence[Mapping[str, Any]],
    picks: Mapping[str, Mapping[str, Any]],
    memory_limit_mb: float,
    path: Path,
    *,
    current: Mapping[str, Any] | None = None,
    ranked: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """Every evaluated strategy's time against memory, with the Pareto front, picks, the ranks of
    the ranked list, the script's own strategy and the limit."""
    shown = [*evaluated, *picks.values(), *([current] if current is not None else [])]
    memory = [e["peak_memory_mb"] for e in shown] + [memory_limit_mb]
    axes = Axes(90, 40, 780, 480, _padded(memory), _padded([e["iteration_time_ms"] for e in shown]))
    svg = Svg(1110, 600)
    draw_axes(
        svg,
        axes,
        title="evaluated strategies: time vs memory",
        x_label="peak memory per device (MB)",
        y_label="iteration time (ms)",
    )

    def at(e: Mapping[str, Any]) -> tuple[float, float]:
        return axes.x(e["peak_memory_mb"]), axes.y(e["iteration_time_ms"])

    for e in evaluated:
        svg.marker(*at(e), "o", 3, "tab:blue", fill_opacity="0.35")
    front = [at(e) for e in sorted(pareto, key=lambda e: e["peak_memory_mb"])]
    steps = [p for (x0, y0), (x1, _) in itertools.pairwise(front) for p in ((x0, y0), (x1, y0))]
    svg.line([*steps, *front[-1:]], "tab:green", 1.5)
    for point in front:
        svg.marker(*point, "o", 3.5, "tab:green")
    for rank, e in enumerate(ranked, start=1):
        x, y = at(e)
        svg.text(x - 4, y + 13, str(rank), 7, fill="tab:blue")
    _mark_picks(svg, picks, at, axes.left + 0.75 * axes.width)
    if current is not None:
        svg.marker(*at(current), "x", 7, "tab:red", stroke="black", stroke_width="0.5")
    x = axes.x(memory_limit_mb)
    svg.line([(x, axes.top), (x, axes.top + axes.height)], "red", 1.2, "6,4")
    entries = [
        (f"evaluated ({len(evaluated)})", "tab:blue", "o"),
        ("Pareto front", "tab:green", "line"),
    ]
    entries += [("picks (named)", "gold", "*")] if picks else []
    entries += [("current (the script's own)", "tab:red", "x")] if current is not None else []
    entries += [(f"memory limit {memory_limit_mb:g} MB", "red", "dash")]
    legend(svg, axes.left + axes.width + 14, axes.top, entries)
    return _write(svg, path)


def _mark_picks(svg: Svg, picks: Mapping[str, Mapping[str, Any]], at, right: float) -> None:
    """A gold star per distinct pick (picks that are the same strategy share one), named on its
    right, or on its left when it lies beyond `right` (the name stays inside the picture)."""
    points: dict[tuple[float, float], list[str]] = {}
    for name, evaluation in picks.items():
        points.setdefault(at(evaluation), []).append(name)
    for (x, y), names in points.items():
        svg.marker(x, y, "*", 9, "gold", stroke="black", stroke_width="0.7")
        left = x > right
        svg.text(x - 10 if left else x + 10, y - 7, ", ".join(names), 8, "end" if left else "start")
