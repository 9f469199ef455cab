"""The results folder of a search: results.csv, summary.json, search.log, configs/*.sh, pictures.

Everything is written into a hidden temporary folder beside the target and renamed into place at
the end, so an interrupted run leaves no half-written results folder. Layout (README, "Output folders"):
`results/<model>-<size>-gbs<G>-<mem>-<N>nodes<M>npus-<YYYY-MM-DD-HH-MM-SS>/`.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from datetime import datetime
from io import StringIO
from pathlib import Path
from typing import Any

from tinker_opt.choices import Recompute
from tinker_opt.columns import is_missing
from tinker_opt.emit.picture_worker import PictureJob, PictureWorker, draw_here
from tinker_opt.emit.search_report import RunLabels, SearchReport
from tinker_opt.errors import ConfigError
from tinker_opt.solve.picks import current_note, speedup
from tinker_opt.strategy import STRATEGY_KEYS, Strategy

RESULTS_CSV = "results.csv"
SUMMARY_JSON = "summary.json"
SEARCH_LOG = "search.log"
CONFIGS_DIR = "configs"
STAGES_SVG = "best_stages.svg"
CANDIDATES_SVG = "candidates_time_vs_memory.svg"
SCHEDULE_SVG = "best_schedule.svg"
REPORT_HTML = "report.html"
PICTURES = (
    (STAGES_SVG, "per stage: where the time goes and what the memory holds (best vs current)"),
    (SCHEDULE_SVG, "pipeline schedule of the best strategy"),
    (CANDIDATES_SVG, "every evaluated strategy: time vs memory"),
)


def results_folder_name(labels: RunLabels, when: datetime) -> str:
    mem = f"{labels.memory_limit_mb:g}"
    return (
        f"{labels.model_name}-{labels.model_size}-gbs{labels.global_batch_size}-{mem}-"
        f"{labels.num_nodes}nodes{labels.devices_per_node}npus-{when:%Y-%m-%d-%H-%M-%S}"
    )


def config_script_name(labels: RunLabels, rank: int | str, evaluation: dict[str, Any]) -> str:
    """Tinker's tuned-script name, extended with dp, cp, ep and vpp; a string `rank` names a pick."""
    s = Strategy.from_dict(evaluation["strategy"])
    layers = "_".join(str(stage["layers"]) for stage in evaluation["stages"])
    rc = {Recompute.NONE: "none", Recompute.SELECTIVE: "sel"}.get(
        s.recompute, f"full{s.recompute_num_layers or ''}"
    )
    tag = f"rank{rank}" if isinstance(rank, int) else f"pick_{rank}"
    return (
        f"{labels.model_name}-{labels.model_size}-{tag}_seq{labels.seq_length}_tp{s.tp}_pp{s.pp}"
        f"_dp{s.dp}_cp{s.cp}_ep{s.ep}_vpp{s.vpp}_sp{int(s.sp)}_distopt{int(s.dist_opt)}_mbs{s.mbs}"
        f"_gbs{labels.global_batch_size}_L{layers}_rc{rc}"
        f"_time{evaluation['iteration_time_ms']:.0f}_mem{evaluation['peak_memory_mb']:.0f}.sh"
    )


def script_header(rank: int | str, evaluation: dict[str, Any], report: SearchReport) -> list[str]:
    """The comment block recorded at the top of a tuned script (a string `rank` names a pick)."""
    strategy = json.dumps(evaluation["strategy"], separators=(", ", ": "))
    what = (
        f"rank {rank} of {len(report.top)}"
        if isinstance(rank, int)
        else f"pick '{rank}': {report.pick_titles.get(rank, rank)}"
    )
    return [
        f"tuned strategy {what} "
        f"({report.solver}, {report.status}, solved in {report.solve_time_s:.2f} s)",
        f"strategy: {strategy}",
        f"modelled iteration time {evaluation['iteration_time_ms']:.1f} ms, peak memory "
        f"{evaluation['peak_memory_mb']:.0f} MB per device (limit {report.labels.memory_limit_mb:g} MB), "
        f"{evaluation['tokens_per_s_per_device']:.0f} tokens/s per device",
        f"cluster: {report.labels.num_nodes} nodes x {report.labels.devices_per_node} devices, "
        f"global batch {report.labels.global_batch_size}",
    ]


INTEGER_COLUMNS = ("recompute_num_layers", "etp")
"""Columns of integers that may be empty (pandas' nullable Int64 before: never written as 4.0)."""


def results_rows(report: SearchReport, script_names: Sequence[str | None]) -> list[dict[str, Any]]:
    """One row per ranked strategy; units in the headers."""
    rows = []
    for rank, (evaluation, name) in enumerate(zip(report.top, script_names, strict=True), start=1):
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
    return rows


def results_csv(rows: list[dict[str, Any]]) -> str:
    """results.csv's text: each column written as a data frame writes it (pandas' `to_csv`, which
    wrote it before: issue 30 keeps pandas off the search), so the file is byte for byte the same:
    a column of numbers with a float or an empty cell in it has every number as a float (`4.0`)
    except INTEGER_COLUMNS; empty cells for None."""
    if not rows:
        return "\n"
    names = list(rows[0])
    cells = {name: _column_cells(name, [row.get(name) for row in rows]) for name in names}
    buffer = StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(names)
    writer.writerows(zip(*(cells[name] for name in names), strict=True))
    return buffer.getvalue()


