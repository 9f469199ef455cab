"""The results folder of a search: results.csv, summary.json, search.log, configs/*.sh, pictures.

Everything is written into a hidden temporary folder beside the target and renamed into place at
the end, so an interrupted run leaves no half-written results folder. Layout (README, "Output folders"):
`results/<model>-<size>-gbs<G>-<mem>-<N>nodes<M>npus-<YYYY-MM-DD-HH-MM-SS>/`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from io import StringIO
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from tinker_opt.errors import ConfigError
from tinker_opt.strategy import STRATEGY_KEYS, Strategy

RESULTS_CSV = "results.csv"
SUMMARY_JSON = "summary.json"
SEARCH_LOG = "search.log"
CONFIGS_DIR = "configs"
STAGES_PNG = "best_stages.png"
CANDIDATES_PNG = "candidates_time_vs_memory.png"


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
    warnings: list[str] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)


def results_folder_name(labels: RunLabels, when: datetime) -> str:
    mem = f"{labels.memory_limit_mb:g}"
    return (f"{labels.model_name}-{labels.model_size}-gbs{labels.global_batch_size}-{mem}-"
            f"{labels.num_nodes}nodes{labels.devices_per_node}npus-{when:%Y-%m-%d-%H-%M-%S}")


def config_script_name(labels: RunLabels, rank: int, evaluation: dict[str, Any]) -> str:
    """Tinker's tuned-script name, extended with dp, cp, ep and vpp."""
    s = Strategy.from_dict(evaluation["strategy"])
    layers = "_".join(str(stage["layers"]) for stage in evaluation["stages"])
    rc = {"none": "none", "selective": "sel"}.get(s.recompute, f"full{s.recompute_num_layers or ''}")
    return (f"{labels.model_name}-{labels.model_size}-rank{rank}_seq{labels.seq_length}_tp{s.tp}_pp{s.pp}"
            f"_dp{s.dp}_cp{s.cp}_ep{s.ep}_vpp{s.vpp}_sp{int(s.sp)}_distopt{int(s.dist_opt)}_mbs{s.mbs}"
            f"_gbs{labels.global_batch_size}_L{layers}_rc{rc}"
            f"_time{evaluation['iteration_time_ms']:.0f}_mem{evaluation['peak_memory_mb']:.0f}.sh")


def script_header(rank: int, evaluation: dict[str, Any], report: SearchReport) -> list[str]:
    """The comment block recorded at the top of a tuned script."""
    strategy = json.dumps(evaluation["strategy"], separators=(", ", ": "))
    return [
        f"tuned strategy rank {rank} of {len(report.top)} "
        f"({report.solver}, {report.status}, solved in {report.solve_time_s:.2f} s)",
        f"strategy: {strategy}",
        f"modelled iteration time {evaluation['iteration_time_ms']:.1f} ms, peak memory "
        f"{evaluation['peak_memory_mb']:.0f} MB per device (limit {report.labels.memory_limit_mb:g} MB), "
        f"{evaluation['tokens_per_s_per_device']:.0f} tokens/s per device",
        f"cluster: {report.labels.num_nodes} nodes x {report.labels.devices_per_node} devices, "
        f"global batch {report.labels.global_batch_size}",
    ]


def results_frame(report: SearchReport, script_names: Sequence[str | None]) -> pd.DataFrame:
    """One row per ranked strategy; units in the headers."""
    rows = []
    for rank, (evaluation, name) in enumerate(zip(report.top, script_names), start=1):
        row: dict[str, Any] = {"rank": rank}
        for key in STRATEGY_KEYS:
            value = evaluation["strategy"][key]
            row[key] = "-".join(str(n) for n in value) if isinstance(value, list) else value
        row["stage_layers"] = "-".join(str(st["layers"]) for st in evaluation["stages"])
        row["iteration_time_ms"] = round(evaluation["iteration_time_ms"], 3)
        row["peak_memory_mb"] = round(evaluation["peak_memory_mb"], 1)
        row["tokens_per_s_per_device"] = round(evaluation["tokens_per_s_per_device"], 1)
        row["fits"] = evaluation.get("fits", True)
        row["estimated"] = evaluation.get("estimated", False)
        row["script"] = name or ""
        rows.append(row)
    frame = pd.DataFrame(rows)
    for column in ("recompute_num_layers", "etp"):
        if column in frame:
            frame[column] = frame[column].astype("Int64")
    return frame


def summary_dict(report: SearchReport) -> dict[str, Any]:
    return {
        "inputs": report.inputs,
        "solver": report.solver,
        "status": report.status,
        "gap": report.gap,
        "solve_time_s": report.solve_time_s,
        "objective_ms": report.objective_ms,
        "bound_ms": report.bound_ms,
        "warnings": report.warnings,
        "best": report.top[0] if report.top else None,
        "top": report.top,
    }


def check_writable(output_dir: Path) -> None:
    """Fail early, with a one-line error, when the output folder cannot be created or written."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=output_dir, prefix=".probe-", delete=True)
        probe.close()
    except OSError as exc:
        raise ConfigError(f"output folder '{output_dir}' cannot be written ({exc.strerror}); pass a writable --output-dir") from None


ScriptWriter = Callable[[int, dict[str, Any], list[str], str], "str | dict[str, str] | None"]
"""(rank, evaluation, header lines, script file name) -> tuned script text, or {file name: text}
when the script comes with other files (an FSDP2 launch's tuned YAML), or None without a script."""


def write_results_folder(report: SearchReport, output_dir: Path, *, write_script: ScriptWriter | None,
                         when: datetime | None = None) -> Path:
    """Write the whole folder atomically (temporary folder + rename) and return its path."""
    check_writable(output_dir)
    target = output_dir / results_folder_name(report.labels, when or datetime.now())
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=output_dir))
    try:
        _fill_folder(staging, report, write_script)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _fill_folder(folder: Path, report: SearchReport, write_script: ScriptWriter | None) -> None:
    from tinker_opt.emit.plots import plot_best_stages, plot_candidates

    (folder / CONFIGS_DIR).mkdir()
    names: list[str | None] = []
    for rank, evaluation in enumerate(report.top, start=1):
        name = config_script_name(report.labels, rank, evaluation)
        text = write_script(rank, evaluation, script_header(rank, evaluation, report), name) if write_script else None
        files = {name: text} if isinstance(text, str) else (text or {})
        for file_name, content in files.items():
            (folder / CONFIGS_DIR / file_name).write_text(content, encoding="utf-8")
        names.append(name if files else None)
    buffer = StringIO()
    results_frame(report, names).to_csv(buffer, index=False, lineterminator="\n")
    (folder / RESULTS_CSV).write_text(buffer.getvalue(), encoding="utf-8")
    (folder / SUMMARY_JSON).write_text(json.dumps(summary_dict(report), indent=2) + "\n", encoding="utf-8")
    (folder / SEARCH_LOG).write_text("\n".join(report.log_lines) + "\n", encoding="utf-8")
    if report.top:
        plot_best_stages(report.top[0], report.labels.memory_limit_mb, folder / STAGES_PNG)
        plot_candidates(report.top, report.labels.memory_limit_mb, folder / CANDIDATES_PNG)
