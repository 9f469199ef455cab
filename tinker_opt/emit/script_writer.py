"""Writing a launch script back with a new strategy: `apply_strategy`.

Arguments change, whole lines do not: a value held by a variable used only there changes at the
assignment (`TP=8`), a shared one at its reference (`${TP}` -> `4`); flags the strategy needs are
added next to the other parallel flags (in whichever group holds them, or on the launch line);
flags it turns off are removed with their companions; node and device counts follow the target.
Everything else, the shebang on line 1 included, stays byte for byte. The result is read back and
must give exactly the expressible strategy (else ScriptError: the layout is beyond this writer).
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_opt.emit import script_edit
from tinker_opt.emit.precision_edit import apply_precision
from tinker_opt.emit.strategy_plan import plan_strategy_edits
from tinker_opt.errors import ConfigError, ScriptError
from tinker_opt.expressible import expressible_strategy
from tinker_opt.io_utils import write_text_atomic
from tinker_opt.script import versions
from tinker_opt.script.expand import Scalar
from tinker_opt.script.reader import ScriptInfo, read_script_text
from tinker_opt.strategy import Strategy

HEADER_PREFIX = "# tinker-opt: "


@dataclass(frozen=True)
class AppliedScript:
    """The tuned script's text and what the user should know about it."""

    text: str
    warnings: tuple[str, ...]


def _cluster_targets(
    info: ScriptInfo, nnodes: int, nproc: int
) -> list[tuple[tuple[str, ...], int]]:
    """(launcher flag spellings, wanted value), in the order to fix them."""
    launcher = info.launch.launcher
    if launcher == "msrun":
        return [
            (("--local_worker_num",), nproc),
            (("@NNODES",), nnodes),
            (("--worker_num",), nnodes * nproc),
        ]
    if launcher == "deepspeed":
        return [(("--num_nodes",), nnodes), (("--num_gpus",), nproc)]
    return [(("--nnodes",), nnodes), (("--nproc_per_node", "--nproc-per-node"), nproc)]


_FALLBACK_VARIABLES = {
    "--nnodes": ("NNODES", "NUM_NODES"),
    "--num_nodes": ("NNODES", "NUM_NODES"),
    "--nproc_per_node": ("NPUS_PER_NODE", "GPUS_PER_NODE"),
    "--num_gpus": ("NPUS_PER_NODE", "GPUS_PER_NODE"),
    "--local_worker_num": ("NPUS_PER_NODE", "GPUS_PER_NODE"),
    "@NNODES": ("NNODES", "NUM_NODES"),
}
"""Variables that hold a count when the launcher has no flag for it (`@NNODES`: msrun's nodes)."""


def _cluster_edit(text: str, info: ScriptInfo, names: tuple[str, ...], value: int):
    """One edit making the launcher's count `value`, or None when it already is."""
    occurrence = next(
        (arg for arg in reversed(info.launch.launcher_args) if arg.name in names), None
    )
    if occurrence is not None:
        current = (occurrence.value_text or "").split(":")[-1]
        if current == str(value):
            return None
        return script_edit.value_edit(
            text, occurrence, str(value), info.expansion, prefer_assignment=True
        )
    for variable in _FALLBACK_VARIABLES.get(names[0], ()):
        assigned = info.expansion.variables.get(variable)
        if isinstance(assigned, Scalar) and assigned.segs:
            loc = script_edit.locate((assigned.segs,))
            current = "".join(seg.text for seg in assigned.segs).strip()
            if current == str(value):
                return None
            if loc is not None:
                return script_edit.Edit(loc.start, loc.end, str(value))
    if names[0].startswith("@"):
        return None
    launcher = _launcher_field(info) or info.launch.command.fields[0]
    return script_edit.insertion_after_field(launcher, [f"{names[0]} {value}"])


def _launcher_field(info: ScriptInfo):
    """The last launcher word (`torchrun`, or the module of `python -m ...`)."""
    fields = info.launch.command.fields
    for i, fld in enumerate(fields):
        text = "".join(seg.text for seg in fld)
        if text.rsplit("/", 1)[-1] in ("torchrun", "msrun", "deepspeed") or text in (
            "torch.distributed.launch",
            "torch.distributed.run",
        ):
            return fields[i]
    return None


@functools.lru_cache(maxsize=8)
def _read(text: str) -> ScriptInfo:
    """`read_script_text` once per text: the rows of a results folder share the script and its
    cluster edit, so each of those texts is read once, not once per row (issue 30)."""
    return read_script_text(text)


