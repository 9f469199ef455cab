"""Finding the training launch in an expanded script, and its arguments.

The launch is the first command run by `torchrun`, `python -m torch.distributed.launch|run`,
`msrun` or `deepspeed` (after optional `nohup`/`exec`/`env` prefixes) whose entry is a training
script; commented-out launches are comments and never seen. Arguments are read the way argparse
reads them for these scripts: `--flag value...`, `--flag=value`, switches, repeated flags (the
last one wins), negative numbers as values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tinker_opt.errors import ScriptError
from tinker_opt.script.expand import ExecutedCommand, Expansion, Field, field_text

_PREFIXES = {"nohup", "exec", "env", "time", "stdbuf", "numactl"}
_TRAIN_ENTRY_RE = re.compile(
    r"(train|tune|sft|dpo|rlhf|grpo|ppo|finetune|pretrain|postrain)\w*\.py$"
)
_FLAG_RE = re.compile(r"^(--[A-Za-z_][\w.\-]*|-[A-Za-z][\w\-]*)(=.*)?$", re.S)


@dataclass(frozen=True)
class ArgOccurrence:
    """One `--flag [values]` on the command line; `flag` is the field (or its part before '=')."""

    name: str
    flag: Field
    values: tuple[Field, ...]

    @property
    def value_text(self) -> str | None:
        """The first value's text, None for a switch or a flag left without a value."""
        return field_text(self.values[0]) if self.values else None


@dataclass(frozen=True)
class Launch:
    """The training launch: launcher, its own arguments, entry script and training arguments."""

    command: ExecutedCommand
    launcher: str
    """torchrun | torch.distributed.launch | torch.distributed.run | msrun | deepspeed."""
    launcher_args: tuple[ArgOccurrence, ...]
    entry: Field
    entry_source: str
    """The entry word as written (e.g. `$basepath/pretrain_gpt.py`)."""
    positionals: tuple[Field, ...]
    args: tuple[ArgOccurrence, ...]

    def occurrences(self, name: str) -> list[ArgOccurrence]:
        return [arg for arg in self.args if arg.name == name]

    def last(self, name: str) -> ArgOccurrence | None:
        found = self.occurrences(name)
        return found[-1] if found else None

    def has(self, name: str) -> bool:
        return any(arg.name == name for arg in self.args)

    def value(self, name: str) -> str | None:
        """Text of the winning (last) occurrence's first value."""
        arg = self.last(name)
        return arg.value_text if arg else None

    def launcher_value(self, *names: str) -> str | None:
        for arg in reversed(self.launcher_args):
            if arg.name in names:
                return arg.value_text
        return None


def split_field(fld: Field, index: int) -> tuple[Field, Field]:
    """Cut a field at character `index` of its text, keeping each piece's provenance."""
    head, tail = [], []
    offset = 0
    for seg in fld:
        n = len(seg.text)
        if offset + n <= index:
            head.append(seg)
        elif offset >= index:
            tail.append(seg)
        else:
            head.append(seg.sub(0, index - offset))
            tail.append(seg.sub(index - offset, n))
        offset += n
    return tuple(head), tuple(tail)


def is_flag(text: str) -> bool:
    return bool(_FLAG_RE.match(text)) and not re.fullmatch(r"-\d+(\.\d*)?([eE][-+]?\d+)?", text)


def parse_arguments(
    fields: tuple[Field, ...],
) -> tuple[tuple[Field, ...], tuple[ArgOccurrence, ...]]:
    """Positional fields before the first flag, then the flag occurrences in order."""
    positionals: list[Field] = []
    args: list[ArgOccurrence] = []
    name: str | None = None
    flag: Field = ()
    values: list[Field] = []
    for fld in fields:
        text = field_text(fld)
        if is_flag(text):
            if name is not None:
                args.append(ArgOccurrence(name, flag, tuple(values)))
            name, flag, values = text, fld, []
            if text.startswith("--") and "=" in text:
                cut = text.index("=")
                flag, value = split_field(fld, cut)
                _, value = split_field(value, 1)
                name, values = text[:cut], [value]
        elif name is None:
            positionals.append(fld)
        else:
            values.append(fld)
    if name is not None:
        args.append(ArgOccurrence(name, flag, tuple(values)))
    return tuple(positionals), tuple(args)


def _launcher(fields: tuple[Field, ...]) -> tuple[str, int] | None:
    """(launcher kind, index of the first field after the launcher words) or None."""
    i = 0
    while i < len(fields) and (
        field_text(fields[i]) in _PREFIXES or re.match(r"^[A-Za-z_]\w*=", field_text(fields[i]))
    ):
        i += 1
    if i >= len(fields):
        return None
    head = field_text(fields[i]).rsplit("/", 1)[-1]
    if head in ("torchrun", "msrun", "deepspeed"):
        return head, i + 1
    if re.fullmatch(r"python[\d.]*", head):
        rest = [field_text(f) for f in fields[i + 1 : i + 3]]
        if (
            len(rest) == 2
            and rest[0] == "-m"
            and rest[1] in ("torch.distributed.launch", "torch.distributed.run")
        ):
            return rest[1], i + 3
    return None


def _build(command: ExecutedCommand, kind: str, start: int, text: str) -> Launch | None:
    fields = command.fields
    for j in range(start, len(fields)):
        if field_text(fields[j]).endswith(".py"):
            _, launcher_args = parse_arguments(fields[start:j])
            positionals, args = parse_arguments(fields[j + 1 :])
            entry_source = _entry_source(command, fields[j], text)
            return Launch(command, kind, launcher_args, fields[j], entry_source, positionals, args)
    return None


def _entry_source(command: ExecutedCommand, entry: Field, text: str) -> str:
    """The source text of the word that produced the entry field."""
    anchor = entry[0].path[0].start if entry[0].path else entry[0].start
    for word in command.command.words:
        if anchor is not None and word.start <= anchor < word.end:
            return text[word.start : word.end]
    return field_text(entry)


def find_launch(expansion: Expansion) -> Launch:
    """The training launch of the script; ScriptError when there is none."""
    launches: list[Launch] = []
    for command in expansion.commands:
        found = _launcher(command.fields)
        if found:
            launch = _build(command, found[0], found[1], expansion.text)
            if launch is not None:
                launches.append(launch)
    if not launches:
        raise ScriptError(
            "no training launch found: the script needs a torchrun, python -m "
            "torch.distributed.launch, msrun or deepspeed line with an entry script such as "
            "pretrain_gpt.py; add one (or uncomment it)"
        )
    for launch in launches:
        if _TRAIN_ENTRY_RE.search(field_text(launch.entry).rsplit("/", 1)[-1]):
            return launch
    return launches[0]
