"""Training logs: read every form users have into one `TrainingLog` (record.py).

One module per form: megatron_text (Megatron-LM / MindSpeed-LLM stdout), nemo_text (NeMo's
train_step_timing), ci_json (Megatron-LM and MindSpeed-LLM CI metrics), tensorboard (an event
folder). `read_log` finds the form; steady.py picks the steady-state iterations; arguments.py
turns an argument dump into a launch line the script reader understands.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from tinker_opt.errors import LogError
from tinker_opt.logs import megatron_text, nemo_text
from tinker_opt.logs.ci_json import (
    is_megatron_ci,
    is_mindspeed_ci,
    read_megatron_ci,
    read_mindspeed_ci,
)
from tinker_opt.logs.record import Iteration, MemoryReport, TrainingLog
from tinker_opt.logs.steady import SteadyState, steady_state
from tinker_opt.logs.tensorboard import is_event_folder, read_tensorboard

__all__ = [
    "Iteration",
    "MemoryReport",
    "SteadyState",
    "TrainingLog",
    "read_log",
    "steady_state",
]

FORMS = "Megatron-LM / MindSpeed-LLM stdout, NeMo stdout, a TensorBoard folder, CI metrics JSON"


def _read_json(text: str, source: str) -> TrainingLog:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LogError(
            f"{source} looks like JSON but does not parse ({exc.msg} at line {exc.lineno}); "
            "a metrics file cut while being written?"
        ) from None
    if is_megatron_ci(data):
        return read_megatron_ci(data, source)
    if is_mindspeed_ci(data):
        return read_mindspeed_ci(data, source)
    raise LogError(
        f"{source} is JSON but neither a Megatron-LM CI metrics file ('iteration-time') nor a "
        "MindSpeed-LLM CI baseline ('time info')"
    )


GZIP_MAGIC = b"\x1f\x8b"


def _read_text(path: Path) -> str:
    """The file's text: gzip-compressed or not (by its magic bytes, whatever its name), any
    line ends (str.splitlines reads \\r\\n and \\r), undecodable bytes replaced."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LogError(f"cannot read log {path}: {exc.strerror}") from None
    if data.startswith(GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            # A compressed log cut while being written: keep what decompresses.
            data = _gunzip_prefix(data, path, exc)
    return data.decode("utf-8-sig", errors="replace")


def _gunzip_prefix(data: bytes, path: Path, exc: Exception) -> bytes:
    """What a cut gzip stream decompresses to; a LogError when nothing does."""
    try:
        text = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
    except zlib.error:
        text = b""
    if not text:
        raise LogError(f"log {path} is gzip-compressed but does not decompress ({exc})")
    return text


def read_log(path: str | Path, run: int | None = None) -> TrainingLog:
    """The training log at `path` in whichever form it is; a LogError when it is none of them.
    `run`: which run of a text log holding several (1-based; default the last complete one)."""
    path = Path(path)
    if not path.exists():
        raise LogError(f"log {path} not found; pass a training log file or TensorBoard folder")
    if path.is_dir():
        if is_event_folder(path):
            return read_tensorboard(path)
        raise LogError(f"{path} is a folder without TensorBoard event files; pass the log file")
    if path.name.startswith("events.out.tfevents"):
        return read_tensorboard(path.parent)
    text, source = _read_text(path), str(path)
    if text.lstrip().startswith("{"):
        return _read_json(text, source)
    if megatron_text.looks_like(text):
        return megatron_text.read_megatron_text(text, source, run)
    if nemo_text.looks_like(text):
        return nemo_text.read_nemo_text(text, source)
    raise LogError(f"{path} is not a training log: no iteration times found (forms: {FORMS})")
