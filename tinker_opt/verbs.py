"""The work of every verb (profile, search, simulate, all, inspect, apply, calibrate), in one place.

cli.py parses the command line into settings objects (config.py) and prints what these functions
return; nothing here prints. Heavy imports (torch, solvers) happen inside the functions so that
`search` and `simulate` never import torch and `--help` stays fast. The cost model and solvers
(tinker_opt.costs, tinker_opt.solve) are imported by no other verb code: here at the top (Strategy) and inside
`_cost_model`, `_solve` and `_strategy_from_flags`, so that moving them is a change here alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tinker_opt.config import ProfileSettings, SearchSettings, SimulateSettings, require
from tinker_opt.errors import ConfigError, InfeasibleError, TinkerError
from tinker_opt.strategy import Strategy, check_strategy
from tinker_opt.profile.meta import read_meta, write_meta
from tinker_opt.specs import ClusterSpec

if TYPE_CHECKING:
    from tinker_opt.script.reader import ScriptInfo

Progress = Callable[[int, int, str], None]
Log = Callable[[str], None]


# --- shared pieces ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ScriptLabels:
    """The model name / size that label profile and results folders."""

    model_name: str
    model_size: str


def labels_for(script_path: str | None, model_name: str | None, model_size: str | None) -> ScriptLabels:
    from tinker_opt.script.reader import labels_from_filename

    name, size = labels_from_filename(script_path) if script_path else ("model", "unknown")
    return ScriptLabels(model_name or name, model_size or size)


def num_nodes_for(strategy: Strategy, devices_per_node: int) -> int:
    """The nodes a strategy fills: its world size over the devices per node (at least one)."""
    return max(1, strategy.world_size // devices_per_node)


def read_json_object(path: Path) -> dict[str, Any]:
    """A strategy file: a bare strategy, an Evaluation or a summary.json."""
    if not Path(path).is_file():
        raise ConfigError(f"strategy file '{path}' does not exist; pass a JSON strategy or a summary.json")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"strategy file '{path}' is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"strategy file '{path}' must hold a JSON object (a strategy or a summary.json)")
    return data


def _read_optional_script(path: str | None, how_to_pass: str, model_config: str | None = None):
    from tinker_opt.script.reader import read_script

    if not path:
        return None
    if not Path(path).exists():
        raise ConfigError(f"script '{path}' does not exist; pass an existing launch script {how_to_pass}")
    return read_script(path, model_config=model_config)


def _model_of(profiled, info, how_to_pass: str):
    """The profile's ModelSpec; a Tinker folder holds none, so the script's is used."""
    if profiled.meta.model is not None:
        return profiled.model
    if info is not None:
        return info.model
    if profiled.meta.source == "tinker":
        raise ConfigError(f"profile '{profiled.path}' is a Tinker folder, which records no model shape; "
                          f"pass the launch script {how_to_pass}")
    raise ConfigError(f"profile '{profiled.path}' records no model shape and no launch script; "
                      f"pass the launch script {how_to_pass} or re-run `tinker-opt profile`")


def _cost_model(profiled, model, cluster: ClusterSpec, global_batch_size: int, settings, info):
    """The CostModel for a profile, a cluster and the communication overrides of `settings`; the
    script's job flags come from `info` when known (the swap chunk count else from meta.json)."""
    from tinker_opt.hardware import load_hardware
    from tinker_opt.costs.evaluate import CostModel

    hardware = load_hardware(settings.hardware) if settings.hardware else None
    options = job_cost_options(info) if info is not None else {
        "swap_optimizer_times": profiled.meta.swap_optimizer_times}
    return CostModel.from_profile(profiled, model, cluster, global_batch_size, hardware=hardware,
                                  inter_node_bandwidth_gbs=settings.inter_node_bandwidth, **options)


def job_cost_options(info: ScriptInfo) -> dict:
    """The CostModel options a script's job flags set (swap optimizer, activation-function
    recompute, interleaved p2p overlap, reuse-fp32-param; an FSDP2 launch recomputes all
    layers or none)."""
    train = info.train
    # MindSpeed's activation-function recompute, priced for every kept layer; a layer count
    # (first N layers of each chunk) is not modelled and stays out (flags.py warns).
    act = train.recompute_activation_function and train.recompute_activation_function_num_layers is None
    return {"swap_optimizer_times": train.swap_optimizer_times, "recompute_activation": bool(act),
            "overlap_p2p_comm": train.overlap_p2p_comm, "reuse_fp32_param": train.reuse_fp32_param,
            "recompute_all": info.fsdp2 is not None}


