"""The verbs' work, apart from argument parsing and printing: profile, search, simulate.

Each function takes the resolved settings of its config section (config.resolve) and returns
plain results; the CLI turns them into terminal output. Heavy imports (torch, solvers) happen
inside the functions so that `search` never imports torch and `--help` stays fast.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from tinker_opt.config import require
from tinker_opt.errors import ConfigError
from tinker_opt.io_utils import write_text_atomic
from tinker_opt.model.strategy import Strategy
from tinker_opt.specs import ClusterSpec

Progress = Callable[[int, int, str], None]
Log = Callable[[str], None]


@dataclass(frozen=True)
class ScriptLabels:
    """The model name / size that label profile and results folders."""

    model_name: str
    model_size: str


def labels_for(script_path: str | None, model_name: str | None, model_size: str | None) -> ScriptLabels:
    from tinker_opt.script.reader import labels_from_filename

    name, size = labels_from_filename(script_path) if script_path else ("model", "unknown")
    return ScriptLabels(model_name or name, model_size or size)


def profile_folder(values: dict[str, Any], labels: ScriptLabels) -> Path:
    """The folder a profile writes to: --prof-path, or a new timestamped one under save_path."""
    if values.get("prof_path"):
        return Path(values["prof_path"])
    from tinker_opt.profile.runner import default_profile_dir

    folder = default_profile_dir(labels.model_name, labels.model_size, root=Path(values["save_path"]))
    return folder.with_name(f"{folder.name}-{values['task_id']}") if values.get("task_id") else folder


def run_profile_step(values: dict[str, Any], *, progress: Progress | None = None, log: Log | None = None) -> Path:
    """Read the script, profile its blocks on the chosen device and return the profile folder."""
    from tinker_opt.script.reader import read_script

    require(values, "profile", "pretrain_script_path")
    info = read_script(values["pretrain_script_path"])
    labels = labels_for(values["pretrain_script_path"], values.get("model_name"), values.get("model_size"))
    out_dir = profile_folder(values, labels)
    from tinker_opt.profile.kernels import script_flags
    from tinker_opt.profile.runner import ProfileSettings, run_profile

    analytic = values["device"] == "analytic"
    settings = ProfileSettings(
        device="cpu" if analytic else values["device"], max_npu=values["max_npu"], max_ep=values.get("max_ep"),
        max_mbs=values["max_mbs"],
        prof_tp=values.get("prof_tp"), prof_sp=values.get("prof_sp"), warmup=values["warmup"],
        repeats=values["repeats"], hardware=values.get("hardware"), devices=values.get("devices"),
        blocks=values.get("blocks") or "reference", kernel_flags=script_flags(info.launch))
    if analytic:
        from tinker_opt.hardware import load_hardware
        from tinker_opt.profile.analytic import analytic_profile

        require(values, "profile", "hardware")
        analytic_profile(info.model, load_hardware(values["hardware"]), out_dir, limits=settings.limits(info.train),
                         progress=progress, log=log)
    else:
        run_profile(info.model, settings, out_dir, train=info.train, progress=progress, log=log)
    is_full_tune = values["is_full_tune"] if values.get("is_full_tune") is not None else info.train.is_full_tune
    _record_origin(out_dir, {"script_path": str(Path(values["pretrain_script_path"]).resolve()),
                             "model_name": labels.model_name, "model_size": labels.model_size,
                             "framework_version": values.get("version"), "is_full_tune": is_full_tune,
                             "swap_optimizer_times": info.train.swap_optimizer_times})
    return out_dir


def _record_origin(out_dir: Path, origin: dict[str, Any]) -> None:
    """Note in meta.json which script, labels and framework the profile came from (search reuses them)."""
    meta_path = out_dir / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta.update(origin)
    write_text_atomic(meta_path, json.dumps(meta, indent=2) + "\n")


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


class RunLog:
    """Lines for search.log, echoed to the terminal unless quiet."""

    def __init__(self, echo: Callable[[str], None] | None = None) -> None:
        self.lines: list[str] = []
        self._echo = echo

    def __call__(self, message: str) -> None:
        self.lines.append(f"{datetime.now():%H:%M:%S} {message}")
        if self._echo:
            self._echo(message)


def _read_optional_script(path: str | None):
    from tinker_opt.script.reader import read_script

    if not path:
        return None
    if not Path(path).exists():
        raise ConfigError(f"script '{path}' does not exist; pass an existing launch script with --pretrain-script-path-search")
    return read_script(path)


def _model_of(profiled, info):
    """The profile's ModelSpec; a Tinker folder holds none, so the script's is used."""
    if "model" in profiled.meta:
        return profiled.model
    if info is None:
        raise ConfigError(f"profile '{profiled.path}' (Tinker format) holds no model shape; "
                          "pass the launch script with --pretrain-script-path-search")
    return info.model


def build_cost_model(profiled, cluster: ClusterSpec, global_batch_size: int, values: dict[str, Any], model=None,
                     info=None):
    """The CostModel for a profile, a cluster and the communication overrides of `values`; the
    swap-optimizer chunk count comes from the script (`info`) when known, else from meta.json."""
    from tinker_opt.hardware import load_hardware
    from tinker_opt.model.costs import CostModel

    hardware = load_hardware(values["hardware"]) if values.get("hardware") else None
    return CostModel.from_profile(profiled, model or profiled.model, cluster, global_batch_size,
                                  hardware=hardware, inter_node_bandwidth_gbs=values.get("inter_node_bandwidth"),
                                  swap_optimizer_times=info.train.swap_optimizer_times if info is not None
                                  else profiled.meta.get("swap_optimizer_times"))


def run_search_step(values: dict[str, Any], *, log: RunLog) -> SearchOutcome:
    """Load a profile, solve, and write the results folder."""
    from tinker_opt.emit.expressible import search_space_for
    from tinker_opt.emit.results import RunLabels, SearchReport, check_writable, write_results_folder
    from tinker_opt.script import versions
    from tinker_opt.model.search import SearchSpace, search
    from tinker_opt.profile.store import load_profiled_data

    require(values, "search", "profiled_data_path")
    profiled = load_profiled_data(values["profiled_data_path"])
    info = _read_optional_script(values.get("pretrain_script_path_search") or profiled.meta.get("script_path"))
    values = dict(values)
    if info is not None:
        values["global_batch_size"] = values.get("global_batch_size") or info.train.global_batch_size
        values["num_nodes"] = values.get("num_nodes") or info.train.nnodes
    require(values, "search", "global_batch_size", "num_nodes")
    output_dir = Path(values["output_dir"])
    check_writable(output_dir)
    cluster = ClusterSpec(num_nodes=values["num_nodes"], devices_per_node=values["num_npus_per_node"],
                          memory_limit_mb=values["memory_limit"])
    cost_model = build_cost_model(profiled, cluster, values["global_batch_size"], values, model=_model_of(profiled, info),
                                  info=info)
    for warning in cost_model.warnings:
        log(warning)
    log(f"searching {cluster.num_devices} devices ({cluster.num_nodes} nodes x {cluster.devices_per_node}), "
        f"global batch {values['global_batch_size']}, memory limit {cluster.memory_limit_mb:g} MB, solver {values['solver']}")
    version = values.get("version") or profiled.meta.get("framework_version")
    space = SearchSpace(max_mbs=values.get("max_mbs"))
    if info is not None:
        space = search_space_for(info, versions.resolve(version, info.text, info.train.framework.flavour), space)
    result = search(cost_model, solver=values["solver"], time_limit_s=values["time_limit"], cpus=values["cpus"],
                    top_k=values["top_k"], space=space, progress=log)
    log(f"{result.solver}: {result.status}, objective {result.objective_ms:.3f} ms, bound "
        f"{result.bound_ms:.3f} ms, gap {result.gap:.2%}, {result.solve_time_s:.2f} s")
    top = [evaluation.to_dict() for evaluation in result.top]
    labels = labels_for(profiled.meta.get("script_path"), profiled.meta.get("model_name"), profiled.meta.get("model_size"))
    report = SearchReport(
        labels=RunLabels(labels.model_name, labels.model_size, values["global_batch_size"], cluster.memory_limit_mb,
                         cluster.num_nodes, cluster.devices_per_node, cost_model.model.seq_length),
        inputs=_inputs_record(values, profiled, cluster, cost_model.model), solver=result.solver, status=result.status,
        gap=result.gap, solve_time_s=result.solve_time_s, objective_ms=result.objective_ms,
        bound_ms=result.bound_ms, top=top, warnings=list(cost_model.warnings), log_lines=log.lines)
    writer = _script_writer(info, cluster, version, log) if info is not None else None
    if writer is None:
        log("no launch script known for this profile: configs/ stays empty (pass --pretrain-script-path-search)")
    folder = write_results_folder(report, output_dir, write_script=writer)
    return SearchOutcome(folder=folder, top=top, status=result.status, solver=result.solver,
                         solve_time_s=result.solve_time_s, gap=result.gap, warnings=list(cost_model.warnings))


def _inputs_record(values: dict[str, Any], profiled, cluster: ClusterSpec, model) -> dict[str, Any]:
    return {
        "profiled_data_path": str(profiled.path), "script_path": profiled.meta.get("script_path"),
        "model": model.to_dict(), "global_batch_size": values["global_batch_size"],
        "num_nodes": cluster.num_nodes, "num_npus_per_node": cluster.devices_per_node,
        "memory_limit_mb": cluster.memory_limit_mb, "solver": values["solver"], "time_limit_s": values["time_limit"],
        "cpus": values["cpus"], "top_k": values["top_k"], "hardware": values.get("hardware"),
        "inter_node_bandwidth_gbs": values.get("inter_node_bandwidth"),
    }


def _script_writer(info, cluster: ClusterSpec, version: str | None, log: RunLog):
    from tinker_opt.emit.script_writer import apply_strategy

    def write(rank: int, evaluation: dict[str, Any], header: list[str]) -> str:
        strategy = strategy_to_write(evaluation, info)
        applied = apply_strategy(info.text, strategy, nnodes=cluster.num_nodes,
                                 nproc_per_node=cluster.devices_per_node, version=version, header=header)
        for warning in applied.warnings:
            log(f"rank {rank}: {warning}")
        return applied.text

    return write


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


def run_simulate_step(values: dict[str, Any], strategy_file: Path | None):
    """Evaluate one strategy (from a JSON file or the flags); returns (Evaluation, warnings)."""
    from tinker_opt.model.strategy import check_strategy
    from tinker_opt.profile.store import load_profiled_data

    require(values, "simulate", "profiled_data_path")
    profiled = load_profiled_data(values["profiled_data_path"])
    model = profiled.model
    if values.get("num_layers"):
        model = replace(model, num_layers=values["num_layers"])
    if strategy_file is not None:
        strategy = Strategy.from_dict(read_json_object(strategy_file))
    else:
        strategy = None
    gbs = values.get("global_batch_size") or profiled.meta.get("global_batch_size")
    values = dict(values, global_batch_size=gbs)
    require(values, "simulate", "global_batch_size")
    num_nodes = values.get("num_nodes")
    if num_nodes is None and strategy is not None:
        num_nodes = max(1, strategy.world_size // values["num_npus_per_node"])
    values["num_nodes"] = num_nodes
    require(values, "simulate", "num_nodes")
    cluster = ClusterSpec(num_nodes=num_nodes, devices_per_node=values["num_npus_per_node"],
                          memory_limit_mb=values["memory_limit"])
    if strategy is None:
        strategy = _strategy_from_flags(values, cluster.num_devices, model.num_layers)
    check_strategy(strategy, model, cluster, gbs)
    cost_model = build_cost_model(profiled, cluster, gbs, values, model=model)
    return cost_model.evaluate(strategy), list(cost_model.warnings)


def _strategy_from_flags(values: dict[str, Any], num_devices: int, num_layers: int) -> Strategy:
    """simulate's Tinker-style flags as a Strategy (dp is what the devices leave)."""
    from tinker_opt.model.simulate import strategy_from_flags

    dist_opt = values["dist_opt"] if values.get("dist_opt") is not None else values["zero"]
    return strategy_from_flags(
        num_devices=num_devices, num_layers=num_layers, tp=values["simu_tp"], pp=values["simu_pp"],
        ep=values["simu_ep"], etp=values.get("simu_etp"), sp=values["simu_sp"], dist_opt=dist_opt,
        mbs=values["micro_batch_size"], num_layer_list=values.get("num_layer_list"), recompute=values["recompute"],
        recompute_num_layers=values.get("recompute_num_layers"), cp=values["simu_cp"], cp_algo=values.get("cp_algo"),
        vpp=values["simu_vpp"])


def read_json_object(path: Path) -> dict[str, Any]:
    if not Path(path).is_file():
        raise ConfigError(f"strategy file '{path}' does not exist; pass a JSON strategy or a summary.json")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"strategy file '{path}' is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"strategy file '{path}' must hold a JSON object (a strategy or a summary.json)")
    return data
