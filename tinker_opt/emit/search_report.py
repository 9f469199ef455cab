"""What a results folder records about one search, as data: the labels that name it
(RunLabels) and everything its files show (SearchReport). Written by search_folder.py, read by
results.py (summary.json, results.csv, scripts) and report.py (report.html); a module of its own
so that those two import it and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunLabels:
    """What names the results: model labels and the cluster the search planned for."""

    model_name: str
    model_size: str
    global_batch_size: int
    memory_limit_mb: float
    num_nodes: int
    devices_per_node: int
    seq_length: int


@dataclass(frozen=True)
class SearchReport:
    """Everything the results folder records about one search (evaluations as their JSON dicts)."""

    labels: RunLabels
    inputs: dict[str, Any]
    solver: str
    status: str
    gap: float | None
    solve_time_s: float
    objective_ms: float | None
    bound_ms: float | None
    top: list[dict[str, Any]]
    """The ranked strategies, near-copies folded (picks.fold_near_copies)."""
    warnings: list[str] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    current: dict[str, Any] | None = None
    """The script's own strategy: an Evaluation, {"error": ...}, or None when no script is known."""
    picks: dict[str, dict[str, Any]] = field(default_factory=dict)
    pick_titles: dict[str, str] = field(default_factory=dict)
    picks_missing: dict[str, str] = field(default_factory=dict)
    """Pick name -> why there is none."""
    pareto: list[dict[str, Any]] = field(default_factory=list)
    evaluated: list[dict[str, Any]] = field(default_factory=list)
    """Every strategy the search evaluated (the candidates picture)."""
    folded: int = 0
    """Near-copies folded out of the ranking."""
    message: str | None = None
    """Why nothing was found (status `infeasible`): the search's one-line error."""
    precisions: list[dict[str, Any]] = field(default_factory=list)
    """`search --allow-fp8`: each precision searched, its best time and whether it was chosen."""
