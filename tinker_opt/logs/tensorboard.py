"""A TensorBoard event folder of a Megatron-LM run, read with the `tensorboard` package.

Megatron writes the scalars `iteration-time` (seconds, megatron/training/training.py
training_log), `mem-reserved-bytes`, `mem-allocated-bytes`, `mem-max-allocated-bytes` (with
--log-memory-to-tensorboard, from torch.cuda.memory_stats) and `throughput` (TFLOP/s/GPU, with
--log-throughput). The same scalars the CI golden values hold, so they are read into the same
form. `tensorboard` is an optional extra (`pip install 'tinker-opt[logs]'`), imported only here.
"""

from __future__ import annotations

from pathlib import Path

from tinker_opt.errors import LogError
from tinker_opt.logs.ci_json import read_megatron_ci
from tinker_opt.logs.record import TrainingLog

_TAGS = (
    "iteration-time",
    "mem-allocated-bytes",
    "mem-max-allocated-bytes",
    "mem-reserved-bytes",
    "mem-max-reserved-bytes",
)


def is_event_folder(path: Path) -> bool:
    return path.is_dir() and any(path.rglob("events.out.tfevents*"))


def _scalars(folder: Path) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} over every event file under `folder` (later files win a step)."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise LogError(
            f"{folder} is a TensorBoard folder; reading it needs the tensorboard package "
            "(pip install 'tinker-opt[logs]')"
        ) from None
    scalars: dict[str, dict[int, float]] = {}
    for events in sorted({p.parent for p in folder.rglob("events.out.tfevents*")}):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in set(accumulator.Tags().get("scalars", ())) & set(_TAGS):
            for event in accumulator.Scalars(tag):
                scalars.setdefault(tag, {})[int(event.step)] = float(event.value)
    return scalars


def read_tensorboard(folder: Path) -> TrainingLog:
    """A TrainingLog of the Megatron scalars in a TensorBoard folder."""
    scalars = _scalars(folder)
    if "iteration-time" not in scalars:
        raise LogError(
            f"{folder}: the TensorBoard events hold no 'iteration-time' scalar; Megatron writes "
            "it with --tensorboard-dir (and --log-timers-to-tensorboard)"
        )
    data = {
        tag: {"values": {str(k): v for k, v in steps.items()}} for tag, steps in scalars.items()
    }
    log = read_megatron_ci(data, str(folder))
    return TrainingLog(
        source=log.source, form="tensorboard", iterations=log.iterations, memory=log.memory
    )
