"""`simulate`: the modelled time and memory of one strategy, stage by stage."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tinker_opt.choices import CpAlgo
from tinker_opt.config import SimulateSettings, require
from tinker_opt.errors import ConfigError
from tinker_opt.rules import LATEST_RULES, FrameworkRules, check_strategy
from tinker_opt.specs import ClusterSpec
from tinker_opt.strategy import Strategy
from tinker_opt.verbs.common import (
    cost_model_for,
    devices_per_node_for,
    hardware_for,
    memory_limit_for,
    model_of,
    num_nodes_for,
    read_json_object,
    read_optional_script,
    script_warnings,
)

SIMULATE_SCRIPT = "(positionally or with --pretrain-script-path)"
FLAG_PARAMS = {
    "simu_tp": "tp",
    "simu_pp": "pp",
    "simu_ep": "ep",
    "simu_etp": "etp",
    "simu_sp": "sp",
    "simu_cp": "cp",
    "cp_algo": "cp_algo",
    "simu_vpp": "vpp",
    "micro_batch_size": "mbs",
    "num_layer_list": "num_layer_list",
    "recompute": "recompute",
    "recompute_num_layers": "recompute_num_layers",
    "recompute_method": "recompute_method",
}
"""simulate's strategy settings (config.TABLE) -> the keyword of costs.simulate.strategy_from_flags;
`zero` and `dist_opt` resolve together into its `zero`."""
STRATEGY_SETTINGS = (*FLAG_PARAMS, "zero", "dist_opt")


def run_simulate(settings: SimulateSettings, strategy_file: Path | None):
    """Evaluate one strategy (from a JSON file, the flags, or the given launch script's own when
    neither is given); returns (Evaluation, warnings).

    The model, global batch size and nodes come from the flags, else the launch script (given,
    or the profiled one), else the profile (global batch size) or the strategy (nodes)."""
    from tinker_opt.profile.store import load_profiled_data

    require(settings, "profiled_data_path")
    profiled = load_profiled_data(settings.profiled_data_path)
    profiled_script = profiled.meta.script_path
    if profiled_script and not Path(profiled_script).exists():
        profiled_script = (
            None  # moved since profiling: the profile's own model and batch size still serve
        )
    info = read_optional_script(
        settings.pretrain_script_path or profiled_script, SIMULATE_SCRIPT, settings.model_config
    )
    model = model_of(profiled, info, SIMULATE_SCRIPT)
    if settings.num_layers:
        model = replace(model, num_layers=settings.num_layers)
    data = read_json_object(strategy_file) if strategy_file is not None else None
    strategy = Strategy.from_dict(data) if data is not None else None
    if strategy is not None and data is not None and _is_bare(data):
        strategy = _in_computing_layers(strategy, info)
    settings, notes = _cluster_settings(settings, info, profiled, strategy)
    settings = replace(settings, memory_limit=memory_limit_for(settings, profiled)[0])
    cluster = ClusterSpec(
        num_nodes=settings.num_nodes,
        devices_per_node=settings.num_npus_per_node,
        memory_limit_mb=settings.memory_limit,
    )
    strategy, chosen = _chosen_strategy(strategy, settings, info, cluster, model.num_layers)
    notes += chosen
    check_strategy(
        strategy, model, cluster, settings.global_batch_size, _family_rules(info, settings)
    )
    cost_model = cost_model_for(
        profiled, model, cluster, settings.global_batch_size, settings, info
    )
    return cost_model.evaluate(strategy), (
        notes
        + script_warnings(info)
        + list(cost_model.warnings)
        + _layer_form_warning(strategy, info, settings)
        + _hybrid_degree_warning(strategy, info, model)
        + _unaligned_ulysses_warning(strategy, info, model, settings)
    )


def _cluster_settings(settings: SimulateSettings, info, profiled, strategy: Strategy | None):
    """(settings, notes): devices per node (verbs.common.devices_per_node_for), the global batch
    size (flag, script, profile) and the nodes (flag, script, strategy) filled in."""
    per_node = devices_per_node_for(
        settings.num_npus_per_node, info, hardware_for(settings, profiled)
    )
    script_gbs = info.train.global_batch_size if info is not None else None
    settings = replace(
        settings,
        num_npus_per_node=per_node.devices_per_node,
        global_batch_size=settings.global_batch_size
        or script_gbs
        or profiled.meta.global_batch_size,
        num_nodes=settings.num_nodes or _default_nodes(strategy, info, per_node.devices_per_node),
    )
    require(settings, "global_batch_size", "num_nodes")
    return settings, list(per_node.notes)


def _is_bare(data: dict) -> bool:
    """A bare Strategy object (not an Evaluation or summary.json, whose stages count computing layers)."""
    return not isinstance(data.get("best"), dict) and "stages" not in data


def _in_computing_layers(strategy: Strategy, info) -> Strategy:
    """A strategy in the script's layer terms (noop layers counted, as `inspect` and `apply` say
    it) mapped to computing layers (script/noop_layers.py)."""
    from tinker_opt.script.noop_layers import computing_layer_strategy

    if info is None or not info.model.noop_layers:
        return strategy
    return computing_layer_strategy(strategy, info.model.noop_layers, info.num_layers_in_script)


def _family_rules(info, settings) -> FrameworkRules:
    """The rules with the script's framework family (the switches' own checks differ by family:
    knob_rules.moe_comm_refusal); the other facts stay those of recent versions, as before."""
    from tinker_opt.script import versions

    if info is None:
        return LATEST_RULES
    family = versions.resolve(
        getattr(settings, "version", None), info.text, info.train.framework.flavour
    ).family
    return replace(LATEST_RULES, family=family)


def _unaligned_ulysses_warning(strategy: Strategy, info, model, settings) -> list[str]:
    """Unaligned Ulysses is priced (rules.ulysses_heads_factor) but the script's MindSpeed-LLM
    version may lack it (FrameworkRules.unaligned_ulysses, script/versions.py): say so."""
    from tinker_opt.expressible import framework_rules
    from tinker_opt.rules import ulysses_heads_message
    from tinker_opt.script import versions

    if info is None or strategy.cp == 1 or strategy.cp_algo != CpAlgo.ULYSSES:
        return []
    vr = versions.resolve(
        getattr(settings, "version", None), info.text, info.train.framework.flavour
    )
    rules = framework_rules(info, vr)
    message = ulysses_heads_message(model.num_attention_heads, strategy.tp, strategy.cp, rules)
    return [f"{message} in {vr.label}: this version may refuse the launch"] if message else []


def _hybrid_degree_warning(strategy: Strategy, info, model) -> list[str]:
    """hybrid_cp_algo priced with another Ulysses degree than the script's (or none given): say
    which (MindSpeed has no default; rules.hybrid_ulysses_degree, the degree `apply` writes)."""
    from tinker_opt.rules import hybrid_ulysses_degree

    if strategy.cp == 1 or strategy.cp_algo != CpAlgo.HYBRID:
        return []
    requested = info.train.ulysses_degree_in_cp if info is not None else None
    used = hybrid_ulysses_degree(strategy.cp, strategy.tp, model.num_attention_heads, requested)
    if used == requested:
        return []
    given = f"--ulysses-degree-in-cp {requested}" if requested else "no --ulysses-degree-in-cp"
    return [
        f"hybrid_cp_algo at cp {strategy.cp} with {given}: priced with Ulysses degree {used} "
        f"(ring over {strategy.cp // used}); MindSpeed needs the degree given, `apply` writes {used}"
    ]


def _layer_form_warning(strategy: Strategy, info, settings: SimulateSettings) -> list[str]:
    """simulate evaluates any split (Tinker's own picks included) but says when the script's
    framework could not write it: the rule the search and the writer apply (rules.LAYER_FORMS)."""
    from tinker_opt.expressible import layer_form, virtual_list_message
    from tinker_opt.rules import layer_form_message
    from tinker_opt.script import versions

    if info is None or strategy.num_layer_list is None:
        return []
    vr = versions.resolve(
        getattr(settings, "version", None), info.text, info.train.framework.flavour
    )
    message = (
        virtual_list_message(strategy, info, vr)
        if strategy.vpp > 1
        else layer_form_message(tuple(strategy.num_layer_list), layer_form(info, vr))
    )
    name = info.path.name if info.path is not None else "this script"
    return [f"{message}: the search would not choose this split for {name}"] if message else []


def _default_nodes(strategy: Strategy | None, info, devices_per_node: int) -> int | None:
    """simulate's nodes when not given: the strategy file's world size, else the script's."""
    if strategy is not None:
        return num_nodes_for(strategy, devices_per_node)
    return info.train.nnodes if info is not None else None


def _chosen_strategy(strategy, settings, info, cluster: ClusterSpec, num_layers: int):
    """(the strategy to price, notes): the file's, else the given script's own when no strategy
    flag is set (and say so), else the flags'."""
    if strategy is not None:
        return strategy, []
    if info is not None and settings.pretrain_script_path and _no_flags(settings):
        own = _script_strategy(info, cluster)
        return own, [
            f"no strategy flag or file given: priced the script's own strategy {own.label()} "
            "(what a search's summary.json calls `current`)"
        ]
    flags = _strategy_from_flags(settings, cluster.num_devices, num_layers)
    return _in_computing_layers(flags, info), []


def _no_flags(settings: SimulateSettings) -> bool:
    """No strategy setting given, on the command line or in the config file."""
    return all(getattr(settings, key) is None for key in STRATEGY_SETTINGS)


def _script_strategy(info, cluster: ClusterSpec) -> Strategy:
    """The launch script's own strategy on its computing layers, as the search's `current`
    (solve/picks.py current_evaluation); the cluster must be the script's."""
    from tinker_opt.solve.picks import computing_layer_strategy

    script_devices = info.train.nnodes * info.train.nproc_per_node
    if script_devices != cluster.num_devices:
        raise ConfigError(
            f"the script runs on {script_devices} devices ({info.train.nnodes} x "
            f"{info.train.nproc_per_node}) but simulate plans for {cluster.num_devices} "
            f"({cluster.num_nodes} x {cluster.devices_per_node}); pass --num-npus-per-node "
            f"{info.train.nproc_per_node} or strategy flags"
        )
    return computing_layer_strategy(
        info.train.strategy, info.model.noop_layers, info.num_layers_in_script
    )


def _strategy_from_flags(settings: SimulateSettings, num_devices: int, num_layers: int) -> Strategy:
    """simulate's Tinker-style flags as a Strategy (dp is what the devices leave); a flag not
    given takes strategy_from_flags' default (1, off, none)."""
    from tinker_opt.costs.simulate import strategy_from_flags
    from tinker_opt.strategy import zero_from_dist_opt

    zero = (
        zero_from_dist_opt(settings.dist_opt, settings.zero)
        if settings.dist_opt is not None
        else settings.zero or 0
    )
    given = {
        param: getattr(settings, key)
        for key, param in FLAG_PARAMS.items()
        if getattr(settings, key) is not None
    }
    return strategy_from_flags(num_devices=num_devices, num_layers=num_layers, zero=zero, **given)
