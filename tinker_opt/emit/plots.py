"""The pictures of a results folder, as SVG files drawn by matplotlib's own SVG backend.

* `plot_stage_breakdown`: per stage, where an iteration goes (compute, recompute, exposed
  communication, pipeline bubble, gradient sync + optimizer) and what memory holds (weights,
  gradients, optimizer states, activations, transient peak, recompute working set), for the best
  strategy and the script's own side by side, on shared axes.
* `plot_schedule`: the pipeline schedule of a strategy as a timeline (schedule.py).
* `plot_candidates`: every evaluated strategy's time against memory, the Pareto front, the picks,
  the script's own strategy and the limit.

The cheapest path matplotlib offers (issue 30): matplotlib is imported only when a picture is
drawn, never `pyplot` (a `Figure` needs no backend selection and no global state), few artists (one
bar call per part, one `broken_barh` per stage, one `scatter` per kind of point), fixed margins
instead of `tight_layout` (which draws the figure once more to measure it), and text kept as SVG
text (`svg.fonttype = "none"`: no glyph outlines), so each figure is drawn once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from io import StringIO
from pathlib import Path
from typing import Any

from tinker_opt.emit.schedule import Op, num_microbatches, pipeline_ops

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
MIN_LABELLED_WIDTH = 0.008
"""A box narrower than this share of the time axis gets no micro-batch number (it would not fit)."""
MAX_STAGE_LABELS = 16
"""Beyond this many stages every k-th stage is labelled on the x axis."""


@contextmanager
def _figure(width: float, height: float, path: Path | StringIO) -> Iterator[Any]:
    """A matplotlib `Figure` (inches) in the pictures' style, saved once as SVG to `path` on leaving."""
    import matplotlib
    from matplotlib.figure import Figure

    # SVG text as text (small, fast, selectable) and a fixed id salt: the same folder, the same file
    with matplotlib.rc_context(
        {"svg.fonttype": "none", "svg.hashsalt": "tinker-opt", "font.size": 9, "axes.titley": 1.0}
    ):
        fig = Figure(figsize=(width, height))
        yield fig
        fig.savefig(path, format="svg", metadata={"Date": None})


WARM_UP = {
    "strategy": {"tp": 1, "pp": 2, "dp": 1, "vpp": 1, "mbs": 1},
    "iteration_time_ms": 2.0,
    "peak_memory_mb": 1.0,
    "stages": [
        {"stage": s, "layers": 1, "time_ms": 1.0, "weights_mb": 1.0, "activations_mb": 1.0}
        for s in range(2)
    ],
}
"""A two-stage strategy `warm_up` draws, in memory."""


def warm_up() -> None:
    """Draw the stage picture once, in memory, for a small strategy (WARM_UP): what a first
    drawing loads and caches besides the imports (the font, the metrics of the legends' and axes'
    words, the SVG canvas, the artists' first use), loaded ahead by the picture worker
    (emit/picture_worker.py) while the search runs. The other two pictures gain little from it."""
    plot_stage_breakdown(WARM_UP, None, 4, 2.0, StringIO(), current_note="warm-up")


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


def _stacked(ax, rows: Sequence[Sequence[float]], colours: Sequence[str]) -> None:
    """One stacked bar per row (stage): one `bar` call per column, bottom to top in column order."""
    index = range(len(rows))
    bottom = [0.0] * len(rows)
    for column, colour in enumerate(colours):
        values = [row[column] for row in rows]
        ax.bar(index, values, bottom=bottom, color=colour, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]


def _stage_ticks(ax, evaluation: Mapping[str, Any]) -> None:
    stages = evaluation["stages"]
    step = math.ceil(len(stages) / MAX_STAGE_LABELS)
    shown = [
        (i, f"s{st['stage']}\n{st['layers']}L") for i, st in enumerate(stages) if i % step == 0
    ]
    ax.set_xticks([i for i, _ in shown], [label for _, label in shown])
    ax.set_xlim(-0.5, len(stages) - 0.5)


def _limit_line(ax, limit_mb: float, tallest_mb: float) -> None:
    """The memory limit as a dashed line, or a note when it is far above every bar (the bars stay readable)."""
    if limit_mb <= 4 * tallest_mb:
        ax.axhline(limit_mb, color="black", linestyle="--", linewidth=1)
    else:
        note = f"limit {limit_mb:g} MB is off the scale"
        ax.text(0.02, 0.95, note, transform=ax.transAxes, fontsize=8, va="top")


