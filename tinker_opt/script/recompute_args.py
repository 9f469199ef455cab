"""Megatron-Core's `--recompute-modules` list as the script writes it (priced in
costs/recompute_modules.py)."""

from __future__ import annotations

from tinker_opt.choices import RecomputeModule
from tinker_opt.errors import ScriptError
from tinker_opt.knobs import CHOICES
from tinker_opt.script.expand import field_text
from tinker_opt.script.launch import Launch


def recompute_modules(launch: Launch) -> tuple[str, ...] | None:
    """The modules of the last `--recompute-modules` (nargs '*', megatron/training/arguments.py),
    None when the flag is absent; a name Megatron-Core does not know is refused."""
    arg = launch.last(CHOICES["recompute_modules"].flag)
    if arg is None:
        return None
    names = tuple(word for value in arg.values for word in field_text(value).split())
    known = tuple(module.value for module in RecomputeModule)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ScriptError(
            f"--recompute-modules names {', '.join(unknown)}; Megatron-Core knows "
            f"{', '.join(known)}"
        )
    return names
