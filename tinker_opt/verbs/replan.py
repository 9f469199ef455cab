"""`search --log`: calibrate the hardware description on the user's run, then re-plan on it.

The log's job comes from the search's script (or the log's argument dump); `calibrate --log`
(calibrate_log.py) writes the fitted description beside the results; the analytic profile the
search was given is re-timed on it (same model, same profile space: its meta.json settings), and
the search runs on that profile. Only an analytic profile can be re-timed: a measured profile's
block times are the device's own, which a log of the same device would not change.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

from tinker_opt.errors import ConfigError

REPLAN_DIR = "calibrated"
"""Folder under --output-dir that receives the fitted description and the re-timed profile."""


def calibrated_settings(settings, log) -> object:
    """The search settings on the description fitted to `settings.log` (see the module doc)."""
    from tinker_opt.hardware import load_hardware
    from tinker_opt.profile.store import load_profiled_data
    from tinker_opt.verbs.calibrate_log import run_calibrate_log
    from tinker_opt.verbs.check import DeviceChoice

    if not settings.hardware:
        raise ConfigError("search --log needs --hardware NAME (the description to calibrate)")
    profiled = load_profiled_data(settings.profiled_data_path)
    require_analytic(profiled, "search --log", "--log")
    stamp = datetime.now().strftime("%y%m%d-%H%M%S")
    out = Path(settings.output_dir) / REPLAN_DIR
    out.mkdir(parents=True, exist_ok=True)
    fitted = out / f"hardware-{stamp}.json"
    script = settings.pretrain_script_path_search or profiled.meta.script_path
    report = run_calibrate_log(
        [Path(settings.log)],
        [script] if script else [],
        DeviceChoice(hardware=settings.hardware),
        fitted,
        skip_first=1,
    )
    (row,) = report["logs"]
    log(
        f"calibrated {settings.hardware} on {row['log']}: device time x {report['time_scale']:.4f}, "
        f"iteration {row['measured_ms']:.1f} ms measured, {row['predicted_before_ms']:.1f} -> "
        f"{row['predicted_after_ms']:.1f} ms predicted; description {fitted}"
    )
    folder = out / f"{Path(profiled.path).name}-calibrated-{stamp}"
    retimed_profile(profiled, load_hardware(fitted), folder, profiled.model)
    log(f"re-timed the profile on the fitted description: {folder}")
    return replace(settings, profiled_data_path=str(folder), hardware=str(fitted))


def require_analytic(profiled, verb: str, option: str) -> None:
    """Only an analytic profile can be re-timed: a one-line ConfigError for a measured one."""
    device = profiled.meta.device if isinstance(profiled.meta.device, dict) else {}
    if device.get("kind") != "analytic":
        raise ConfigError(
            f"{verb} re-times an analytic profile; {profiled.path} was measured on "
            f"{device.get('kind', 'a device')} (its times are the device's own): drop {option}"
        )


def retimed_profile(profiled, hardware, folder: Path, model) -> Path:
    """The analytic profile `profiled` timed again for `model` on `hardware` (a HardwareSpec),
    with the same profile space (its meta.json settings) and labels, written to `folder`."""
    from tinker_opt.profile.analytic import analytic_profile
    from tinker_opt.profile.meta import read_meta, write_meta
    from tinker_opt.profile.space import SpaceLimits

    meta = profiled.meta
    limits = SpaceLimits(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in meta.settings.items()}
    )
    analytic_profile(model, hardware, folder, limits=limits)
    origin = read_meta(folder).with_origin(
        script_path=meta.script_path,
        model_name=meta.model_name,
        model_size=meta.model_size,
        framework_version=meta.framework_version,
        is_full_tune=meta.is_full_tune,
        swap_optimizer_times=meta.swap_optimizer_times,
    )
    write_meta(folder, origin)
    return folder
