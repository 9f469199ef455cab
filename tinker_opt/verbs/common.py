"""What the verbs share: script labels, strategy files, the optional launch script, and the
cost model of a profile with the script's job flags."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_opt.errors import ConfigError
from tinker_opt.specs import DEFAULT_DEVICES_PER_NODE, ClusterSpec
from tinker_opt.strategy import Strategy

if TYPE_CHECKING:
    from tinker_opt.script.reader import ScriptInfo

Progress = Callable[[int, int, str], None]
Log = Callable[[str], None]


@dataclass(frozen=True)
class ScriptLabels:
    """The model name / size that label profile and results folders."""

    model_name: str
    model_size: str


def labels_for(
    script_path: str | None, model_name: str | None, model_size: str | None
) -> ScriptLabels:
    from tinker_opt.script.reader import labels_from_filename

    name, size = labels_from_filename(script_path) if script_path else ("model", "unknown")
    return ScriptLabels(model_name or name, model_size or size)


def num_nodes_for(strategy: Strategy, devices_per_node: int) -> int:
    """The nodes a strategy fills: its world size over the devices per node (at least one)."""
    return max(1, strategy.world_size // devices_per_node)


def read_json_object(path: Path) -> dict[str, Any]:
    """A strategy file: a bare strategy, an Evaluation or a summary.json."""
    if not Path(path).is_file():
        raise ConfigError(
            f"strategy file '{path}' does not exist; pass a JSON strategy or a summary.json"
        )
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"strategy file '{path}' is not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"strategy file '{path}' must hold a JSON object (a strategy or a summary.json)"
        )
    return data


def read_optional_script(path: str | None, how_to_pass: str, model_config: str | None = None):
    from tinker_opt.script.reader import read_script

    if not path:
        return None
    if not Path(path).exists():
        raise ConfigError(
            f"script '{path}' does not exist; pass an existing launch script {how_to_pass}"
        )
    return read_script(path, model_config=model_config)


def model_of(profiled, info, how_to_pass: str):
    """The profile's ModelSpec; a Tinker folder holds none, so the script's is used."""
    if profiled.meta.model is not None:
        return profiled.model
    if info is not None:
        return info.model
    if profiled.meta.source == "tinker":
        raise ConfigError(
            f"profile '{profiled.path}' is a Tinker folder, which records no model shape; "
            f"pass the launch script {how_to_pass}"
        )
    raise ConfigError(
        f"profile '{profiled.path}' records no model shape and no launch script; "
        f"pass the launch script {how_to_pass} or re-run `tinker-opt profile`"
    )


def hardware_for(settings, profiled=None):
    """The hardware description that prices the network: --hardware, else the one an analytic
    profile embeds in its meta.json, else None."""
    from tinker_opt.hardware import HardwareSpec, load_hardware

    if settings.hardware:
        return load_hardware(settings.hardware)
    embedded = profiled.meta.hardware if profiled is not None else None
    if embedded:
        return HardwareSpec.from_dict(embedded, origin=f"meta.json of {profiled.path}")
    return None


@dataclass(frozen=True)
class NodeCount:
    """Devices per node of the planned cluster, where the figure came from and what was said."""

    devices_per_node: int
    source: str
    notes: tuple[str, ...] = ()


def devices_per_node_for(given: int | None, info, hardware) -> NodeCount:
    """Devices per node: the command line, else the script, else the hardware description (said
    so), else 8. A hardware description that disagrees is reported and the script's count used;
    one whose high-bandwidth domain is not a whole number of such nodes is refused."""
    script = info.train.nproc_per_node if info is not None else None
    if given:
        count, source = given, "the command line"
    elif script:
        count, source = script, "the script"
    elif hardware is not None:
        count, source = hardware.devices_per_node, f"hardware {hardware.name}"
    else:
        count, source = DEFAULT_DEVICES_PER_NODE, "the default"
    notes = []
    if given and script and given != script:
        notes.append(
            f"planning for {given} devices per node (command line); the script runs {script}"
        )
    if hardware is not None and hardware.devices_per_node != count:
        notes.append(
            f"WARNING: {source} gives {count} devices per node, hardware '{hardware.name}' has "
            f"{hardware.devices_per_node}; planning for {count} (the hardware's links and cards "
            "per device are kept)"
        )
        if hardware.domain_size and hardware.domain_size % count:
            raise ConfigError(
                f"{source} gives {count} devices per node, but the high-bandwidth domain of "
                f"hardware '{hardware.name}' ({hardware.domain_devices} devices) is not a whole "
                f"number of such nodes; pass --num-npus-per-node or a matching hardware file"
            )
    elif source.startswith("hardware"):
        notes.append(f"{count} devices per node from hardware '{hardware.name}' (no script)")
    return NodeCount(count, source, tuple(notes))


def memory_limit_for(settings, profiled) -> tuple[float, str | None]:
    """--memory-limit, else the device's memory less what the framework keeps
    (costs/framework_memory.py launch_budget_mb), from --hardware or the profile's description;
    else Tinker's 57000 MB. Returns the limit and a note saying where it came from."""
    from tinker_opt.costs.framework_memory import (
        TINKER_DEFAULT_LIMIT_MB,
        accelerator_of,
        launch_budget_mb,
    )
    from tinker_opt.hardware import load_hardware

    if settings.memory_limit is not None:
        return settings.memory_limit, None
    described = profiled.meta.hardware if isinstance(profiled.meta.hardware, dict) else None
    name, memory_gb = None, None
    if settings.hardware:
        spec = load_hardware(settings.hardware)
        name, memory_gb = spec.name, spec.memory_gb
    elif described and described.get("memory_gb"):
        name, memory_gb = str(described.get("name")), float(described["memory_gb"])
    if memory_gb is None:
        return TINKER_DEFAULT_LIMIT_MB, (
            f"memory limit {TINKER_DEFAULT_LIMIT_MB:g} MB (Tinker's default for 64 GB devices): "
            "the profile names no device memory; pass --memory-limit or --hardware"
        )
    # Whole MB, rounded down: the results folder is named by it.
    limit = float(
        int(launch_budget_mb(memory_gb * 1024, accelerator_of(name, str(profiled.meta.device))))
    )
    return limit, (
        f"memory limit {limit:.0f} MB: {memory_gb:g} GB of {name} less the framework's context, "
        "communication buffers and allocator reserve (costs/framework_memory.py)"
    )


