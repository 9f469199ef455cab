"""Source edits on a launch script: locate an argument through its provenance, change it, remove
it, or add flags next to it, touching only the bytes that hold it.

An argument on the launch line may have come through several variables (`$GPT_ARGS` holds
`--tensor-model-parallel-size ${TP}`, and `TP=8`). Its *level* is how many references deep its
text sits; the writer edits at the deepest level where the whole argument is literal source text,
or one level up (the reference itself) when that variable is shared with other uses.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tinker_opt.errors import ScriptError
from tinker_opt.script.expand import Expansion, Field, Ref, Scalar, Seg, field_text
from tinker_opt.script.launch import ArgOccurrence


@dataclass(frozen=True)
class Edit:
    """Replace text[start:end] with `text`."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Location:
    """Where some fields sit in the source, at one level of references."""

    start: int
    end: int
    path: tuple[Ref, ...]
    """The references leading to this level (empty: the command line itself)."""

    @property
    def variable(self) -> str | None:
        """The variable whose assignment holds this text, None on the command line."""
        return self.path[-1].name if self.path else None


def _common_path(segs: Sequence[Seg]) -> tuple[Ref, ...]:
    prefix = segs[0].path
    for seg in segs[1:]:
        n = 0
        while n < min(len(prefix), len(seg.path)) and prefix[n] == seg.path[n]:
            n += 1
        prefix = prefix[:n]
    return prefix


def locate(fields: Sequence[Field]) -> Location | None:
    """The source range of the fields at the deepest level where all of them are located."""
    segs = [seg for fld in fields for seg in fld if seg.text or seg.start is not None]
    if not segs:
        return None
    path = _common_path(segs)
    while True:
        depth = len(path)
        spans: list[tuple[int, int] | None] = []
        for seg in segs:
            if len(seg.path) > depth:
                ref = seg.path[depth]
                spans.append((ref.start, ref.end))
            elif seg.start is not None and seg.end is not None and seg.exact:
                spans.append((seg.start, seg.end))
            else:
                spans.append(None)
        located = [span for span in spans if span is not None]
        if len(located) == len(spans):
            return Location(min(s for s, _ in located), max(e for _, e in located), path)
        if not path:
            return None
        ref = path[-1]
        path = path[:-1]
        segs = [Seg(ref.name, ref.start, ref.end, path)]


def value_location(
    fields: Sequence[Field], expansion: Expansion, *, prefer_assignment: bool
) -> Location | None:
    """Where to write a new value: the assignment of a variable used only here, else the reference."""
    loc = locate(fields)
    if loc is None or prefer_assignment or loc.variable is None:
        return loc
    name = loc.variable
    value = expansion.variables.get(name)
    whole = isinstance(value, Scalar) and "".join(s.text for s in value.segs).strip() == "".join(
        field_text(f) for f in fields
    )
    if whole and expansion.ref_counts.get(name, 0) > 1:
        ref = loc.path[-1]
        return Location(ref.start, ref.end, loc.path[:-1])
    return loc