# --- profile ------------------------------------------------------------------------------------

def profile_folder(settings: ProfileSettings, labels: ScriptLabels) -> Path:
    """The folder a profile writes to: --prof-path, or a new timestamped one under save_path."""
    if settings.prof_path:
        return Path(settings.prof_path)
    from tinker_opt.profile.runner import default_profile_dir

    folder = default_profile_dir(labels.model_name, labels.model_size, root=Path(settings.save_path))
    return folder.with_name(f"{folder.name}-{settings.task_id}") if settings.task_id else folder


def run_profile(settings: ProfileSettings, *, progress: Progress | None = None, log: Log | None = None) -> Path:
    """Read the script, profile its blocks on the chosen device (or analytically) and return the folder."""
    from tinker_opt.profile.kernels import script_flags
    from tinker_opt.profile.runner import MeasureSettings, run_profile as measure
    from tinker_opt.script.reader import read_script

    require(settings, "pretrain_script_path")
    info = read_script(settings.pretrain_script_path, model_config=settings.model_config)
    labels = labels_for(settings.pretrain_script_path, settings.model_name, settings.model_size)
    out_dir = profile_folder(settings, labels)
    analytic = settings.device == "analytic"
    measure_settings = MeasureSettings.from_settings(replace(settings, device="cpu") if analytic else settings,
                                                     kernel_flags=script_flags(info.launch))
    if analytic:
        from tinker_opt.hardware import load_hardware
        from tinker_opt.profile.analytic import analytic_profile

        require(settings, "hardware")
        analytic_profile(info.model, load_hardware(settings.hardware), out_dir,
                         limits=measure_settings.limits(info.train), progress=progress, log=log)
    else:
        measure(info.model, measure_settings, out_dir, train=info.train, progress=progress, log=log)
    is_full_tune = settings.is_full_tune if settings.is_full_tune is not None else info.train.is_full_tune
    write_meta(out_dir, read_meta(out_dir).with_origin(
        script_path=str(Path(settings.pretrain_script_path).resolve()), model_name=labels.model_name,
        model_size=labels.model_size, framework_version=settings.version, is_full_tune=is_full_tune,
        swap_optimizer_times=info.train.swap_optimizer_times))
    return out_dir


# --- search -------------------------------------------------------------------------------------

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
SIMULATE_SCRIPT = "(positionally or with --pretrain-script-path)"


def run_search(settings: SearchSettings, *, log: RunLog) -> SearchOutcome:
    """Load a profile, solve, and write the results folder."""
    from tinker_opt.emit.results import check_writable
    from tinker_opt.profile.store import load_profiled_data

    require(settings, "profiled_data_path")
    profiled = load_profiled_data(settings.profiled_data_path)
    for note in profiled.meta.notes or []:
        log(note)
    script_path = settings.pretrain_script_path_search or profiled.meta.script_path
    info = _read_optional_script(script_path, SEARCH_SCRIPT, settings.model_config)
    if info is not None:
        settings = replace(settings, global_batch_size=settings.global_batch_size or info.train.global_batch_size,
                           num_nodes=settings.num_nodes or info.train.nnodes)
    require(settings, "global_batch_size", "num_nodes")
    check_writable(Path(settings.output_dir))
    cluster = ClusterSpec(num_nodes=settings.num_nodes, devices_per_node=settings.num_npus_per_node,
                          memory_limit_mb=settings.memory_limit)
    cost_model = _cost_model(profiled, _model_of(profiled, info, SEARCH_SCRIPT), cluster,
                             settings.global_batch_size, settings, info)
    warnings = list(cost_model.warnings) + _script_warnings(info)
    for warning in warnings:
        log(warning)
    log(f"searching {cluster.num_devices} devices ({cluster.num_nodes} nodes x {cluster.devices_per_node}), "
        f"global batch {settings.global_batch_size}, memory limit {cluster.memory_limit_mb:g} MB, "
        f"solver {settings.solver}")
    version = settings.version or profiled.meta.framework_version
    try:
        result, space = _solve(cost_model, settings, info, version, log)
    except InfeasibleError as exc:
        # Nothing fits: the results folder still records the inputs, the status and the message.
        log(f"{settings.solver}: infeasible: {exc}")
        folder = _write_infeasible(str(exc), settings, profiled, script_path, cluster, cost_model, warnings, log)
        raise InfeasibleError(f"{exc} (summary in {folder})") from None
    chosen = _choices(result, space, settings, profiled, info, cluster, cost_model, log)
    return _write_search_results(result, chosen, settings, profiled, script_path, info, cluster, cost_model, version,
                                 warnings, log)


