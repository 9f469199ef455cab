"""One line of Megatron-LM / MindSpeed-LLM stdout: its iteration records, memory reports, and
whether it belongs to the argument dump.

The forms are those of megatron/training/training.py `training_log` (`iteration N/ T | ... |
elapsed time per iteration (ms): X | throughput per GPU (TFLOP/s/GPU): Y | ... | number of
skipped iterations: S |`, every field closed by ` |`), ROCm/Megatron-LM's `training_log` (the
same line with ` mem usages: F |` after the elapsed time: 1 - free / total device memory from
torch.cuda.mem_get_info), megatron/training/utils.py `report_memory` (`[Rank R] (after N
iterations) memory (MB) | allocated: A | max allocated: B | reserved: C | max reserved: D`, the
last field without a closing bar) and megatron/training/arguments.py `_print_args` (`  name
..... value` lines between `---- arguments ----` and `---- end of arguments ----`); MindSpeed-LLM
FSDP2 prints the Megatron iteration line behind `INFO [date] >>` with two decimals and its
memory peaks in GB on it (`max_memory_allocated(GB): X | max_memory_reserved(GB): Y |`).

Lines as users have them: with a `[date time]` stamp (newer Megatron-LM prints one before
`iteration`), with a launcher's prefix (`0:` from `srun -l`, `[default0]:` from torchrun
`--tee`, `[rank0]:`), cut at either end (a pasted excerpt, a log still being written), or with
two ranks' prints glued on one line (their `print(..., flush=True)` calls interleave without the
newline). A value is read only where its closing ` |` shows it is whole (the last memory field,
`max reserved`, has none: it is whole at the end of the line), so a line cut inside a number
never yields a shorter number.
"""

from __future__ import annotations

import re

from tinker_opt.logs.record import Iteration, MemoryReport

_NUMBER = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?\d+)?)"
_ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*" + _NUMBER + r"\s*\|")
_TFLOPS = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*" + _NUMBER + r"\s*\|")
_SKIPPED = re.compile(r"number of skipped iterations:\s*(\d+)\s*\|")
_MEM_USAGE = re.compile(r"mem usages:\s*" + _NUMBER + r"\s*\|")
_MEMORY = re.compile(
    r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\)((?:(?!\[Rank \d+\]).)*)"
)
"""One rank's memory report; the fields stop at the next `[Rank R]` (reports that share a line;
the KISTI core_r0.5.0 log has two reports on each of two lines)."""
_MEMORY_FIELD = re.compile(
    r"\|\s*(max allocated|allocated|max reserved|reserved):\s*" + _NUMBER + r"(?=(\s*\||\s*$))"
)
_FSDP2_MEMORY = re.compile(r"max_memory_(allocated|reserved)\(GB\):\s*" + _NUMBER + r"\s*\|")
"""MindSpeed-LLM FSDP2's fields on the iteration line (`max_memory_allocated(GB): 19.07 |`, the
historical peak, max over all ranks: mindspeed_llm fsdp2 training monitor, GB = 2**30 bytes)."""
_MEMORY_KEYS = {
    "allocated": "allocated_mb",
    "max allocated": "max_allocated_mb",
    "reserved": "reserved_mb",
    "max reserved": "max_reserved_mb",
}
_LAST_MEMORY_FIELD = "max reserved"
"""report_memory's last field: the only one whose value may end the line."""
_PREFIX = re.compile(r"^\s*(?:(?:\[[^\]\n]*\]:?|[A-Za-z_.-]*\d+:)\s*){1,3}")
"""Up to three launcher / time prefixes: `[2024-04-06 02:58:18]`, `[default0]:`, `0:`, `node3:`."""
_ARGS_BEGIN = re.compile(r"-{3,} arguments -{3,}")
_ARGS_END = re.compile(r"-{3,} end of arguments -{3,}")
_ARG_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*) \.{2,} ?(.*?)\s*$")


def unprefixed(line: str) -> str:
    """The line without its time stamp or launcher prefixes."""
    return _PREFIX.sub("", line, count=1).strip()


def is_args_begin(line: str) -> bool:
    """`---- arguments ----` (not its end line), with or without a prefix."""
    return bool(_ARGS_BEGIN.search(line)) and not _ARGS_END.search(line)


def is_args_end(line: str) -> bool:
    return bool(_ARGS_END.search(line))


def argument(line: str) -> tuple[str, str] | None:
    """(name, value) of a `  name ...... value` line of the dump, None for any other line."""
    match = _ARG_LINE.match(unprefixed(line))
    return (match.group(1), match.group(2)) if match else None


def has_iteration(line: str) -> bool:
    """Whether the line holds an `iteration N/ T |` field (whole or not)."""
    return "iteration" in line and _ITERATION.search(line) is not None


def _record(segment: str, number: int, previous: int | None) -> Iteration | None:
    """The Iteration of one `iteration N/ T | ...` segment, None without a whole time."""
    elapsed = _ELAPSED.search(segment)
    if elapsed is None:
        return None
    tflops, skipped = _TFLOPS.search(segment), _SKIPPED.search(segment)
    usage = _MEM_USAGE.search(segment)
    return Iteration(
        iteration=number,
        time_ms=float(elapsed.group(1)),
        tflops_per_device=float(tflops.group(1)) if tflops else None,
        skipped=int(skipped.group(1)) if skipped else 0,
        interval=max(1, number - (previous or 0)),
        memory_used_fraction=float(usage.group(1)) if usage else None,
    )


def iterations(line: str, previous: int | None) -> tuple[list[Iteration], int]:
    """The iteration records of one line (two when two prints are glued) and how many
    `iteration N/ T |` fields on it have no whole time (cut, or still being written)."""
    starts = list(_ITERATION.finditer(line))
    records: list[Iteration] = []
    partial = 0
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(line)
        record = _record(line[match.start() : end], int(match.group(1)), previous)
        if record is None:
            partial += 1
            continue
        records.append(record)
        previous = record.iteration
    return records, partial


def _memory(match: re.Match) -> MemoryReport:
    values: dict[str, float] = {}
    for key, value, closer in _MEMORY_FIELD.findall(match.group(3)):
        if "|" in closer or key == _LAST_MEMORY_FIELD:
            values[_MEMORY_KEYS[key]] = float(value)
    return MemoryReport(rank=int(match.group(1)), after_iterations=int(match.group(2)), **values)


def _fsdp2_memory(line: str) -> list[MemoryReport]:
    """The FSDP2 iteration line's peaks as one report of no named rank (the max over ranks)."""
    fields = {kind: float(value) * 1024 for kind, value in _FSDP2_MEMORY.findall(line)}
    number = _ITERATION.search(line)
    if not fields or number is None:
        return []
    return [
        MemoryReport(
            rank=None,
            after_iterations=int(number.group(1)),
            max_allocated_mb=fields.get("allocated"),
            max_reserved_mb=fields.get("reserved"),
        )
    ]


def memory_reports(line: str) -> list[MemoryReport]:
    """Every rank's memory report on the line (several where prints are glued), and the peaks
    MindSpeed-LLM FSDP2 prints on its iteration lines."""
    if "max_memory_" in line:
        return _fsdp2_memory(line)
    if "memory (MB)" not in line:
        return []
    return [_memory(match) for match in _MEMORY.finditer(line)]