def _with_quotes(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen [start, end) over the quotes that belong to it: `--pp "$PP"` located as `--pp "$PP`
    (the reference's span) takes its closing quote, `"$PP"` both. Edits next to the range then
    never land inside a quoted word."""
    for quote in "\"'":
        inside = text[start:end].count(quote)
        before = start > 0 and text[start - 1] == quote
        after = text[end : end + 1] == quote
        if inside % 2 and after:
            end += 1
        elif inside % 2 and before:
            start -= 1
        elif not inside and before and after:
            start, end = start - 1, end + 1
    return start, end


def _line_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    return line_start, (len(text) if line_end < 0 else line_end)


def _unset_references_after(text: str, end: int, expansion: Expansion | None) -> int:
    """Extend past `${UNSET}` references right after a valueless flag (they were its value)."""
    while expansion is not None:
        match = re.match(r"[ \t]+\$\{?([A-Za-z_]\w*)\}?", text[end:])
        if not match or match.group(1) in expansion.variables:
            break
        end += match.end()
    return end


def removal(text: str, occurrence: ArgOccurrence, expansion: Expansion | None = None) -> Edit:
    """Remove a flag and its values; the whole line when nothing else is on it."""
    loc = locate((occurrence.flag,) + occurrence.values)
    if loc is None:
        raise ScriptError(
            f"cannot remove {occurrence.name}: its text is computed by the script; "
            "remove it by hand"
        )
    if not occurrence.values:
        loc = Location(loc.start, _unset_references_after(text, loc.end, expansion), loc.path)
    loc = Location(*_with_quotes(text, loc.start, loc.end), loc.path)
    line_start, line_end = _line_bounds(text, loc.start, loc.end)
    before, after = text[line_start : loc.start], text[loc.end : line_end]
    continued = after.strip() == "\\"
    if not before.strip() and (continued or (not after.strip() and loc.path)):
        return Edit(line_start, min(line_end + 1, len(text)), "")
    start = loc.start
    while start > line_start and text[start - 1] in " \t":
        start -= 1
    if start == line_start:  # first on its line: take the blanks after it instead
        end = loc.end
        while end < line_end and text[end] in " \t":
            end += 1
        return Edit(loc.start, end, "")
    return Edit(start, loc.end, "")


def value_edit(
    text: str,
    occurrence: ArgOccurrence,
    new_value: str,
    expansion: Expansion,
    *,
    prefer_assignment: bool = False,
) -> Edit | None:
    """Set the occurrence's value (its first value field); None when it already has it."""
    if occurrence.values and occurrence.value_text == new_value:
        return None
    if not occurrence.values:  # e.g. `--flag ${UNSET}`: give the flag its value right after it
        loc = locate((occurrence.flag,))
        if loc is None:
            raise ScriptError(
                f"cannot give {occurrence.name} a value: it is computed by the script"
            )
        return Edit(loc.end, loc.end, " " + new_value)
    loc = value_location(occurrence.values[:1], expansion, prefer_assignment=prefer_assignment)
    if loc is None:
        raise ScriptError(
            f"cannot change the value of {occurrence.name}: it is computed by the "
            "script; set it by hand"
        )
    return Edit(loc.start, loc.end, new_value)


def insertion(text: str, anchor: ArgOccurrence, flags: Sequence[str]) -> Edit:
    """Add `flags` (each "--flag [value]") right after the anchor argument, in its style."""
    loc = locate((anchor.flag,) + anchor.values)
    if loc is None:
        raise ScriptError(
            f"cannot place new flags next to {anchor.name}: it is computed by the script"
        )
    loc = Location(*_with_quotes(text, loc.start, loc.end), loc.path)
    line_start, line_end = _line_bounds(text, loc.start, loc.end)
    rest = text[loc.end : line_end].strip()
    line = text[line_start:line_end]
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    own_line = not text[line_start : loc.start].strip()
    newline = "\r\n" if line.endswith("\r") else "\n"
    if own_line and rest == "\\":
        block = "".join(f"{indent}{flag} \\{newline}" for flag in flags)
        return Edit(line_end + 1, line_end + 1, block)
    if own_line and loc.path and (not rest or rest.startswith("#")):
        block = "".join(f"{indent}{flag}{newline}" for flag in flags)
        return Edit(line_end + 1, line_end + 1, block)
    return Edit(loc.end, loc.end, "".join(" " + flag for flag in flags))


def insertion_after_field(fld: Field, flags: Sequence[str]) -> Edit:
    """Add flags inline right after a field (the launcher or entry word)."""
    loc = locate((fld,))
    if loc is None:
        raise ScriptError(
            "cannot find where to add flags on the launch line; add them by hand: "
            + " ".join(flags)
        )
    return Edit(loc.end, loc.end, "".join(" " + flag for flag in flags))


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping edits (identical duplicates are merged)."""
    unique: list[Edit] = []
    for edit in sorted(dict.fromkeys(edits), key=lambda e: (e.start, e.end)):
        last = unique[-1] if unique else None
        if last and edit.start < last.end and not edit.text and not last.text:
            unique[-1] = Edit(last.start, max(last.end, edit.end), "")  # overlapping deletions
        else:
            unique.append(edit)
    for first, second in itertools.pairwise(unique):
        if second.start < first.end:
            raise ScriptError(
                f"conflicting edits at offset {second.start} of the script; "
                "two strategy flags share one piece of text: edit them by hand"
            )
    out = text
    for edit in reversed(unique):
        out = out[: edit.start] + edit.text + out[edit.end :]
    return out
