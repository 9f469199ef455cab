"""`profile`: read the script, profile its blocks (measured or analytic), write the folder."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tinker_opt.config import ProfileSettings, require
from tinker_opt.profile.meta import read_meta, write_meta
from tinker_opt.verbs.common import Log, Progress, ScriptLabels, labels_for


def profile_folder(settings: ProfileSettings, labels: ScriptLabels) -> Path:
    """The folder a profile writes to: --prof-path, or a new timestamped one under save_path."""
    if settings.prof_path:
        return Path(settings.prof_path)
    from tinker_opt.profile.runner import default_profile_dir

    folder = default_profile_dir(
        labels.model_name, labels.model_size, root=Path(settings.save_path)
    )
    return folder.with_name(f"{folder.name}-{settings.task_id}") if settings.task_id else folder


def _devices_per_node(settings: ProfileSettings, info, log: Log | None) -> int:
    """The profile's devices per node (max_npu): the command line, else the script's, else the
    hardware description's (verbs.common.devices_per_node_for, whose notes are logged)."""
    from tinker_opt.verbs.common import devices_per_node_for, hardware_for

    count = devices_per_node_for(settings.max_npu, info, hardware_for(settings))
    if log is not None:
        for note in count.notes:
            log(note)
    return count.devices_per_node


def run_profile(
    settings: ProfileSettings, *, progress: Progress | None = None, log: Log | None = None
) -> Path:
    """Read the script, profile its blocks on the chosen device (or analytically) and return the folder."""
    from tinker_opt.profile.kernels import script_flags
    from tinker_opt.profile.runner import MeasureSettings
    from tinker_opt.profile.runner import run_profile as measure
    from tinker_opt.script.reader import read_script

    require(settings, "pretrain_script_path")
    info = read_script(settings.pretrain_script_path, model_config=settings.model_config)
    info = replace(info, model=info.model.with_load_imbalance(settings.moe_load_imbalance))
    labels = labels_for(settings.pretrain_script_path, settings.model_name, settings.model_size)
    out_dir = profile_folder(settings, labels)
    analytic = settings.device == "analytic"
    settings = replace(settings, max_npu=_devices_per_node(settings, info, log))
    measure_settings = MeasureSettings.from_settings(
        replace(settings, device="cpu") if analytic else settings,
        kernel_flags=script_flags(info.launch),
    )
    if analytic:
        from tinker_opt.hardware import load_hardware
        from tinker_opt.profile.analytic import analytic_profile, available_cpus
        from tinker_opt.verbs.common import model_on_device

        require(settings, "hardware")
        spec = load_hardware(settings.hardware)
        analytic_profile(
            model_on_device(info.model, spec, log),
            spec,
            out_dir,
            limits=measure_settings.limits(info.train),
            workers=settings.devices or available_cpus(),
            progress=progress,
            log=log,
        )
    else:
        measure(info.model, measure_settings, out_dir, train=info.train, progress=progress, log=log)
    is_full_tune = (
        settings.is_full_tune if settings.is_full_tune is not None else info.train.is_full_tune
    )
    write_meta(
        out_dir,
        read_meta(out_dir).with_origin(
            script_path=str(Path(settings.pretrain_script_path).resolve()),
            model_name=labels.model_name,
            model_size=labels.model_size,
            framework_version=settings.version,
            is_full_tune=is_full_tune,
            swap_optimizer_times=info.train.swap_optimizer_times,
        ),
    )
    return out_dir
