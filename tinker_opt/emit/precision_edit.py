"""Writing a row's precision into a tuned script: the FP8 flags of a row `search --allow-fp8`
ranked in FP8 for a script that trains in BF16 / FP16.

The flags are Megatron-LM's (megatron/training/arguments.py): `--fp8-format FORMAT` switches
Transformer Engine's FP8 on, `--fp8-recipe RECIPE` is written only when it is not the default
(delayed), so the tuned script also runs on versions without `--fp8-recipe`. They go right after
the script's `--bf16` / `--fp16` (else on the launch line), and the script keeps its 16-bit flag:
FP8 runs the linear GEMMs, everything else stays in it. A row in the script's own precision, or a
script already in FP8, changes nothing: precision is the job's unless the search chose FP8.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tinker_opt.emit import script_edit
from tinker_opt.errors import ScriptError
from tinker_opt.script.reader import read_script_text

DEFAULT_FP8_RECIPE = "delayed"
"""Megatron's `--fp8-recipe` default (megatron/training/arguments.py)."""
PRECISION_FLAGS = ("--bf16", "--fp16")


def fp8_flags(precision: Mapping[str, Any] | None) -> list[str]:
    """The flags that switch the row's FP8 on (empty when the row is not FP8)."""
    if not precision or not precision.get("fp8_format"):
        return []
    flags = [f"--fp8-format {precision['fp8_format']}"]
    recipe = precision.get("fp8_recipe") or DEFAULT_FP8_RECIPE
    if recipe != DEFAULT_FP8_RECIPE:
        flags.append(f"--fp8-recipe {recipe}")
    return flags


def precision_to_write(data: dict[str, Any]) -> dict[str, Any] | None:
    """The precision of a JSON object (an Evaluation's or a summary.json's best; None for a bare
    strategy, which keeps the script's precision)."""
    evaluation = data["best"] if isinstance(data.get("best"), dict) else data
    precision = evaluation.get("precision")
    return precision if isinstance(precision, dict) else None


def apply_precision(text: str, precision: Mapping[str, Any] | None) -> str:
    """`text` training in the row's precision: its FP8 flags added where the script has none."""
    flags = fp8_flags(precision)
    if not flags:
        return text
    info = read_script_text(text)
    if info.model.is_fp8:
        return text
    anchors = [arg for arg in info.launch.args if arg.name in PRECISION_FLAGS]
    edit = (
        script_edit.insertion(text, anchors[-1], flags)
        if anchors
        else script_edit.insertion_after_field(info.launch.entry, flags)
    )
    tuned = script_edit.apply_edits(text, [edit])
    model = read_script_text(tuned).model
    assert precision is not None
    if (model.fp8_format, model.fp8_recipe) != (
        precision["fp8_format"],
        precision.get("fp8_recipe") or DEFAULT_FP8_RECIPE,
    ):
        raise ScriptError(
            f"the tuned script does not read back in FP8 ({' '.join(flags)}); add the flags by hand"
        )
    return tuned
