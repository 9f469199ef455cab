"""Megatron-LM / MindSpeed-LLM stdout: iteration lines, per-rank memory lines, the argument dump.

The line forms are those of megatron/training/training.py `training_log` (`iteration N/ T |
... | elapsed time per iteration (ms): X | throughput per GPU (TFLOP/s/GPU): Y | ... | number of
skipped iterations: S |`), megatron/training/utils.py `report_memory` (`[Rank R] (after N
iterations) memory (MB) | allocated: A | max allocated: B | reserved: C | max reserved: D`) and
megatron/training/arguments.py `_print_args` (the block between `---- arguments ----` and `----
end of arguments ----`, one `name ..... value` per line). MindSpeed-LLM prints the same lines
(it runs Megatron's training loop). A log may hold several runs (a job restarted into the same
file): each argument dump, or an iteration number that does not grow, starts a new run, and only
the last run is used, with a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tinker_opt.logs.record import Iteration, MemoryReport, TrainingLog

_ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+(?:[eE][-+]?\d+)?)")
_TFLOPS = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*([0-9.]+)")
_SKIPPED = re.compile(r"number of skipped iterations:\s*(\d+)")
_MEMORY = re.compile(
    r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\)((?:(?!\[Rank \d+\]).)*)"
)
"""One rank's memory report; the fields stop at the next `[Rank R]`, as ranks that print at the
same moment can share a line (their `print(..., flush=True)` calls interleave without the newline;
the KISTI core_r0.5.0 log has two reports on each of two lines)."""
_MEMORY_FIELD = re.compile(r"\|\s*(max allocated|allocated|max reserved|reserved):\s*([0-9.]+)")
_ARGS_BEGIN = re.compile(r"^-+ arguments -+\s*$")
_ARGS_END = re.compile(r"^-+ end of arguments -+\s*$")
_ARG_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*) \.+ ?(.*?)\s*$")
_MEMORY_KEYS = {
    "allocated": "allocated_mb",
    "max allocated": "max_allocated_mb",
    "reserved": "reserved_mb",
    "max reserved": "max_reserved_mb",
}


@dataclass
class _Run:
    """The lines of one run while reading (a log may hold several)."""

    iterations: list[Iteration] = field(default_factory=list)
    memory: list[MemoryReport] = field(default_factory=list)
    arguments: dict[str, str] | None = None
    partial: int = 0

    @property
    def empty(self) -> bool:
        return not (self.iterations or self.memory or self.arguments)


def looks_like(text: str) -> bool:
    """Whether `text` holds Megatron-style iteration lines."""
    return "elapsed time per iteration (ms)" in text


def _iteration(line: str, previous: int | None) -> Iteration | None:
    """The Iteration of one line, None when it has no iteration time (e.g. cut mid-line)."""
    number, elapsed = _ITERATION.search(line), _ELAPSED.search(line)
    if number is None or elapsed is None:
        return None
    iteration = int(number.group(1))
    tflops, skipped = _TFLOPS.search(line), _SKIPPED.search(line)
    return Iteration(
        iteration=iteration,
        time_ms=float(elapsed.group(1)),
        tflops_per_device=float(tflops.group(1)) if tflops else None,
        skipped=int(skipped.group(1)) if skipped else 0,
        interval=max(1, iteration - (previous or 0)),
    )


def _memory(match: re.Match) -> MemoryReport:
    values = {_MEMORY_KEYS[k]: float(v) for k, v in _MEMORY_FIELD.findall(match.group(3))}
    return MemoryReport(rank=int(match.group(1)), after_iterations=int(match.group(2)), **values)


def _read_arguments(lines: list[str], start: int) -> tuple[dict[str, str], int]:
    """The `name ... value` pairs after line `start`, and the index of the end line."""
    arguments: dict[str, str] = {}
    index = start + 1
    while index < len(lines) and not _ARGS_END.match(lines[index].strip()):
        match = _ARG_LINE.match(lines[index])
        if match:
            arguments[match.group(1)] = match.group(2)
        index += 1
    return arguments, index


def _runs(lines: list[str]) -> list[_Run]:
    """Split the lines into runs and read each."""
    runs, index = [_Run()], 0
    while index < len(lines):
        line = lines[index]
        run = runs[-1]
        if _ARGS_BEGIN.match(line.strip()):
            if not run.empty:
                runs.append(run := _Run())
            run.arguments, index = _read_arguments(lines, index)
        elif "iteration" in line and _ITERATION.search(line):
            previous = run.iterations[-1].iteration if run.iterations else None
            item = _iteration(line, previous)
            if item is None:
                run.partial += 1
            elif previous is not None and item.iteration <= previous:
                runs.append(run := _Run())
                run.iterations.append(item)
            else:
                run.iterations.append(item)
        elif reports := list(_MEMORY.finditer(line)):
            run.memory.extend(_memory(report) for report in reports)
        index += 1
    return [run for run in runs if not run.empty]


def read_megatron_text(text: str, source: str) -> TrainingLog:
    """A TrainingLog of the last run in `text` (Megatron-LM / MindSpeed-LLM stdout)."""
    runs = _runs(text.splitlines()) or [_Run()]
    run, warnings = runs[-1], []
    if len(runs) > 1:
        warnings.append(
            f"{source} holds {len(runs)} runs (a new argument dump or iteration numbers that "
            f"restart); only the last one is used"
        )
    if run.partial:
        warnings.append(
            f"{source}: {run.partial} iteration line(s) without a time skipped (cut or still "
            "being written)"
        )
    return TrainingLog(
        source=source,
        form="megatron-text",
        iterations=tuple(run.iterations),
        memory=tuple(run.memory),
        arguments=run.arguments,
        warnings=tuple(warnings),
    )