def _write_infeasible(message: str, settings: SearchSettings, profiled, script_path: str | None,
                      cluster: ClusterSpec, cost_model, warnings: list[str], log: RunLog) -> Path:
    """The results folder of a search where nothing fits: summary.json status `infeasible`."""
    from tinker_opt.emit.results import SearchReport, write_results_folder

    report = SearchReport(
        labels=_run_labels(settings, profiled, script_path, cluster, cost_model),
        inputs=_inputs_record(settings, profiled, script_path, cluster, cost_model.model), solver=settings.solver,
        status="infeasible", gap=None, solve_time_s=0.0, objective_ms=None, bound_ms=None, top=[],
        warnings=warnings, log_lines=log.lines, message=message)
    return write_results_folder(report, Path(settings.output_dir), write_script=None)


def _run_labels(settings: SearchSettings, profiled, script_path: str | None, cluster: ClusterSpec, cost_model):
    from tinker_opt.emit.results import RunLabels

    meta = profiled.meta
    labels = labels_for(meta.script_path or script_path, meta.model_name, meta.model_size)
    return RunLabels(labels.model_name, labels.model_size, settings.global_batch_size, cluster.memory_limit_mb,
                     cluster.num_nodes, cluster.devices_per_node, cost_model.model.seq_length)


def _script_warnings(info) -> list[str]:
    """The script's flags the prediction does not include (script/flags.py), for log and summary."""
    from tinker_opt.script.flags import unpriced_warning

    warning = unpriced_warning(info.launch) if info is not None else None
    return [warning] if warning else []


def _solve(cost_model, settings: SearchSettings, info, version: str | None, log: RunLog):
    from tinker_opt.emit.expressible import search_space_for
    from tinker_opt.solve.search import search
    from tinker_opt.solve.space import SearchSpace
    from tinker_opt.script import versions

    space = SearchSpace(max_mbs=settings.max_mbs)
    if info is not None:
        space = search_space_for(info, versions.resolve(version, info.text, info.train.framework.flavour), space)
    from tinker_opt.emit.picks import deep_ranking

    result = deep_ranking(lambda depth: search(cost_model, solver=settings.solver, time_limit_s=settings.time_limit,
                                               cpus=settings.cpus, top_k=depth, space=space, progress=log),
                          settings.top_k)
    log(f"{result.solver}: {result.status}, objective {result.objective_ms:.3f} ms, bound "
        f"{result.bound_ms:.3f} ms, gap {result.gap:.2%}, {result.solve_time_s:.2f} s")
    return result, space


def _choices(result, space, settings: SearchSettings, profiled, info, cluster: ClusterSpec, cost_model, log: RunLog):
    """Near-copies folded, the script's own strategy, the picks (restricted searches where the
    ranking cannot answer) and the Pareto front (emit/picks.py)."""
    from tinker_opt.emit.picks import choices
    from tinker_opt.solve.search import search

    def restricted(narrowed, memory_fraction: float) -> dict[str, Any]:
        """The fastest strategy of a narrower space or under a lower limit, evaluated by `cost_model`."""
        limited = cost_model if memory_fraction == 1 else _cost_model(
            profiled, cost_model.model, replace(cluster, memory_limit_mb=memory_fraction * cluster.memory_limit_mb),
            settings.global_batch_size, settings, info)
        found = search(limited, solver=settings.solver, time_limit_s=settings.time_limit, cpus=settings.cpus,
                       top_k=1, space=narrowed)
        return cost_model.evaluate(found.best.strategy).to_dict()

    chosen = choices(result, cost_model, info, space, top_k=settings.top_k, headroom_pct=settings.headroom,
                     restricted_search=restricted)
    log(f"{chosen.folded} near-copies folded; picks: {', '.join(chosen.picks) or 'none'}; script's own strategy: "
        f"{'not known' if chosen.current is None else chosen.current.get('error', 'evaluated')}")
    return chosen


