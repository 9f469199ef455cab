"""`check`: a training log beside the prediction of the same job.

The log gives the measured side (logs/: iteration time over the steady state, per-rank peak
memory); the job comes from the launch script or, without one, from the log's argument dump
(logs/arguments.py through the script reader); the device from a profiled-data folder or the
analytic device of a hardware description (a profile of the job's own shard shape, written to a
temporary folder). The prediction is `CostModel.evaluate` of the job's strategy, the one
definition of the modelled time and memory.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_opt.errors import ConfigError, LogError
from tinker_opt.logs import SteadyState, TrainingLog, read_log, steady_state
from tinker_opt.logs.steady import DEFAULT_SKIP_FIRST
from tinker_opt.specs import ClusterSpec
from tinker_opt.verbs.common import cost_model_for, read_optional_script

CHECK_SCRIPT = "(as the second argument of check)"
NO_LIMIT_MB = 1e9
"""The cluster's memory budget when only the prediction is wanted (no fit test)."""


@dataclass(frozen=True, kw_only=True)
class DeviceChoice:
    """Where the prediction's block times come from: a profiled-data folder, or the analytic
    device of a hardware description (name or JSON file)."""

    profiled_data_path: str | None = None
    device: str | None = None
    hardware: str | None = None
    inter_node_bandwidth: float | None = None
    num_npus_per_node: int | None = None
    """Devices per node of the job when the log's argument dump is the job (default: up to 8)."""


COMPARED = ("tp", "pp", "dp", "cp", "ep", "sp", "vpp", "mbs")
"""Strategy keys on which a given script and the log's argument dump must agree."""


@dataclass(frozen=True)
class Job:
    """The job a log ran, as the script reader sees it, and where it was read from."""

    info: Any
    source: str
    warnings: tuple[str, ...] = ()


def _disagreement(script_info, dump_info) -> tuple[str, ...]:
    """A warning when the script is not the job the log's argument dump ran."""
    mine, ran = script_info.train.strategy.to_dict(), dump_info.train.strategy.to_dict()
    keys = [k for k in COMPARED if mine.get(k) != ran.get(k)]
    if script_info.train.global_batch_size != dump_info.train.global_batch_size:
        keys.append("global batch size")
    if not keys:
        return ()
    shown = ", ".join(f"{k} {mine.get(k)} vs {ran.get(k)}" for k in keys if k in mine)
    return (
        f"the script differs from the run in the log's argument dump ({shown or keys[0]}); "
        "the prediction is of the script",
    )


def job_of(log: TrainingLog, script: str | None, devices_per_node: int | None) -> Job:
    """The launch script's job, else the one in the log's argument dump."""
    from tinker_opt.logs.arguments import launch_text
    from tinker_opt.script.reader import read_script_text

    if script:
        info = read_optional_script(script, CHECK_SCRIPT)
        warnings: tuple[str, ...] = ()
        if log.arguments:
            dump = read_script_text(launch_text(log.arguments, devices_per_node), "dump.sh")
            warnings = _disagreement(info, dump)
        return Job(info, f"script {script}", warnings)
    if not log.arguments:
        raise LogError(
            f"{log.source} holds no argument dump ({log.form}); pass the launch script as the "
            "second argument: tinker-opt check LOG SCRIPT"
        )
    text = launch_text(log.arguments, devices_per_node)
    return Job(read_script_text(text, "argument-dump.sh"), f"argument dump of {log.source}")


def _analytic_folder(info, hardware: str, out_dir: Path) -> Path:
    """An analytic profile of the job's own shard shape (tp, sp, cp, ep, mbs) into out_dir."""
    from tinker_opt import config
    from tinker_opt.hardware import load_hardware
    from tinker_opt.profile.analytic import analytic_profile
    from tinker_opt.profile.kernels import script_flags
    from tinker_opt.profile.settings import MeasureSettings
    from tinker_opt.verbs.common import model_on_device

    strategy = info.train.strategy
    settings = config.resolve(
        "profile",
        {
            "device": "cpu",
            "max_npu": info.train.nproc_per_node,
            "max_mbs": strategy.mbs,
            "prof_tp": (strategy.tp,),
            "prof_sp": (int(strategy.sp),),
        },
        {},
    )
    measure = MeasureSettings.from_settings(settings, kernel_flags=script_flags(info.launch))
    spec = load_hardware(hardware)
    model = model_on_device(info.model, spec)
    return analytic_profile(model, spec, out_dir, limits=measure.limits(info.train))


def _profiled(info, device: DeviceChoice, scratch: Path):
    from tinker_opt.profile.store import load_profiled_data

    if device.profiled_data_path:
        return load_profiled_data(device.profiled_data_path)
    if device.device == "analytic" and device.hardware:
        return load_profiled_data(_analytic_folder(info, device.hardware, scratch))
    raise ConfigError(
        "check needs the device: pass --profiled-data-path P, or --device analytic --hardware NAME"
    )


def predict(info, device: DeviceChoice):
    """(Evaluation of the job's strategy, warnings) on the chosen device."""
    train = info.train
    hardware_mb = None
    if device.hardware:
        from tinker_opt.hardware import load_hardware

        hardware_mb = load_hardware(device.hardware).memory_gb * 1024
    cluster = ClusterSpec(
        num_nodes=train.nnodes,
        devices_per_node=train.nproc_per_node,
        memory_limit_mb=hardware_mb or NO_LIMIT_MB,
    )
    with tempfile.TemporaryDirectory(prefix="tinker-check-") as scratch:
        profiled = _profiled(info, device, Path(scratch))
        cost_model = cost_model_for(
            profiled, info.model, cluster, train.global_batch_size, device, info
        )
        return cost_model.evaluate(train.strategy), list(cost_model.warnings)


