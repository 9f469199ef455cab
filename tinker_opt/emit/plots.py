"""The pictures of a results folder (matplotlib, PNG, no display needed).

* `plot_stage_breakdown`: per stage, where an iteration goes (compute, recompute, exposed
  communication, pipeline bubble, gradient sync + optimizer) and what memory holds (weights,
  gradients, optimizer states, activations, transient peak, recompute working set), for the best
  strategy and the script's own side by side, on shared axes.
* `plot_schedule`: the pipeline schedule of a strategy as a timeline (schedule.py).
* `plot_candidates`: every evaluated strategy's time against memory, the Pareto front, the picks,
  the script's own strategy and the memory limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

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


def _stacked(
    ax, rows: Sequence[Sequence[float]], colours: Sequence[str], labels: Sequence[str]
) -> None:
    index = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for column, colour in enumerate(colours):
        values = [row[column] for row in rows]
        ax.bar(index, values, bottom=bottom, color=colour, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xticks(index, labels)


def _limit_line(ax, limit_mb: float, tallest_mb: float) -> None:
    """The memory limit as a dashed line, or a note when it is far above every bar (the bars stay readable)."""
    if limit_mb <= 4 * tallest_mb:
        ax.axhline(limit_mb, color="black", linestyle="--", linewidth=1)
        ax.set_ylim(top=max(ax.get_ylim()[1], 1.05 * limit_mb))
    else:
        ax.text(
            0.02,
            0.95,
            f"limit {limit_mb:g} MB is off the scale",
            transform=ax.transAxes,
            fontsize=8,
            va="top",
        )


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
    fig, axes = plt.subplots(
        2, len(columns), figsize=(5.5 * len(columns) + 2.5, 7.5), squeeze=False, sharey="row"
    )
    for col, (name, evaluation) in enumerate(columns):
        m = num_microbatches(evaluation, global_batch_size)
        labels = [f"s{st['stage']}\n{st['layers']}L" for st in evaluation["stages"]]
        _stacked(axes[0][col], stage_time_parts(evaluation, m), [c for _, c in TIME_PARTS], labels)
        axes[0][col].set_title(
            f"{name}: {evaluation['iteration_time_ms']:.1f} ms / iteration\n"
            f"{_short_label(evaluation)}",
            fontsize=10,
        )
        memory = [[st.get(key, 0.0) for key, _, _ in MEMORY_PARTS] for st in evaluation["stages"]]
        _stacked(axes[1][col], memory, [c for _, _, c in MEMORY_PARTS], labels)
        _limit_line(axes[1][col], memory_limit_mb, max(sum(row) for row in memory))
        axes[1][col].set_title(f"{name}: peak {evaluation['peak_memory_mb']:.0f} MB", fontsize=10)
    axes[0][0].set_ylabel("time per iteration (ms)")
    axes[1][0].set_ylabel(f"memory per device (MB), limit {memory_limit_mb:g}")
    axes[0][-1].legend(
        handles=[Patch(color=c, label=n) for n, c in reversed(TIME_PARTS)],
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    axes[1][-1].legend(
        handles=[Patch(color=c, label=n) for _, n, c in reversed(MEMORY_PARTS)]
        + [plt.Line2D([], [], color="black", linestyle="--", label="memory limit")],
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    if current is None and current_note:
        fig.text(
            0.5, 0.005, f"the script's own strategy: {current_note}"[:160], ha="center", fontsize=8
        )
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_schedule(
    evaluation: Mapping[str, Any], global_batch_size: int, path: Path, *, max_microbatches: int = 8
) -> Path:
    """The pipeline timeline of one strategy: forward, recompute and backward per stage and
    micro-batch, for the first micro-batches (the steady phase repeats) and the flush."""
    ops, shown, total = pipeline_ops(
        evaluation, global_batch_size, max_microbatches=max_microbatches
    )
    stages = evaluation["strategy"]["pp"]
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.55 * stages))
    _draw_ops(ax, ops, labels=len(ops) <= MAX_LABELLED_OPS)
    ax.set_yticks(range(stages), [f"stage {s}" for s in range(stages)])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    vpp = evaluation["strategy"]["vpp"]
    kind = "1F1B" if vpp == 1 else f"interleaved 1F1B, {vpp} chunks per stage"
    more = (
        f"first {shown} of {total} micro-batches; the steady phase repeats"
        if shown < total
        else f"all {total} micro-batches"
    )
    ax.set_title(f"pipeline schedule of the best strategy ({kind}; {more})", fontsize=10)
    handles = [
        Patch(color=OP_COLOURS["F"], label="forward"),
        Patch(color=OP_COLOURS["R"], label="recompute"),
        Patch(color=OP_COLOURS["B"], label="backward"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


MAX_LABELLED_OPS = 600
"""Beyond this many boxes the micro-batch numbers are left out (they would not be legible)."""


def _draw_ops(ax, ops: Sequence[Op], *, labels: bool) -> None:
    """The boxes, one collection per (kind, chunk parity, stage): later chunks of an interleaved stage lighter."""
    groups: dict[tuple[str, int, int], list[tuple[float, float]]] = {}
    for op in ops:
        groups.setdefault((op.kind, op.chunk % 2, op.stage), []).append(
            (op.start, op.end - op.start)
        )
    for (
        kind,
        odd,
        stage,
    ), spans in groups.items():  # one collection per group: fast with thousands of boxes
        ax.broken_barh(
            spans,
            (stage - 0.4, 0.8),
            facecolors=OP_COLOURS[kind],
            edgecolor="white",
            linewidth=0.5,
            alpha=0.65 if odd else 1.0,
        )
    ax.set_xlim(0, max(op.end for op in ops) * 1.01)
    if labels:
        for op in ops:
            ax.text(
                (op.start + op.end) / 2,
                op.stage,
                str(op.microbatch + 1),
                ha="center",
                va="center",
                fontsize=6,
                color="white",
                clip_on=True,
            )


def _short_label(evaluation: Mapping[str, Any]) -> str:
    from tinker_opt.strategy import Strategy

    return Strategy.from_dict(evaluation["strategy"]).replace(num_layer_list=None).label()


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
    fig, ax = plt.subplots(figsize=(9, 6))
    ax.scatter(
        [e["peak_memory_mb"] for e in evaluated],
        [e["iteration_time_ms"] for e in evaluated],
        color="tab:blue",
        alpha=0.35,
        s=18,
        label=f"evaluated ({len(evaluated)})",
    )
    front = sorted(pareto, key=lambda e: e["peak_memory_mb"])
    ax.step(
        [e["peak_memory_mb"] for e in front],
        [e["iteration_time_ms"] for e in front],
        where="post",
        color="tab:green",
        linewidth=1.5,
        marker="o",
        markersize=5,
        label="Pareto front",
    )
    for rank, evaluation in enumerate(ranked, start=1):
        ax.annotate(
            str(rank),
            (evaluation["peak_memory_mb"], evaluation["iteration_time_ms"]),
            textcoords="offset points",
            xytext=(-4, -11),
            fontsize=7,
            color="tab:blue",
        )
    _mark_picks(ax, picks)
    if current is not None:
        _mark_current(ax, current)
    ax.axvline(
        memory_limit_mb, color="red", linestyle="--", label=f"memory limit {memory_limit_mb:g} MB"
    )
    ax.set_xlabel("peak memory per device (MB)")
    ax.set_ylabel("iteration time (ms)")
    ax.set_title("evaluated strategies: time vs memory")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _mark_picks(ax, picks: Mapping[str, Mapping[str, Any]]) -> None:
    """A gold star per distinct pick (picks that are the same strategy share one), named."""
    points: dict[tuple[float, float], list[str]] = {}
    for name, evaluation in picks.items():
        point = (evaluation["peak_memory_mb"], evaluation["iteration_time_ms"])
        points.setdefault(point, []).append(name)
    for (memory, time), names in points.items():
        ax.scatter([memory], [time], s=150, marker="*", color="gold", edgecolor="black", zorder=3)
        ax.annotate(
            ", ".join(names),
            (memory, time),
            textcoords="offset points",
            xytext=(8, 6),
            fontsize=8,
            zorder=4,
        )
    if points:
        ax.scatter(
            [], [], s=150, marker="*", color="gold", edgecolor="black", label="picks (named)"
        )


def _mark_current(ax, current: Mapping[str, Any]) -> None:
    """The script's own strategy: a red cross."""
    ax.scatter(
        [current["peak_memory_mb"]],
        [current["iteration_time_ms"]],
        s=140,
        marker="X",
        color="tab:red",
        edgecolor="black",
        zorder=3,
        label="current (the script's own)",
    )
