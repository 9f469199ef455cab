"""`search --allow-fp8`: the training precision as a search choice, only when the user asks.

Without the switch the precision is the job's (the script's `--bf16` / `--fp16` / `--fp8-format`).
With it, a script that does not train in FP8 is searched twice: in its own precision and in FP8
as Megatron-LM runs it with Transformer Engine (`--fp8-format hybrid`, delayed scaling). The FP8
block times come from the analytic profile re-timed with FP8 on (verbs/replan.retimed_profile;
a measured profile's times are its device's, so it is refused), the FP8 memory from the cost model
(costs/fp8_terms.py). The faster of the two bests decides the results folder: its ranking, picks
and tuned scripts, which carry the FP8 flags (emit/precision_edit.py); the script's own strategy
(`current`) stays in the script's precision, so `speedup_vs_current` includes the FP8 gain.

Why these flags: `hybrid` (E4M3 forward, E5M2 gradients) is the format Transformer Engine
recommends for training ("Using FP8 with Transformer Engine": E4M3 for activations and weights,
E5M2's range for gradients); `delayed` is Megatron's default `--fp8-recipe`
(megatron/training/arguments.py) and the only recipe every FP8 Megatron version has. The cost
model prices tensorwise scaling slower (one more amax read per operand) and blockwise / MXFP8 as
delayed (profile/fp8.py), so no other recipe would rank first.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tinker_opt.errors import ConfigError
from tinker_opt.specs import ModelSpec

FP8_FORMAT = "hybrid"
FP8_RECIPE = "delayed"
FP8_DIR = "fp8"
"""Folder under --output-dir that receives the profile re-timed in FP8."""


def precision_label(model: ModelSpec) -> str:
    """`bf16`, `fp16`, or `fp8 (hybrid, delayed)`: how the log and summary name a precision."""
    if model.is_fp8:
        return f"fp8 ({model.fp8_format}, {model.fp8_recipe})"
    return model.precision


def fp8_model(model: ModelSpec, hardware, info) -> ModelSpec | None:
    """The FP8 variant of `model` that `--allow-fp8` searches beside it; None when the script
    trains in FP8 already. A device without an FP8 rate, an unknown device or an FSDP2 launch
    (no Transformer Engine FP8 in MindSpeed-LLM's FSDP2 backend) is a one-line ConfigError."""
    if model.is_fp8:
        return None
    if hardware is None:
        raise ConfigError(
            "--allow-fp8 needs the device's FP8 rate: pass --hardware NAME or search an analytic "
            "profile (its description is in meta.json)"
        )
    if not hardware.has_fp8:
        raise ConfigError(
            f"--allow-fp8: hardware '{hardware.name}' has no FP8 rate (peak_tflops.fp8 in its "
            "description); FP8 training needs FP8 tensor cores (H100 and later): drop --allow-fp8"
        )
    if info is not None and info.fsdp2 is not None:
        raise ConfigError(
            "--allow-fp8: an FSDP2 launch has no Transformer Engine FP8 to switch on; drop --allow-fp8"
        )
    return replace(model, fp8_format=FP8_FORMAT, fp8_recipe=FP8_RECIPE)


def fp8_profile(profiled, hardware, model: ModelSpec, output_dir: str, log) -> Path:
    """The analytic profile `profiled` re-timed for the FP8 `model`, under output_dir/fp8/."""
    from datetime import datetime

    from tinker_opt.verbs.replan import require_analytic, retimed_profile

    require_analytic(profiled, "search --allow-fp8", "--allow-fp8")
    stamp = datetime.now().strftime("%y%m%d-%H%M%S")
    folder = Path(output_dir) / FP8_DIR / f"{Path(profiled.path).name}-fp8-{stamp}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    retimed_profile(profiled, hardware, folder, model)
    log(f"--allow-fp8: re-timed the profile in {precision_label(model)}: {folder}")
    return folder
