"""Megatron-LM / MindSpeed-LLM stdout: the runs of a log file, each with its iteration records,
per-rank memory reports and argument dump (one line's forms: megatron_lines.py).

Runs: a log may hold several (a job restarted into the same file, logs pasted one after the
other). An argument dump after iteration lines, or an iteration number that does not grow,
starts a new run; a repeat of a record already read (the same iteration and time, as when two
copies of a log are interleaved) is skipped. The run read is the last complete one (two or more
iteration records: something is left after the start-up record) unless the caller names one
(`check --log-run N`); a warning names the runs by their lines and says which was read.

The argument block ends at its `end of arguments` line or at the first line that is not an
argument, whatever follows (an excerpt pasted into an issue, or a fork that prints no end line).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import pairwise

from tinker_opt.errors import LogError
from tinker_opt.logs import megatron_lines as lines_of
from tinker_opt.logs.record import Iteration, MemoryReport, TrainingLog

COMPLETE_RECORDS = 2
"""Iteration records a run needs to count as complete (the first is start-up: steady.py)."""
_SHOWN_CHARS = 100
"""Characters of a line quoted in a message."""


@dataclass
class _Run:
    """The lines of one run while reading (a log may hold several)."""

    first_line: int
    last_line: int = 0
    iterations: list[Iteration] = field(default_factory=list)
    memory: list[MemoryReport] = field(default_factory=list)
    arguments: dict[str, str] | None = None
    partial: int = 0
    stopped_at: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.iterations or self.memory or self.arguments)

    @property
    def complete(self) -> bool:
        return len(self.iterations) >= COMPLETE_RECORDS

    @property
    def span(self) -> str:
        return f"lines {self.first_line}-{self.last_line}"


def looks_like(text: str) -> bool:
    """Whether `text` holds Megatron-style iteration lines (NeMo's `iteration N/T |` lines carry
    `train_step_timing` instead of an elapsed time: nemo_text.py reads those)."""
    if "elapsed time per iteration (ms)" in text:
        return True
    return "train_step_timing" not in text and any(
        lines_of.has_iteration(line) for line in text.splitlines()
    )


def shown(number: int, line: str) -> str:
    """`line N: text` for a message (the text cut to a readable length)."""
    text = line.strip()
    cut = text[:_SHOWN_CHARS] + (" ..." if len(text) > _SHOWN_CHARS else "")
    return f"line {number}: {cut!r}"


def _read_arguments(lines: list[str], start: int) -> tuple[dict[str, str], int]:
    """The `name ... value` pairs after line `start`, and the index of the first line after the
    block (past its end line when it has one)."""
    arguments: dict[str, str] = {}
    index = start + 1
    while index < len(lines):
        pair = lines_of.argument(lines[index])
        if pair is None:
            return arguments, index + 1 if lines_of.is_args_end(lines[index]) else index
        arguments[pair[0]] = pair[1]
        index += 1
    return arguments, index


def _add_iterations(runs: list[_Run], line: str, number: int) -> None:
    """The iteration records of one line into the current run (a new run where they restart)."""
    run = runs[-1]
    previous = run.iterations[-1].iteration if run.iterations else None
    records, partial = lines_of.iterations(line, previous)
    run.partial += partial
    if partial and run.stopped_at is None:
        run.stopped_at = shown(number, line)
    for record in records:
        run = runs[-1]
        last = run.iterations[-1] if run.iterations else None
        if last is not None and record.iteration <= last.iteration:
            if any(
                r.iteration == record.iteration and r.time_ms == record.time_ms
                for r in run.iterations
            ):
                continue  # a copy of a record already read (interleaved copies of one log)
            run.last_line = number - 1
            runs.append(run := _Run(first_line=number))
        run.iterations.append(record)


def _runs(lines: list[str]) -> list[_Run]:
    """Split the lines into runs and read each."""
    runs, index = [_Run(first_line=1)], 0
    while index < len(lines):
        line, number = lines[index], index + 1
        if lines_of.is_args_begin(line):
            if not runs[-1].empty:
                runs[-1].last_line = index
                runs.append(_Run(first_line=number))
            runs[-1].arguments, index = _read_arguments(lines, index)
            continue
        if lines_of.has_iteration(line):
            _add_iterations(runs, line, number)
        runs[-1].memory.extend(lines_of.memory_reports(line))
        index += 1
    runs[-1].last_line = len(lines)
    return [run for run in runs if not run.empty]


def _pick(runs: list[_Run], wanted: int | None, source: str) -> tuple[int, str]:
    """(index of the run to read, why), the last complete one unless `wanted` (1-based)."""
    if wanted is not None:
        if not 1 <= wanted <= len(runs):
            raise LogError(
                f"{source} holds {len(runs)} run(s); --log-run {wanted} is not one of them "
                f"(1..{len(runs)})"
            )
        return wanted - 1, "as asked"
    complete = [i for i, run in enumerate(runs) if run.complete]
    if complete:
        return complete[-1], "the last complete one"
    with_times = [i for i, run in enumerate(runs) if run.iterations]
    if with_times:
        return with_times[-1], "the last with an iteration time (none is complete)"
    return len(runs) - 1, "the last (none has an iteration time)"


def _warnings(runs: list[_Run], chosen: int, why: str, source: str) -> list[str]:
    run, warnings = runs[chosen], []
    if len(runs) > 1:
        spans = ", ".join(f"{i + 1}: {r.span}" for i, r in enumerate(runs))
        warnings.append(
            f"{source} holds {len(runs)} runs ({spans}: a new argument dump or iteration numbers "
            f"that restart); run {chosen + 1} ({run.span}) is read, {why}; --log-run N reads "
            "another"
        )
    if run.partial:
        warnings.append(
            f"{source}: {run.partial} iteration line(s) without a whole time skipped (cut or "
            f"still being written; the first at {run.stopped_at})"
        )
    return warnings


def _with_log_interval(records: list[Iteration]) -> tuple[Iteration, ...]:
    """The records with the run's log interval (the commonest step between logged iterations:
    Megatron's --log-interval is fixed in a run), so that a pasted excerpt's gaps and its first
    line do not read as long intervals."""
    steps = [b.iteration - a.iteration for a, b in pairwise(records) if b.iteration > a.iteration]
    if not steps:
        return tuple(records)
    interval = Counter(steps).most_common(1)[0][0]
    return tuple(replace(record, interval=interval) for record in records)


def read_megatron_text(text: str, source: str, run: int | None = None) -> TrainingLog:
    """A TrainingLog of one run of `text` (Megatron-LM / MindSpeed-LLM stdout): the last
    complete run, or run number `run` (1-based) when given."""
    runs = _runs(text.splitlines()) or [_Run(first_line=1)]
    chosen, why = _pick(runs, run, source)
    picked = runs[chosen]
    return TrainingLog(
        source=source,
        form="megatron-text",
        iterations=_with_log_interval(picked.iterations),
        memory=tuple(picked.memory),
        arguments=picked.arguments,
        warnings=tuple(_warnings(runs, chosen, why, source)),
        stopped_at=picked.stopped_at,
    )