def _measured(log: TrainingLog, steady: SteadyState, info) -> dict[str, Any]:
    """The measured side: steady-state time, throughput, and the max over ranks of the peaks."""
    train = info.train
    world = train.nnodes * train.nproc_per_node
    tokens = train.global_batch_size * info.model.seq_length
    peaks = {
        key: max((v for v in values if v is not None), default=None)
        for key, values in (
            ("peak_allocated_mb", [m.max_allocated_mb for m in log.memory]),
            ("peak_reserved_mb", [m.max_reserved_mb or m.reserved_mb for m in log.memory]),
        )
    }
    return {
        "iteration_time_ms": steady.iteration_time_ms,
        "tokens_per_s_per_device": tokens / (steady.iteration_time_ms / 1e3) / world,
        "tflops_per_device": steady.tflops_per_device,
        **peaks,
        "device_memory_used_fraction": max(
            (r.memory_used_fraction for r in steady.used if r.memory_used_fraction is not None),
            default=None,
        ),
        "ranks_reporting_memory": sorted({m.rank for m in log.memory if m.rank is not None}),
        "per_rank": [
            {
                "rank": m.rank,
                "stage": None if m.rank is None else stage_of(m.rank, world, train.strategy.pp),
                "max_allocated_mb": m.max_allocated_mb,
                "max_reserved_mb": m.max_reserved_mb,
            }
            for m in log.memory
        ],
    }


def job_size(info) -> dict[str, Any]:
    """What makes two jobs of one machine differ in size (not in layout): the model's shape
    and the tokens per iteration (calibrate --log fits a fixed cost only across sizes)."""
    model = info.model
    return {
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "ffn_hidden_size": model.ffn_hidden_size,
        "num_experts": model.num_experts,
        "tokens_per_iteration": info.train.global_batch_size * model.seq_length,
    }


def stage_of(rank: int, world: int, pp: int) -> int:
    """The pipeline stage of a rank: Megatron's default order tp-cp-ep-dp-pp puts pp outermost
    (megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp"), so stage = rank // (world / pp)."""
    return rank // max(1, world // pp)


def _error(predicted: float | None, measured: float | None) -> float | None:
    """Relative error of the prediction, (predicted - measured) / measured."""
    if predicted is None or not measured:
        return None
    return predicted / measured - 1


def run_check(
    log_path: str | Path,
    script: str | None,
    device: DeviceChoice,
    *,
    skip_first: int = DEFAULT_SKIP_FIRST,
    log_run: int | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The `check` result (the --json object) and the warnings to show; `log_run`: which run of
    a log holding several (default the last complete one)."""
    log = read_log(log_path, log_run)
    steady = steady_state(log, skip_first)
    job = job_of(log, script, device.num_npus_per_node)
    evaluation, warnings = predict(job.info, device)
    measured = _measured(log, steady, job.info)
    after = [m.after_iterations for m in log.memory if m.after_iterations is not None]
    predicted = predicted_side(evaluation, job.info, min(after) if after else None)
    errors = {
        key: _error(predicted[key], measured[key])
        for key in ("iteration_time_ms", "peak_allocated_mb", "peak_reserved_mb")
    }
    result = {
        "log": {"source": log.source, "form": log.form},
        "job": {
            "source": job.source,
            "strategy": job.info.train.strategy.to_dict(),
            "size": job_size(job.info),
        },
        "iterations_used": [r.iteration for r in steady.used],
        "iterations_dropped": list(steady.dropped),
        "steady_state_rule": steady.rule,
        "measured": measured,
        "predicted": predicted,
        "error": errors,
        "evaluation": evaluation.to_dict(),
    }
    return result, list(log.warnings) + list(job.warnings) + list(job.info.warnings) + warnings


def _state_bytes(info) -> float:
    """Optimizer-state bytes per parameter (costs/terms.py: 12 with a 16-bit model, 2 fewer with
    --reuse-fp32-param, 8 in fp32)."""
    if info.model.bytes_per_element != 2:
        return 8.0
    return 12.0 - (2.0 if info.train.reuse_fp32_param else 0.0)


def predicted_side(evaluation, info, memory_after: int | None) -> dict[str, Any]:
    """The predicted figures of an Evaluation, keyed as the measured ones; a memory report after
    iteration 1 is set beside the first iteration's peak (framework_memory.py)."""
    from tinker_opt.costs.framework_memory import FrameworkMemory, first_iteration_peak_mb

    framework = evaluation.framework_memory
    allocated = framework["peak_allocated_mb"]
    if memory_after == 1:
        allocated = max(
            first_iteration_peak_mb(stage, stage.allocated_mb or 0.0, _state_bytes(info))
            for stage in evaluation.stages
        )
    return {
        "iteration_time_ms": evaluation.iteration_time_ms,
        "tokens_per_s_per_device": evaluation.tokens_per_s_per_device,
        "peak_allocated_mb": allocated,
        "peak_reserved_mb": FrameworkMemory.reserved_mb(allocated),
        "peak_device_mb": framework["peak_device_mb"],
        "memory_peak_of": "iteration 1" if memory_after == 1 else "steady state",
        "stages": [
            {
                "stage": stage.stage,
                "allocated_mb": stage.allocated_mb,
                "reserved_mb": stage.reserved_mb,
                "device_mb": stage.device_mb,
            }
            for stage in evaluation.stages
        ],
        "time_breakdown_ms": dict(evaluation.time_breakdown_ms),
    }


__all__ = ["DeviceChoice", "run_check"]
