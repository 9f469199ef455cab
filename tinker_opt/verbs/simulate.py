"""`simulate`: the modelled time and memory of one strategy, stage by stage."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tinker_opt.config import SimulateSettings, require
from tinker_opt.rules import check_strategy
from tinker_opt.specs import ClusterSpec
from tinker_opt.strategy import Strategy
from tinker_opt.verbs.common import (
    cost_model_for,
    model_of,
    num_nodes_for,
    read_json_object,
    read_optional_script,
    script_warnings,
)

SIMULATE_SCRIPT = "(positionally or with --pretrain-script-path)"


def run_simulate(settings: SimulateSettings, strategy_file: Path | None):
    """Evaluate one strategy (from a JSON file or the flags); returns (Evaluation, warnings).

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
    script_gbs = info.train.global_batch_size if info is not None else None
    settings = replace(
        settings,
        global_batch_size=settings.global_batch_size
        or script_gbs
        or profiled.meta.global_batch_size,
        num_nodes=settings.num_nodes or _default_nodes(strategy, info, settings.num_npus_per_node),
    )
    require(settings, "global_batch_size", "num_nodes")
    cluster = ClusterSpec(
        num_nodes=settings.num_nodes,
        devices_per_node=settings.num_npus_per_node,
        memory_limit_mb=settings.memory_limit,
    )
    if strategy is None:
        strategy = _strategy_from_flags(settings, cluster.num_devices, model.num_layers)
    if data is None or _is_bare(data):
        strategy = _in_computing_layers(strategy, info)
    check_strategy(strategy, model, cluster, settings.global_batch_size)
    cost_model = cost_model_for(
        profiled, model, cluster, settings.global_batch_size, settings, info
    )
    return cost_model.evaluate(strategy), (
        script_warnings(info)
        + list(cost_model.warnings)
        + _layer_form_warning(strategy, info, settings)
        + _hybrid_degree_warning(strategy, info, model)
        + _unaligned_ulysses_warning(strategy, info, model, settings)
    )


def _is_bare(data: dict) -> bool:
    """A bare Strategy object (not an Evaluation or summary.json, whose stages count computing layers)."""
    return not isinstance(data.get("best"), dict) and "stages" not in data


def _in_computing_layers(strategy: Strategy, info) -> Strategy:
    """A strategy in the script's layer terms (noop layers counted, as `inspect` and `apply` say
    it) mapped to computing layers (emit/noop_layers.py)."""
    from tinker_opt.emit.noop_layers import computing_layer_strategy

    if info is None or not info.model.noop_layers:
        return strategy
    return computing_layer_strategy(strategy, info.model.noop_layers, info.num_layers_in_script)


def _unaligned_ulysses_warning(strategy: Strategy, info, model, settings) -> list[str]:
    """Unaligned Ulysses is priced (rules.ulysses_heads_factor) but the script's MindSpeed-LLM
    version may lack it (FrameworkRules.unaligned_ulysses, script/versions.py): say so."""
    from tinker_opt.emit.expressible import framework_rules
    from tinker_opt.rules import ulysses_heads_message
    from tinker_opt.script import versions

    if info is None or strategy.cp == 1 or strategy.cp_algo != "ulysses_cp_algo":
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

    if strategy.cp == 1 or strategy.cp_algo != "hybrid_cp_algo":
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
    from tinker_opt.emit.expressible import layer_form, virtual_list_message
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


def _strategy_from_flags(settings: SimulateSettings, num_devices: int, num_layers: int) -> Strategy:
    """simulate's Tinker-style flags as a Strategy (dp is what the devices leave)."""
    from tinker_opt.costs.simulate import strategy_from_flags

    dist_opt = settings.dist_opt if settings.dist_opt is not None else settings.zero
    return strategy_from_flags(
        num_devices=num_devices,
        num_layers=num_layers,
        tp=settings.simu_tp,
        pp=settings.simu_pp,
        ep=settings.simu_ep,
        etp=settings.simu_etp,
        sp=settings.simu_sp,
        dist_opt=dist_opt,
        mbs=settings.micro_batch_size,
        num_layer_list=settings.num_layer_list,
        recompute=settings.recompute,
        recompute_num_layers=settings.recompute_num_layers,
        cp=settings.simu_cp,
        cp_algo=settings.cp_algo,
        recompute_method=settings.recompute_method,
        vpp=settings.simu_vpp,
    )
