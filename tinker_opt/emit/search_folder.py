"""The results folder of one search run: the report (emit/results.py) with the run's inputs, and
the tuned launch script of each ranked row and pick (an FSDP2 launch with its tuned YAML copy).

verbs.run_search decides what to write; this module turns the run into files. A row the writer
refuses (a split the framework cannot say) is reported in search.log and summary.json and left
without a script: a finished search never fails on one row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_opt.config import SearchSettings
from tinker_opt.emit.picture_worker import PictureWorker
from tinker_opt.emit.results import write_results_folder
from tinker_opt.emit.search_report import RunLabels, SearchReport
from tinker_opt.errors import TinkerError
from tinker_opt.script.noop_layers import strategy_to_write
from tinker_opt.specs import ClusterSpec, ModelSpec
from tinker_opt.strategy import Strategy

Log = Callable[[str], None]


@dataclass(frozen=True)
class SearchRun:
    """What one search ran on: recorded in summary.json `inputs` and used to write the scripts."""

    settings: SearchSettings
    labels: RunLabels
    profiled_path: str
    profile_notes: tuple[str, ...]
    script_path: str | None
    info: Any
    """The launch script read (script.reader.ScriptInfo), None when no script is known."""
    cluster: ClusterSpec
    model: ModelSpec
    version: str | None

    def inputs(self) -> dict[str, Any]:
        """summary.json `inputs`."""
        s, cluster = self.settings, self.cluster
        return {
            "profiled_data_path": self.profiled_path,
            "profile_notes": list(self.profile_notes),
            "script_path": str(Path(self.script_path).resolve()) if self.script_path else None,
            "model": self.model.to_dict(),
            "global_batch_size": s.global_batch_size,
            "num_nodes": cluster.num_nodes,
            "num_npus_per_node": cluster.devices_per_node,
            "memory_limit_mb": cluster.memory_limit_mb,
            "solver": s.solver,
            "time_limit_s": s.time_limit,
            "cpus": s.cpus,
            "top_k": s.top_k,
            "headroom_pct": s.headroom,
            "hardware": s.hardware,
            "allow_fp8": s.allow_fp8,
            "inter_node_bandwidth_gbs": s.inter_node_bandwidth,
        }


def write_infeasible_folder(
    run: SearchRun, message: str, warnings: list[str], log_lines: list[str]
) -> Path:
    """The results folder of a search where nothing fits: summary.json status `infeasible`."""
    report = SearchReport(
        labels=run.labels,
        inputs=run.inputs(),
        solver=run.settings.solver,
        status="infeasible",
        gap=None,
        solve_time_s=0.0,
        objective_ms=None,
        bound_ms=None,
        top=[],
        warnings=warnings,
        log_lines=log_lines,
        message=message,
    )
    return write_results_folder(report, Path(run.settings.output_dir), write_script=None)


def write_search_folder(
    run: SearchRun,
    result,
    chosen,
    warnings: list[str],
    log: Log,
    log_lines: list[str],
    precisions: list[dict[str, Any]] | None = None,
    pictures: PictureWorker | None = None,
) -> tuple[Path, list[str]]:
    """The results folder of a finished search (`result` of solve.search, `chosen` of
    solve.picks.choices, `precisions` each precision's best under --allow-fp8, `pictures` the
    worker that draws them, emit/picture_worker.py); returns it and the warnings, the rows the
    writer refused added."""
    warnings = list(warnings)
    report = SearchReport(
        labels=run.labels,
        inputs=run.inputs(),
        solver=result.solver,
        status=result.status,
        gap=result.gap,
        solve_time_s=result.solve_time_s,
        objective_ms=result.objective_ms,
        bound_ms=result.bound_ms,
        top=chosen.top,
        warnings=warnings,
        log_lines=log_lines,
        current=chosen.current,
        picks=chosen.picks,
        pick_titles=chosen.pick_titles,
        picks_missing=chosen.picks_missing,
        pareto=chosen.pareto,
        evaluated=chosen.evaluated,
        folded=chosen.folded,
        precisions=list(precisions or []),
    )
    writer = (
        script_writer(
            run.info, run.cluster, run.version, log, warnings, run.settings.global_batch_size
        )
        if run.info is not None
        else None
    )
    if writer is None:
        log(
            "no launch script known for this profile: configs/ stays empty (pass the script positionally)"
        )
    output_dir = Path(run.settings.output_dir)
    return write_results_folder(
        report, output_dir, write_script=writer, pictures=pictures
    ), warnings


def script_writer(
    info,
    cluster: ClusterSpec,
    version: str | None,
    log: Log,
    warnings: list[str],
    global_batch_size: int,
):
    """The results folder's ScriptWriter (emit/results.py) for this script; refused rows are logged
    and appended to `warnings`. A strategy written twice (a pick that is a ranked row: `fastest`
    is rank 1) is edited and read back once; each copy gets its own header (issue 30: nothing
    computed twice)."""
    from tinker_opt.emit.script_writer import AppliedScript, apply_strategy, with_header

    edited: dict[tuple[Strategy, str], AppliedScript] = {}

    def write(
        rank: int | str, evaluation: dict[str, Any], header: list[str], name: str
    ) -> str | dict[str, str] | None:
        row = f"{'rank' if isinstance(rank, int) else 'pick'} {rank}"
        try:
            strategy = strategy_to_write(evaluation, info)
            if info.fsdp2 is not None:
                return _fsdp2_files(info, strategy, cluster, global_batch_size, header, name)
            precision = evaluation.get("precision")
            key = (strategy, json.dumps(precision, sort_keys=True))
            if key not in edited:
                edited[key] = apply_strategy(
                    info.text,
                    strategy,
                    nnodes=cluster.num_nodes,
                    nproc_per_node=cluster.devices_per_node,
                    version=version,
                    precision=precision,
                )
            applied = edited[key]
        except TinkerError as exc:
            message = f"{row}: no tuned script written: {exc}"
            log(message)
            warnings.append(message)
            return None
        for warning in applied.warnings:
            log(f"{row}: {warning}")
        return with_header(applied.text, header)

    return write


def _fsdp2_files(
    info,
    strategy: Strategy,
    cluster: ClusterSpec,
    global_batch_size: int,
    header: list[str],
    name: str,
) -> dict[str, str]:
    """A tuned FSDP2 launch and its YAML copy, named by file name beside it."""
    from tinker_opt.emit.fsdp2_writer import apply_fsdp2

    yaml_name = Path(name).with_suffix(".yaml").name
    applied = apply_fsdp2(
        info,
        strategy,
        nnodes=cluster.num_nodes,
        nproc_per_node=cluster.devices_per_node,
        yaml_reference=yaml_name,
        global_batch_size=global_batch_size,
        header=header,
    )
    return {name: applied.text, yaml_name: applied.yaml_text}
