"""NeMo's training output: `train_step_timing` (seconds per step) per logged step.

NeMo's exp_manager logs the step time as `train_step_timing` (NeMo PR #2936, "Experiment
manager step timing", in seconds). The console shows it in the progress bar
(`..., global_step=9.000, train_step_timing in s=0.645`) or in NeMo 2's plain lines
(`Training epoch 0, iteration 120/149 | ... | global_step: 120 | ... | train_step_timing in s:
0.03146`); both are read. A line without a step number takes the previous one plus one.
"""

from __future__ import annotations

import re

from tinker_opt.logs.record import Iteration, TrainingLog

_TIMING = re.compile(r"train_step_timing(?: in s)?\s*[:=]\s*([0-9.]+(?:[eE][-+]?\d+)?)")
_STEP = re.compile(r"global_step\s*[:=]\s*([0-9]+)(?:\.0+)?\b")


def looks_like(text: str) -> bool:
    return "train_step_timing" in text


def read_nemo_text(text: str, source: str) -> TrainingLog:
    """A TrainingLog of NeMo's console output (the last value printed for each step)."""
    by_step: dict[int, float] = {}
    step = 0
    # The progress bar redraws with carriage returns: every redraw is a line of its own.
    for line in re.split(r"[\r\n]+", text):
        timing = _TIMING.search(line)
        if timing is None:
            continue
        found = _STEP.search(line)
        step = int(found.group(1)) if found else step + 1
        by_step[step] = 1000.0 * float(timing.group(1))
    iterations = tuple(
        Iteration(iteration=s, time_ms=by_step[s], interval=1) for s in sorted(by_step)
    )
    return TrainingLog(source=source, form="nemo-text", iterations=iterations)