def apply_cluster(
    text: str, nnodes: int, nproc: int, read=read_script_text
) -> tuple[str, list[str]]:
    """Make the launcher's node and device counts the target's, one count at a time (`read`
    reads the script text back between edits)."""
    info = read(text)
    warnings: list[str] = []
    for names, value in _cluster_targets(info, nnodes, nproc):
        edit = _cluster_edit(text, info, names, value)
        if edit is not None:
            old = text[edit.start : edit.end]
            if old and not old.isdigit():
                line = text.count("\n", 0, edit.start) + 1
                warnings.append(
                    f"line {line}: the count {old} was computed by the script; "
                    f"replaced by {value} for {names[0].lstrip('@')}"
                )
            text = script_edit.apply_edits(text, [edit])
            info = read(text)
    return text, warnings


def with_header(text: str, header: Sequence[str]) -> str:
    """Put the header comment block right after the shebang, replacing an earlier tinker-opt block."""
    lines = text.splitlines(keepends=True)
    at = 1 if lines and lines[0].startswith("#!") else 0
    end = at
    while end < len(lines) and lines[end].startswith(HEADER_PREFIX):
        end += 1
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    if at == 1 and not lines[0].endswith("\n"):
        lines[0] += newline
    block = [HEADER_PREFIX + " ".join(str(h).split()) + newline for h in header]
    return "".join(lines[:at] + block + lines[end:])


def _checkpoint_warning(info: ScriptInfo, target: Strategy) -> list[str]:
    old = info.train.strategy
    if not info.train.loads_checkpoint or (old.tp, old.pp, old.ep) == (
        target.tp,
        target.pp,
        target.ep,
    ):
        return []
    return [
        f"the script loads a checkpoint (--load) saved with tp={old.tp} pp={old.pp} ep={old.ep}; "
        f"the new strategy uses tp={target.tp} pp={target.pp} ep={target.ep}: convert the "
        f"checkpoint first (convert_ckpt.py --target-tensor-parallel-size {target.tp} "
        f"--target-pipeline-parallel-size {target.pp}"
        + (f" --target-expert-parallel-size {target.ep})" if info.model.is_moe else ")")
    ]


def apply_strategy(
    text: str,
    strategy: Strategy,
    *,
    nnodes: int,
    nproc_per_node: int,
    version: str | None = None,
    header: Sequence[str] = (),
    precision: Mapping[str, Any] | None = None,
) -> AppliedScript:
    """The script text with `strategy` on `nnodes` x `nproc_per_node` devices, in `precision`
    (an Evaluation's: FP8 flags added for a row ranked in FP8, emit/precision_edit.py).

    `version` is the framework version (Tinker's 1.0, 1.1, 1.2, 1.0.0, 2.0.0, 2.3.0, ... or a
    Megatron core version); without it the script's own flags bound it and the writer is
    permissive. Raises StrategyError when the strategy breaks a rule or needs a missing flag.
    """
    info = _read(text)
    vr = versions.resolve(version, text, info.train.framework.flavour)
    target = expressible_strategy(strategy, info, vr, world=nnodes * nproc_per_node)
    tuned, warnings = apply_cluster(text, nnodes, nproc_per_node, read=_read)
    tuned_info = _read(tuned)
    tuned = script_edit.apply_edits(tuned, plan_strategy_edits(tuned, tuned_info, target, vr))
    tuned = with_header(apply_precision(tuned, precision), header)
    check = read_script_text(tuned)
    got = (check.train.strategy, check.train.nnodes, check.train.nproc_per_node)
    if got != (target, nnodes, nproc_per_node):
        raise ScriptError(
            f"the tuned script reads back as {got[0].label()} on {got[1]}x{got[2]} "
            f"devices instead of {target.label()} on {nnodes}x{nproc_per_node}; this "
            "script's layout is beyond the writer: set the flags by hand"
        )
    return AppliedScript(tuned, tuple(warnings + _checkpoint_warning(info, target)))


def write_script(
    path: str | os.PathLike, text: str, *, source: str | os.PathLike | None = None
) -> Path:
    """Write a tuned script atomically, executable like its source; never over the source itself."""
    target = Path(path)
    if source is not None:
        src = Path(source)
        same = target.exists() and src.exists() and os.path.samefile(target, src)
        if same or target.resolve() == src.resolve():
            raise ConfigError(
                f"the output {target} is the input script; give another output path "
                "(-o tuned.sh): the input is never overwritten"
            )
        mode = stat.S_IMODE(src.stat().st_mode) if src.exists() else 0o755
    else:
        mode = 0o755
    return write_text_atomic(target, text, mode=mode | stat.S_IRUSR | stat.S_IWUSR)