def _legend(ax, entries: Sequence[tuple[str, str, str]]) -> None:
    """One legend right of `ax` from (label, colour, kind) rows; kind `box` or `dash`."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(color=c, label=n) if kind == "box" else Line2D([], [], color=c, ls="--", label=n)
        for n, c, kind in entries
    ]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))


def plot_stage_breakdown(
    best: Mapping[str, Any],
    current: Mapping[str, Any] | None,
    global_batch_size: int,
    memory_limit_mb: float,
    path: Path | StringIO,
    *,
    current_note: str | None = None,
) -> Path | StringIO:
    """Per-stage stacked time and memory of the best strategy, and of the script's own beside it."""
    columns = [("best", best)] + ([("current (the script's own)", current)] if current else [])
    width = 5.5 * len(columns) + 2.5
    with _figure(width, 7.8, path) as fig:
        axes = fig.subplots(2, len(columns), squeeze=False, sharey="row")
        fig.subplots_adjust(left=0.9 / width, right=1 - 2.1 / width, top=0.9, bottom=0.09)
        fig.subplots_adjust(hspace=0.42, wspace=0.12)
        tallest_mb = 0.0
        for col, (name, evaluation) in enumerate(columns):
            m = num_microbatches(evaluation, global_batch_size)
            time_ax, memory_ax = axes[0][col], axes[1][col]
            _stacked(time_ax, stage_time_parts(evaluation, m), [c for _, c in TIME_PARTS])
            time_ax.set_title(
                f"{name}: {evaluation['iteration_time_ms']:.1f} ms / iteration\n"
                f"{_short_label(evaluation)}",
                fontsize=10,
            )
            memory = [[st.get(k, 0.0) for k, _, _ in MEMORY_PARTS] for st in evaluation["stages"]]
            _stacked(memory_ax, memory, [c for _, _, c in MEMORY_PARTS])
            memory_ax.set_title(f"{name}: peak {evaluation['peak_memory_mb']:.0f} MB", fontsize=10)
            tallest_mb = max(tallest_mb, *(sum(row) for row in memory))
            _stage_ticks(time_ax, evaluation)
            _stage_ticks(memory_ax, evaluation)
        for ax in axes[1]:
            _limit_line(ax, memory_limit_mb, tallest_mb)
        axes[0][0].set_ylabel("time per iteration (ms)")
        axes[1][0].set_ylabel(f"memory per device (MB), limit {memory_limit_mb:g}")
        _legend(axes[0][-1], [(n, c, "box") for n, c in reversed(TIME_PARTS)])
        entries = [(n, c, "box") for _, n, c in reversed(MEMORY_PARTS)]
        _legend(axes[1][-1], [*entries, ("memory limit", "black", "dash")])
        if current is None and current_note:
            note = f"the script's own strategy: {current_note}"[:160]
            fig.text(0.5, 0.008, note, ha="center", fontsize=8)
    return path


def plot_schedule(
    evaluation: Mapping[str, Any],
    global_batch_size: int,
    path: Path | StringIO,
    *,
    max_microbatches: int = 8,
) -> Path | StringIO:
    """The pipeline timeline of one strategy: forward, recompute and backward per stage and
    micro-batch, for the first micro-batches (the steady phase repeats) and the flush."""
    ops, shown, total = pipeline_ops(
        evaluation, global_batch_size, max_microbatches=max_microbatches
    )
    stages = evaluation["strategy"]["pp"]
    height = 1.2 + 0.42 * stages
    with _figure(12, height, path) as fig:
        ax = fig.add_subplot()
        fig.subplots_adjust(left=0.07, right=0.88, top=1 - 0.45 / height, bottom=0.6 / height)
        _draw_ops(ax, ops, labels=len(ops) <= MAX_LABELLED_OPS)
        ax.set_yticks(range(stages), [f"stage {s}" for s in range(stages)])
        ax.set_ylim(stages - 0.5, -0.5)
        ax.set_xlabel("time (ms)")
        vpp = evaluation["strategy"]["vpp"]
        kind = "1F1B" if vpp == 1 else f"interleaved 1F1B, {vpp} chunks per stage"
        more = (
            f"first {shown} of {total} micro-batches; the steady phase repeats"
            if shown < total
            else f"all {total} micro-batches"
        )
        ax.set_title(f"pipeline schedule of the best strategy ({kind}; {more})", fontsize=10)
        entries = [("forward", "F"), ("recompute", "R"), ("backward", "B")]
        _legend(ax, [(n, OP_COLOURS[k], "box") for n, k in entries])
    return path