def _column_cells(name: str, values: list[Any]) -> list[str]:
    present = [v for v in values if not is_missing(v)]
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present)
    if name in INTEGER_COLUMNS and numbers:
        return ["" if is_missing(v) else str(int(v)) for v in values]
    if (
        numbers
        and present
        and (len(present) < len(values) or any(isinstance(v, float) for v in present))
    ):
        return ["" if is_missing(v) else repr(float(v)) for v in values]
    return ["" if is_missing(v) else str(v) for v in values]


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
        "message": report.message,
        "best": report.top[0] if report.top else None,
        "top": report.top,
        "folded": report.folded,
        "current": report.current,
        "speedup_vs_current": speedup(report.top[0] if report.top else None, report.current),
        "picks": report.picks,
        "picks_missing": report.picks_missing,
        "pareto": report.pareto,
        "precisions": report.precisions,
    }


def check_writable(output_dir: Path) -> None:
    """Fail early, with a one-line error, when the output folder cannot be created or written."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output_dir, prefix=".probe-", delete=True):
            pass
    except OSError as exc:
        raise ConfigError(
            f"output folder '{output_dir}' cannot be written ({exc.strerror}); pass a writable --output-dir"
        ) from None


ScriptWriter = Callable[[int | str, dict[str, Any], list[str], str], "str | dict[str, str] | None"]
"""(rank or pick name, evaluation, header lines, script file name) -> tuned script text, or
{file name: text} when the script comes with other files (an FSDP2 launch's tuned YAML), or None
when there is no script."""


def write_results_folder(
    report: SearchReport,
    output_dir: Path,
    *,
    write_script: ScriptWriter | None,
    when: datetime | None = None,
    pictures: PictureWorker | None = None,
) -> Path:
    """Write the whole folder atomically (temporary folder + rename) and return its path; the
    pictures by the `pictures` worker when there is one (emit/picture_worker.py), which is done
    with them before the rename."""
    check_writable(output_dir)
    target = output_dir / results_folder_name(report.labels, when or datetime.now())
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=output_dir))
    try:
        _fill_folder(staging, report, write_script, pictures)
        os.replace(staging, target)
    except BaseException:
        if pictures is not None and pictures.pending:
            pictures.stop()  # not drawing into the folder being removed
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _write_scripts(
    folder: Path,
    report: SearchReport,
    write_script: ScriptWriter | None,
    items: Sequence[tuple[int | str, dict[str, Any]]],
) -> list[str | None]:
    """configs/<name>.sh of each (rank or pick name, evaluation); the names (None: no script)."""
    names: list[str | None] = []
    for rank, evaluation in items:
        name = config_script_name(report.labels, rank, evaluation)
        text = (
            write_script(rank, evaluation, script_header(rank, evaluation, report), name)
            if write_script
            else None
        )
        files = {name: text} if isinstance(text, str) else (text or {})
        for file_name, content in files.items():
            (folder / CONFIGS_DIR / file_name).write_text(content, encoding="utf-8")
        names.append(name if files else None)
    return names


def _current_for_pictures(report: SearchReport) -> dict[str, Any] | None:
    """The script's own Evaluation when it has one (also when it does not fit), else None."""
    current = report.current
    return None if current is None or "error" in current else current


def picture_jobs(folder: Path, report: SearchReport) -> list[PictureJob]:
    """The folder's pictures (emit/plots.py), as the jobs that draw them; none without a result."""
    if not report.top:
        return []
    best, limit = report.top[0], report.labels.memory_limit_mb
    gbs = report.labels.global_batch_size
    current = _current_for_pictures(report)
    note = current_note(report.current) if report.current else "no launch script known"
    evaluated = report.evaluated or report.top
    return [
        ("plot_stage_breakdown", (best, current, gbs, limit, folder / STAGES_SVG), {"current_note": note}),
        ("plot_schedule", (best, gbs, folder / SCHEDULE_SVG), {}),
        (
            "plot_candidates",
            (evaluated, report.pareto, report.picks, limit, folder / CANDIDATES_SVG),
            {"current": current, "ranked": report.top},
        ),
    ]  # fmt: skip


def _fill_folder(
    folder: Path,
    report: SearchReport,
    write_script: ScriptWriter | None,
    pictures: PictureWorker | None,
) -> None:
    from tinker_opt.emit.report import render_report

    jobs = picture_jobs(folder, report)
    if pictures is not None and jobs:
        pictures.submit(jobs)  # drawn while the texts below are written
    (folder / CONFIGS_DIR).mkdir()
    names = _write_scripts(folder, report, write_script, list(enumerate(report.top, start=1)))
    pick_names = dict(
        zip(
            report.picks,
            _write_scripts(folder, report, write_script, list(report.picks.items())),
            strict=True,
        )
    )
    (folder / RESULTS_CSV).write_text(results_csv(results_rows(report, names)), encoding="utf-8")
    summary = summary_dict(report)
    (folder / SUMMARY_JSON).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (folder / SEARCH_LOG).write_text("\n".join(report.log_lines) + "\n", encoding="utf-8")
    if pictures is not None and jobs:
        pictures.wait()
    else:
        draw_here(jobs)
    html = render_report(  # after the pictures: the page inlines them
        report,
        folder,
        scripts=names,
        pick_scripts=pick_names,
        pictures=PICTURES,
        speedup=summary["speedup_vs_current"],
    )
    (folder / REPORT_HTML).write_text(html, encoding="utf-8")