def _write_search_results(result, chosen, settings: SearchSettings, profiled, script_path: str | None, info,
                          cluster: ClusterSpec, cost_model, version: str | None, warnings: list[str],
                          log: RunLog) -> SearchOutcome:
    from tinker_opt.emit.results import SearchReport, write_results_folder

    top = chosen.top
    warnings = list(warnings)  # the writer adds the rows it could not write
    report = SearchReport(
        labels=_run_labels(settings, profiled, script_path, cluster, cost_model),
        inputs=_inputs_record(settings, profiled, script_path, cluster, cost_model.model), solver=result.solver,
        status=result.status, gap=result.gap, solve_time_s=result.solve_time_s, objective_ms=result.objective_ms,
        bound_ms=result.bound_ms, top=top, warnings=warnings, log_lines=log.lines,
        current=chosen.current, picks=chosen.picks, pick_titles=chosen.pick_titles,
        picks_missing=chosen.picks_missing, pareto=chosen.pareto, evaluated=chosen.evaluated, folded=chosen.folded)
    writer = (_script_writer(info, cluster, version, log, warnings, cost_model.global_batch_size)
              if info is not None else None)
    if writer is None:
        log("no launch script known for this profile: configs/ stays empty (pass the script positionally)")
    folder = write_results_folder(report, Path(settings.output_dir), write_script=writer)
    return SearchOutcome(folder=folder, top=top, status=result.status, solver=result.solver,
                         solve_time_s=result.solve_time_s, gap=result.gap, warnings=warnings,
                         current=chosen.current, folded=chosen.folded, picks=chosen.picks,
                         pick_titles=chosen.pick_titles)


def _inputs_record(settings: SearchSettings, profiled, script_path: str | None, cluster: ClusterSpec,
                   model) -> dict[str, Any]:
    return {
        "profiled_data_path": str(profiled.path),
        "profile_notes": list(profiled.meta.notes or []),
        "script_path": str(Path(script_path).resolve()) if script_path else None,
        "model": model.to_dict(), "global_batch_size": settings.global_batch_size,
        "num_nodes": cluster.num_nodes, "num_npus_per_node": cluster.devices_per_node,
        "memory_limit_mb": cluster.memory_limit_mb, "solver": settings.solver, "time_limit_s": settings.time_limit,
        "cpus": settings.cpus, "top_k": settings.top_k, "headroom_pct": settings.headroom, "hardware": settings.hardware,
        "inter_node_bandwidth_gbs": settings.inter_node_bandwidth,
    }


def _script_writer(info, cluster: ClusterSpec, version: str | None, log: RunLog, warnings: list[str],
                   global_batch_size: int):
    """Writes the tuned script of one ranked row (an FSDP2 launch with its tuned YAML); a row the
    writer refuses is reported (search.log, summary warnings) and left without a script, never
    failing the finished search."""
    from tinker_opt.emit.script_writer import apply_strategy

    def write(rank: int | str, evaluation: dict[str, Any], header: list[str], name: str) -> str | dict[str, str] | None:
        try:
            strategy = strategy_to_write(evaluation, info)
            if info.fsdp2 is not None:
                return _fsdp2_config_files(info, strategy, cluster, global_batch_size, header, name)
            applied = apply_strategy(info.text, strategy, nnodes=cluster.num_nodes,
                                     nproc_per_node=cluster.devices_per_node, version=version, header=header)
        except TinkerError as exc:
            message = f"{'rank' if isinstance(rank, int) else 'pick'} {rank}: no tuned script written: {exc}"
            log(message)
            warnings.append(message)
            return None
        for warning in applied.warnings:
            log(f"{'rank' if isinstance(rank, int) else 'pick'} {rank}: {warning}")
        return applied.text

    return write


def _fsdp2_config_files(info, strategy: Strategy, cluster: ClusterSpec, global_batch_size: int, header: list[str],
                        name: str) -> dict[str, str]:
    """A results folder's tuned FSDP2 launch and its YAML copy, named by file name beside it."""
    from tinker_opt.emit.fsdp2_writer import apply_fsdp2

    yaml_name = Path(name).with_suffix(".yaml").name
    applied = apply_fsdp2(info, strategy, nnodes=cluster.num_nodes, nproc_per_node=cluster.devices_per_node,
                          yaml_reference=yaml_name, global_batch_size=global_batch_size, header=header)
    return {name: applied.text, yaml_name: applied.yaml_text}