def _draw_ops(ax, ops: Sequence[Op], *, labels: bool) -> None:
    """The boxes as one compound path per colour (a colour per kind; later chunks of an
    interleaved stage lighter), outlined in white, numbered by micro-batch when there are few
    enough boxes and a box is wide enough for it. One path per colour rather than one per box: the
    SVG backend styles and writes each path of a collection on its own, and a long pipeline has
    thousands of boxes (issue 30). Added as artists (the limits are set here, not measured from
    every corner of the paths)."""
    from matplotlib.colors import to_rgba
    from matplotlib.patches import PathPatch
    from matplotlib.path import Path as BoxPath

    end = max(op.end for op in ops) * 1.01
    boxes: dict[tuple[str, bool], list[Op]] = {}
    for op in ops:
        boxes.setdefault((op.kind, op.chunk % 2 == 1), []).append(op)
    corners = ((0, 0), (1, 0), (1, 1), (0, 1), (0, 0))
    codes = [BoxPath.MOVETO, BoxPath.LINETO, BoxPath.LINETO, BoxPath.LINETO, BoxPath.CLOSEPOLY]
    for (kind, lighter), row in boxes.items():
        vertices = [
            (op.start + dx * (op.end - op.start), op.stage - 0.4 + dy * 0.8)
            for op in row
            for dx, dy in corners
        ]
        ax.add_artist(
            PathPatch(
                BoxPath(vertices, codes * len(row)),
                facecolor=to_rgba(OP_COLOURS[kind], 0.65 if lighter else 1.0),
                edgecolor="white",
                linewidth=0.5,
            )
        )
    ax.set_xlim(0, end)
    if labels:
        for op in ops:
            if op.end - op.start >= MIN_LABELLED_WIDTH * end:
                ax.text(
                    (op.start + op.end) / 2,
                    op.stage,
                    str(op.microbatch + 1),
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white",
                )


def _short_label(evaluation: Mapping[str, Any]) -> str:
    from tinker_opt.strategy import Strategy

    return Strategy.from_dict(evaluation["strategy"]).replace(num_layer_list=None).label()


def _point(e: Mapping[str, Any]) -> tuple[float, float]:
    return e["peak_memory_mb"], e["iteration_time_ms"]


def plot_candidates(
    evaluated: Sequence[Mapping[str, Any]],
    pareto: Sequence[Mapping[str, Any]],
    picks: Mapping[str, Mapping[str, Any]],
    memory_limit_mb: float,
    path: Path | StringIO,
    *,
    current: Mapping[str, Any] | None = None,
    ranked: Sequence[Mapping[str, Any]] = (),
) -> Path | StringIO:
    """Every evaluated strategy's time against memory, with the Pareto front, picks, the ranks of
    the ranked list, the script's own strategy and the limit."""
    with _figure(11, 6.5, path) as fig:
        ax = fig.add_subplot()
        fig.subplots_adjust(left=0.09, right=0.76, top=0.93, bottom=0.09)
        memory, time = zip(*map(_point, evaluated), strict=True)
        ax.scatter(
            memory, time, color="tab:blue", alpha=0.35, s=18, label=f"evaluated ({len(evaluated)})"
        )
        front = sorted(map(_point, pareto))
        if front:
            memory, time = zip(*front, strict=True)
            ax.step(
                memory,
                time,
                where="post",
                color="tab:green",
                linewidth=1.5,
                marker="o",
                markersize=5,
                label="Pareto front",
            )
        for rank, e in enumerate(ranked, start=1):
            ax.annotate(
                str(rank),
                _point(e),
                textcoords="offset points",
                xytext=(-4, -11),
                fontsize=7,
                color="tab:blue",
            )
        _mark_picks(ax, picks)
        if current is not None:
            _emphasised(ax, [_point(current)], ("X", "tab:red", 140), "current (the script's own)")
        ax.axvline(
            memory_limit_mb,
            color="red",
            linestyle="--",
            label=f"memory limit {memory_limit_mb:g} MB",
        )
        ax.set_xlabel("peak memory per device (MB)")
        ax.set_ylabel("iteration time (ms)")
        ax.set_title("evaluated strategies: time vs memory")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return path


def _mark_picks(ax, picks: Mapping[str, Mapping[str, Any]]) -> None:
    """A gold star per distinct pick (picks that are the same strategy share one), in one scatter,
    named beside it."""
    points: dict[tuple[float, float], list[str]] = {}
    for name, evaluation in picks.items():
        points.setdefault(_point(evaluation), []).append(name)
    if not points:
        return
    _emphasised(ax, list(points), ("*", "gold", 150), "picks (named)")
    for point, names in points.items():
        ax.annotate(
            ", ".join(names), point, textcoords="offset points", xytext=(8, 6), fontsize=8, zorder=4
        )


def _emphasised(
    ax, points: Sequence[tuple[float, float]], look: tuple[str, str, float], label: str
) -> None:
    """Points drawn above the others in one scatter: (marker, colour, size), outlined in black."""
    marker, colour, size = look
    memory, time = zip(*points, strict=True)
    ax.scatter(
        memory, time, s=size, marker=marker, color=colour, edgecolor="black", zorder=3, label=label
    )
