"""The two pictures of a results folder (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)


def plot_best_stages(evaluation: dict[str, Any], memory_limit_mb: float, path: Path) -> Path:
    """Per-stage time and memory of the best strategy, side by side."""
    stages = evaluation["stages"]
    index = [f"s{i}\n{st['layers']}L" for i, st in enumerate(stages)]
    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(10, 4))
    ax_time.bar(index, [st["time_ms"] for st in stages], color="tab:blue")
    ax_time.set_title("time per micro-batch by stage")
    ax_time.set_ylabel("ms")
    ax_mem.bar(index, [st["memory_mb"] for st in stages], color="tab:orange")
    ax_mem.axhline(memory_limit_mb, color="red", linestyle="--", label=f"limit {memory_limit_mb:g} MB")
    ax_mem.set_title("peak memory by stage")
    ax_mem.set_ylabel("MB")
    ax_mem.legend(loc="lower right")
    fig.suptitle(f"best strategy: {evaluation['iteration_time_ms']:.1f} ms per iteration")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_candidates(evaluations: Sequence[dict[str, Any]], memory_limit_mb: float, path: Path) -> Path:
    """Iteration time against peak memory of the ranked candidates; the best one highlighted."""
    fig, ax = plt.subplots(figsize=(7, 5))
    times = [e["iteration_time_ms"] for e in evaluations]
    memories = [e["peak_memory_mb"] for e in evaluations]
    ax.scatter(memories, times, color="tab:blue", label="candidates")
    ax.scatter(memories[:1], times[:1], color="tab:green", s=120, marker="*", label="best")
    for rank, (mem, time) in enumerate(zip(memories, times), start=1):
        ax.annotate(str(rank), (mem, time), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.axvline(memory_limit_mb, color="red", linestyle="--", label=f"limit {memory_limit_mb:g} MB")
    ax.set_xlabel("peak memory per device (MB)")
    ax.set_ylabel("iteration time (ms)")
    ax.set_title("ranked strategies: time vs memory")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
