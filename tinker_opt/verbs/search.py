"""`search` and `all`: load a profile, solve, and write the results folder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from tinker_opt.config import ProfileSettings, SearchSettings, require
from tinker_opt.errors import InfeasibleError
from tinker_opt.specs import ClusterSpec
from tinker_opt.verbs.common import (
    Progress,
    cost_model_for,
    devices_per_node_for,
    hardware_for,
    labels_for,
    memory_limit_for,
    model_of,
    read_optional_script,
    script_warnings,
)


@dataclass(frozen=True)
class SearchOutcome:
    """What the CLI prints after a search."""

    folder: Path
    top: list[dict[str, Any]]
    status: str
    solver: str
    solve_time_s: float
    gap: float | None
    warnings: list[str] = field(default_factory=list)
    current: dict[str, Any] | None = None
    folded: int = 0
    picks: dict[str, dict[str, Any]] = field(default_factory=dict)
    pick_titles: dict[str, str] = field(default_factory=dict)


class RunLog:
    """Lines for search.log, echoed to the terminal unless quiet."""

    def __init__(self, echo: Callable[[str], None] | None = None) -> None:
        self.lines: list[str] = []
        self._echo = echo

    def __call__(self, message: str) -> None:
        self.lines.append(f"{datetime.now():%H:%M:%S} {message}")
        if self._echo:
            self._echo(message)


SEARCH_SCRIPT = "(positionally or with --pretrain-script-path-search)"


def run_search(settings: SearchSettings, *, log: RunLog) -> SearchOutcome:
    """Load a profile, solve, and write the results folder (its pictures drawn by a worker that
    imports matplotlib while the search runs: emit/picture_worker.py)."""
    from tinker_opt.emit.picture_worker import picture_worker

    with picture_worker() as pictures:
        return _run_search(settings, log, pictures)


def _run_search(settings: SearchSettings, log: RunLog, pictures) -> SearchOutcome:
    from tinker_opt.emit.search_folder import write_infeasible_folder, write_search_folder

    if settings.log:
        from tinker_opt.verbs.replan import calibrated_settings

        settings = calibrated_settings(settings, log)
    run, profiled, cost_model, warnings = _search_run(settings, log)
    searched = _precisions(run, profiled, cost_model, log)
    try:
        best = _solve_precisions(searched, run, log)
    except InfeasibleError as exc:
        # Nothing fits: the results folder still records the inputs, the status and the message.
        log(f"{settings.solver}: infeasible: {exc}")
        folder = write_infeasible_folder(run, str(exc), warnings, log.lines)
        raise InfeasibleError(f"{exc} (summary in {folder})") from None
    result = best.result
    chosen = _choices(best, run, cost_model, log)
    folder, warnings = write_search_folder(
        run, result, chosen, warnings, log, log.lines, precisions=best.ranked, pictures=pictures
    )
    return SearchOutcome(
        folder=folder,
        top=chosen.top,
        status=result.status,
        solver=result.solver,
        solve_time_s=result.solve_time_s,
        gap=result.gap,
        warnings=warnings,
        current=chosen.current,
        folded=chosen.folded,
        picks=chosen.picks,
        pick_titles=chosen.pick_titles,
    )


def _search_run(settings: SearchSettings, log: RunLog):
    """(SearchRun, profile, CostModel, warnings): the profile and the script read, the batch and
    nodes taken from the script where not given, the cost model built, the warnings logged."""
    from tinker_opt.emit.results import check_writable
    from tinker_opt.emit.search_folder import SearchRun
    from tinker_opt.profile.store import load_profiled_data

    require(settings, "profiled_data_path")
    profiled = load_profiled_data(settings.profiled_data_path)
    for note in profiled.meta.notes or []:
        log(note)
    script_path = settings.pretrain_script_path_search or profiled.meta.script_path
    info = read_optional_script(script_path, SEARCH_SCRIPT, settings.model_config)
    per_node = devices_per_node_for(
        settings.num_npus_per_node, info, hardware_for(settings, profiled)
    )
    settings = replace(settings, num_npus_per_node=per_node.devices_per_node)
    if info is not None:
        settings = replace(
            settings,
            global_batch_size=settings.global_batch_size or info.train.global_batch_size,
            num_nodes=settings.num_nodes or info.train.nnodes,
        )
    require(settings, "global_batch_size", "num_nodes")
    check_writable(Path(settings.output_dir))
    limit, limit_note = memory_limit_for(settings, profiled)
    settings = replace(settings, memory_limit=limit)
    if limit_note:
        log(limit_note)
    cluster = ClusterSpec(
        num_nodes=settings.num_nodes,
        devices_per_node=settings.num_npus_per_node,
        memory_limit_mb=settings.memory_limit,
    )
    model = model_of(profiled, info, SEARCH_SCRIPT)
    cost_model = cost_model_for(
        profiled, model, cluster, settings.global_batch_size, settings, info
    )
    warnings = list(per_node.notes) + list(cost_model.warnings) + script_warnings(info)
    for warning in warnings:
        log(warning)
    log(
        f"searching {cluster.num_devices} devices ({cluster.num_nodes} nodes x "
        f"{cluster.devices_per_node}), global batch {settings.global_batch_size}, memory limit "
        f"{cluster.memory_limit_mb:g} MB, solver {settings.solver}"
    )
    run = SearchRun(
        settings=settings,
        labels=_run_labels(settings, profiled, script_path, cluster, cost_model),
        profiled_path=str(profiled.path),
        profile_notes=tuple(profiled.meta.notes or ()),
        script_path=script_path,
        info=info,
        cluster=cluster,
        model=cost_model.model,
        version=settings.version or profiled.meta.framework_version,
    )
    return run, profiled, cost_model, warnings


@dataclass(frozen=True)
class Searched:
    """One precision the search ranks: its profile and cost model, once solved its result and
    space, and (on the chosen one) every precision's best as summary.json `precisions` lists it."""

    profiled: Any
    cost_model: Any
    result: Any = None
    space: Any = None
    ranked: list[dict[str, Any]] = field(default_factory=list)