# --- all ----------------------------------------------------------------------------------------

def run_all(profile: ProfileSettings, search: SearchSettings, *, progress: Progress | None,
            log: RunLog) -> tuple[Path, SearchOutcome]:
    """Profile the script, then search that profile with the profiled script; (profile folder, outcome)."""
    from tinker_opt.emit.results import check_writable

    check_writable(Path(search.output_dir))
    folder = run_profile(profile, progress=progress, log=None)
    search = replace(search, profiled_data_path=str(folder),
                     pretrain_script_path_search=search.pretrain_script_path_search or profile.pretrain_script_path)
    return folder, run_search(search, log=log)


# --- simulate -----------------------------------------------------------------------------------

def run_simulate(settings: SimulateSettings, strategy_file: Path | None):
    """Evaluate one strategy (from a JSON file or the flags); returns (Evaluation, warnings).

    The model, global batch size and nodes come from the flags, else the launch script (given,
    or the profiled one), else the profile (global batch size) or the strategy (nodes)."""
    from tinker_opt.profile.store import load_profiled_data

    require(settings, "profiled_data_path")
    profiled = load_profiled_data(settings.profiled_data_path)
    profiled_script = profiled.meta.script_path
    if profiled_script and not Path(profiled_script).exists():
        profiled_script = None  # moved since profiling: the profile's own model and batch size still serve
    info = _read_optional_script(settings.pretrain_script_path or profiled_script, SIMULATE_SCRIPT,
                                 settings.model_config)
    model = _model_of(profiled, info, SIMULATE_SCRIPT)
    if settings.num_layers:
        model = replace(model, num_layers=settings.num_layers)
    strategy = Strategy.from_dict(read_json_object(strategy_file)) if strategy_file is not None else None
    script_gbs = info.train.global_batch_size if info is not None else None
    settings = replace(settings, global_batch_size=settings.global_batch_size or script_gbs
                       or profiled.meta.global_batch_size,
                       num_nodes=settings.num_nodes or _default_nodes(strategy, info, settings.num_npus_per_node))
    require(settings, "global_batch_size", "num_nodes")
    cluster = ClusterSpec(num_nodes=settings.num_nodes, devices_per_node=settings.num_npus_per_node,
                          memory_limit_mb=settings.memory_limit)
    if strategy is None:
        strategy = _strategy_from_flags(settings, cluster.num_devices, model.num_layers)
    check_strategy(strategy, model, cluster, settings.global_batch_size)
    cost_model = _cost_model(profiled, model, cluster, settings.global_batch_size, settings, info)
    return cost_model.evaluate(strategy), list(cost_model.warnings) + _layer_form_warning(strategy, info, settings)


def _layer_form_warning(strategy: Strategy, info, settings: SimulateSettings) -> list[str]:
    """simulate evaluates any split (Tinker's own picks included) but says when the script's
    framework could not write it: the rule the search and the writer apply (strategy.LAYER_FORMS)."""
    from tinker_opt.emit.expressible import layer_form
    from tinker_opt.script import versions
    from tinker_opt.strategy import layer_form_message

    if info is None or strategy.num_layer_list is None:
        return []
    vr = versions.resolve(getattr(settings, "version", None), info.text, info.train.framework.flavour)
    message = layer_form_message(tuple(strategy.num_layer_list), layer_form(info, vr))
    name = info.path.name if info.path is not None else "this script"
    return [f"{message}: the search would not choose this split for {name}"] if message else []


def _default_nodes(strategy: Strategy | None, info, devices_per_node: int) -> int | None:
    """simulate's nodes when not given: the strategy file's world size, else the script's."""
    if strategy is not None:
        return num_nodes_for(strategy, devices_per_node)
    return info.train.nnodes if info is not None else None