def cost_model_for(profiled, model, cluster: ClusterSpec, global_batch_size: int, settings, info):
    """The CostModel for a profile, a cluster and the communication overrides of `settings`; the
    script's job flags come from `info` when known (the swap chunk count else from meta.json)."""
    from tinker_opt.costs.evaluate import CostModel
    from tinker_opt.costs.job import JobOptions

    hardware = hardware_for(settings, profiled)
    if settings.hardware:
        profiled = described_comm(profiled, hardware)
    job = (
        job_options(info)
        if info is not None
        else JobOptions(swap_optimizer_times=profiled.meta.swap_optimizer_times)
    )
    return CostModel.from_profile(
        profiled,
        model,
        cluster,
        global_batch_size,
        hardware=hardware,
        inter_node_bandwidth_gbs=settings.inter_node_bandwidth,
        job=job,
    )


def described_comm(profiled, hardware):
    """The profile with its comm.csv recomputed from `hardware` (the --hardware given to search)
    where the profile's rows were computed from a description (an analytic profile, or `profile
    --hardware`), so that a description fitted by `calibrate --comm` or `--log` prices the links;
    measured rows (profile, profile-comm) are kept: they are the machine's own."""
    from tinker_opt.hardware import COMM_MAX_GROUP, comm_columns

    if not str(profiled.meta.comm_source or "").startswith("hardware"):
        return profiled
    return profiled.with_comm(comm_columns(hardware, max_group_size=COMM_MAX_GROUP))


def job_options(info: ScriptInfo):
    """The script's job flags as the cost model takes them (costs/job.py JobOptions): swap
    optimizer, activation-function recompute, interleaved p2p overlap, reuse-fp32-param,
    swap-attention, gradient-accumulation fusion, the
    precision-aware optimizer's dtypes, the
    Ulysses degree of hybrid context parallelism; an FSDP2 launch recomputes all layers or none."""
    from tinker_opt.costs.job import JobOptions
    from tinker_opt.costs.recompute_modules import DEFAULT_MODULES

    train = info.train
    # MindSpeed's activation-function recompute, priced for every kept layer; a layer count
    # (first N layers of each chunk) is not modelled and stays out (flags.py warns).
    act = (
        train.recompute_activation_function
        and train.recompute_activation_function_num_layers is None
    )
    return JobOptions(
        swap_optimizer_times=train.swap_optimizer_times,
        recompute_activation=bool(act),
        overlap_p2p_comm=train.overlap_p2p_comm,
        reuse_fp32_param=train.reuse_fp32_param,
        swap_attention=train.swap_attention,
        gradient_accumulation_fusion=train.gradient_accumulation_fusion,
        recompute_all=info.fsdp2 is not None,
        recompute_modules=train.recompute_modules or DEFAULT_MODULES,
        ulysses_degree=train.ulysses_degree_in_cp,
        optimizer_precision=train.optimizer_precision,
        step=train.step_flags,
    )


def script_warnings(info) -> list[str]:
    """What the prediction leaves out of the script (script/reader.py prediction_warnings: flags
    read but not priced, flags the reader does not know, model settings not priced), for the
    terminal, search.log and summary.json; none without a script."""
    from tinker_opt.costs.recompute_modules import unpriced_modules
    from tinker_opt.script.reader import prediction_warnings

    if info is None:
        return []
    warnings = prediction_warnings(info.launch, info.model, fsdp2=info.fsdp2 is not None)
    left_out = unpriced_modules(info.train.recompute_modules or ())
    if left_out:
        warnings.append(
            f"--recompute-modules {' '.join(left_out)} not priced (their activations are counted "
            "as kept and their forward is not rerun; costs/recompute_modules.py)"
        )
    return warnings


def model_on_device(model, hardware, log: Log | None = None):
    """The job's model as it runs on `hardware`: on a device without Transformer Engine's fused
    attention (`fused_attention: false`, below sm80: TE dot_product_attention/utils.py
    get_attention_backend, attention.py in TE v1.10) the attention keeps its s x s scores,
    whatever the script asks."""
    from dataclasses import replace

    if hardware.fused_attention or not model.use_flash_attn:
        return model
    if log is not None:
        log(f"hardware '{hardware.name}' has no fused attention (sm80+): priced as unfused")
    return replace(model, use_flash_attn=False)