def _precisions(run, profiled, cost_model, log: RunLog) -> list[Searched]:
    """The script's own precision, and with --allow-fp8 FP8 beside it (verbs/precision.py)."""
    from tinker_opt.profile.store import load_profiled_data
    from tinker_opt.verbs.precision import fp8_model, fp8_profile

    searched = [Searched(profiled, cost_model)]
    if not run.settings.allow_fp8:
        return searched
    hardware = hardware_for(run.settings, profiled)
    model = fp8_model(cost_model.model, hardware, run.info)
    if model is None:
        log("--allow-fp8: the script trains in FP8 already; its precision is searched alone")
        return searched
    fp8 = load_profiled_data(fp8_profile(profiled, hardware, model, run.settings.output_dir, log))
    s = run.settings
    fp8_cost = cost_model_for(fp8, model, run.cluster, s.global_batch_size, s, run.info)
    return [*searched, Searched(fp8, fp8_cost)]


def _solve_precisions(searched: list[Searched], run, log: RunLog) -> Searched:
    """Each precision searched; the one whose best is fastest, with every precision's best (or
    why none fits). InfeasibleError (the first one's) when nothing fits in any precision."""
    from tinker_opt.verbs.precision import precision_label

    solved: list[Searched] = []
    ranked: list[dict[str, Any]] = []
    errors: list[InfeasibleError] = []
    for one in searched:
        label = precision_label(one.cost_model.model)
        try:
            result, space = _solve(one.cost_model, run.settings, run.info, run.version, log)
        except InfeasibleError as exc:
            errors.append(exc)
            ranked.append({"precision": label, "best_ms": None, "message": str(exc)})
            continue
        solved.append(replace(one, result=result, space=space))
        ranked.append({"precision": label, "best_ms": result.objective_ms, "status": result.status})
    if not solved:
        raise errors[0]
    best = min(solved, key=lambda one: one.result.objective_ms)
    if len(searched) > 1:
        chosen = precision_label(best.cost_model.model)
        for row in ranked:
            row["chosen"] = row["precision"] == chosen
            found = "none fits" if row["best_ms"] is None else f"{row['best_ms']:.3f} ms"
            log(f"precision {row['precision']}: best {found}")
        log(f"--allow-fp8: {chosen} is the faster precision; the ranking is in it")
    return replace(best, ranked=ranked if len(searched) > 1 else [])