def _strategy_from_flags(settings: SimulateSettings, num_devices: int, num_layers: int) -> Strategy:
    """simulate's Tinker-style flags as a Strategy (dp is what the devices leave)."""
    from tinker_opt.costs.simulate import strategy_from_flags

    dist_opt = settings.dist_opt if settings.dist_opt is not None else settings.zero
    return strategy_from_flags(
        num_devices=num_devices, num_layers=num_layers, tp=settings.simu_tp, pp=settings.simu_pp,
        ep=settings.simu_ep, etp=settings.simu_etp, sp=settings.simu_sp, dist_opt=dist_opt,
        mbs=settings.micro_batch_size, num_layer_list=settings.num_layer_list, recompute=settings.recompute,
        recompute_num_layers=settings.recompute_num_layers, cp=settings.simu_cp, cp_algo=settings.cp_algo,
        recompute_method=settings.recompute_method,
        vpp=settings.simu_vpp)


# --- inspect, apply, calibrate ------------------------------------------------------------------

def run_inspect(script: Path, *, model_config: Path | None = None) -> tuple[dict[str, Any], list[str]]:
    """What the reader takes from a launch script (inspect --json's object) and its warnings."""
    from tinker_opt.script.reader import inspect_dict, read_script

    info = read_script(script, model_config=model_config)
    return inspect_dict(info), list(info.warnings)


def strategy_to_write(data: dict[str, Any], info) -> Strategy:
    """The strategy of a JSON object (bare strategy, Evaluation or summary.json) in the script's terms.

    An Evaluation's stage counts are computing layers; scripts with noop layers count those too.
    A bare strategy is taken as written (its num_layer_list already counts the script's layers).
    """
    from tinker_opt.emit.noop_layers import strategy_for_script

    evaluation = data["best"] if isinstance(data.get("best"), dict) else data
    strategy = Strategy.from_dict(evaluation)
    if "stages" not in evaluation:
        return strategy
    return strategy_for_script(strategy, [stage["layers"] for stage in evaluation["stages"]],
                               info.model.noop_layers, info.num_layers_in_script)


def run_apply(script: Path, strategy_file: Path, output: Path, *, num_nodes: int | None,
              num_npus_per_node: int | None, version: str | None, force: bool,
              model_config: Path | None = None) -> tuple[list[str], list[Path]]:
    """Write `script` with the strategy of `strategy_file` to `output` (an FSDP2 launch: and its tuned
    YAML copy `output` with suffix .yaml); returns the writer's warnings and the files written."""
    from tinker_opt.emit.script_writer import apply_strategy, write_script
    from tinker_opt.script.reader import read_script

    info = read_script(script, model_config=model_config)
    if output.exists() and not force and output.resolve() != script.resolve():
        raise ConfigError(f"output '{output}' exists; choose another -o path or pass --force")
    strategy = strategy_to_write(read_json_object(strategy_file), info)
    per_node = num_npus_per_node or info.train.nproc_per_node
    nodes = num_nodes or num_nodes_for(strategy, per_node)
    header = [f"tinker-opt apply: strategy {json.dumps(strategy.to_dict())}"]
    if info.fsdp2 is not None:
        return _apply_fsdp2(info, strategy, output, nodes, per_node, header)
    applied = apply_strategy(info.text, strategy, nnodes=nodes, nproc_per_node=per_node, version=version,
                             header=header)
    write_script(output, applied.text, source=script)
    return list(applied.warnings), [output]


def _apply_fsdp2(info, strategy: Strategy, output: Path, nodes: int, per_node: int,
                 header: list[str]) -> tuple[list[str], list[Path]]:
    """apply for an FSDP2 launch: the tuned script and its tuned YAML copy beside it."""
    from tinker_opt.emit.fsdp2_writer import apply_fsdp2, write_fsdp2_yaml
    from tinker_opt.emit.script_writer import write_script

    yaml_path = output.with_suffix(".yaml")
    applied = apply_fsdp2(info, strategy, nnodes=nodes, nproc_per_node=per_node, yaml_reference=yaml_path,
                          header=header)
    write_fsdp2_yaml(yaml_path, applied.yaml_text, original=info.fsdp2.yaml_path)
    write_script(output, applied.text, source=info.path)
    return list(applied.warnings), [output, yaml_path]


def run_calibrate(profile_dir: Path, hardware: str, output: Path) -> Path:
    """Fit a hardware description to a measured profile and write it as JSON to `output`."""
    from tinker_opt.hardware import load_hardware
    from tinker_opt.profile.calibrate import calibrate, write_hardware_json
    from tinker_opt.profile.store import load_profiled_data

    write_hardware_json(calibrate(load_profiled_data(profile_dir), load_hardware(hardware)), output)
    return output