def _run_labels(
    settings: SearchSettings, profiled, script_path: str | None, cluster: ClusterSpec, cost_model
):
    from tinker_opt.emit.search_report import RunLabels

    meta = profiled.meta
    labels = labels_for(meta.script_path or script_path, meta.model_name, meta.model_size)
    return RunLabels(
        labels.model_name,
        labels.model_size,
        settings.global_batch_size,
        cluster.memory_limit_mb,
        cluster.num_nodes,
        cluster.devices_per_node,
        cost_model.model.seq_length,
    )


def _solve(cost_model, settings: SearchSettings, info, version: str | None, log: RunLog):
    from tinker_opt.expressible import search_space_for
    from tinker_opt.script import versions
    from tinker_opt.solve.search import search
    from tinker_opt.solve.space import SearchSpace

    space = SearchSpace(max_mbs=settings.max_mbs)
    if info is not None:
        space = search_space_for(
            info, versions.resolve(version, info.text, info.train.framework.flavour), space
        )
    from tinker_opt.solve.picks import deep_ranking

    result = deep_ranking(
        lambda depth: search(
            cost_model,
            solver=settings.solver,
            time_limit_s=settings.time_limit,
            cpus=settings.cpus,
            top_k=depth,
            space=space,
            progress=log,
        ),
        settings.top_k,
    )
    log(
        f"{result.solver}: {result.status}, objective {result.objective_ms:.3f} ms, bound "
        f"{result.bound_ms:.3f} ms, gap {result.gap:.2%}, {result.solve_time_s:.2f} s"
    )
    return result, space


def _choices(best: Searched, run, script_cost_model, log: RunLog):
    """Near-copies folded, the script's own strategy (priced in the script's precision by
    `script_cost_model`), the picks (from the search's presolve where the ranking cannot answer)
    and the Pareto front (solve/picks.py), of the chosen precision's search `best`."""
    from tinker_opt.solve.picks import choices, current_note

    result, space, cost_model = best.result, best.space, best.cost_model
    settings, info = run.settings, run.info

    def restricted(narrowed, memory_fraction: float) -> dict[str, Any]:
        """The fastest strategy of a narrower space or under a lower limit, evaluated by `cost_model`."""
        found = result.best_within(narrowed, memory_fraction)
        return cost_model.evaluate(found.strategy).to_dict()

    chosen = choices(
        result,
        cost_model,
        info,
        space,
        top_k=settings.top_k,
        headroom_pct=settings.headroom,
        restricted_search=restricted,
        current_cost_model=script_cost_model,
    )
    log(
        f"{chosen.folded} near-copies folded; picks: {', '.join(chosen.picks) or 'none'}; script's own strategy: "
        f"{'not known' if chosen.current is None else current_note(chosen.current) or 'evaluated'}"
    )
    return chosen


def run_all(
    profile: ProfileSettings, search: SearchSettings, *, progress: Progress | None, log: RunLog
) -> tuple[Path, SearchOutcome]:
    """Profile the script, then search that profile with the profiled script; (profile folder, outcome)."""
    from tinker_opt.emit.results import check_writable
    from tinker_opt.verbs.profile import run_profile  # here: `search` alone never profiles

    check_writable(Path(search.output_dir))
    folder = run_profile(profile, progress=progress, log=None)
    search = replace(
        search,
        profiled_data_path=str(folder),
        pretrain_script_path_search=search.pretrain_script_path_search
        or profile.pretrain_script_path,
    )
    return folder, run_search(search, log=log)
