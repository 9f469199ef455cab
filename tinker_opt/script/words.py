"""The words of a bash script as the lexer (`shell.py`) finds them, and what can be read off a word.

A `Word` is made of parts (`Lit`, `Param`, `Arith`, `CmdSub`) that remember their span in the
source, so the writer can later change one argument and keep every other byte; a `Command` is one
simple command's words. The helpers read a word without expanding it: is it an assignment, which
variables does it reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ASSIGN_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?=)")


@dataclass(frozen=True)
class Lit:
    """Literal text; `text == source[start:end]` unless it came from an escape (`\\$`)."""

    text: str
    start: int
    end: int
    quoted: bool


@dataclass(frozen=True)
class Param:
    """A parameter expansion `$NAME` or `${...}` at source span [start, end)."""

    name: str
    start: int
    end: int
    quoted: bool
    op: str = ""
    """'' plain; ':-' '-' ':=' '=' ':+' '+' ':?' '?' with `arg`; 'len' for ${#V}; 'keys' for ${!A[@]};
    'other' for pattern operators (read as the plain value)."""
    index: str | None = None
    arg: tuple = ()


@dataclass(frozen=True)
class Arith:
    """`$((expr))`; evaluated at expansion time."""

    expr: str
    start: int
    end: int
    quoted: bool


@dataclass(frozen=True)
class CmdSub:
    """`$(...)` or a backquoted command: recognised, never run (expands to nothing)."""

    start: int
    end: int
    quoted: bool


@dataclass(frozen=True)
class Word:
    """One shell word: its parts, its source span, and for `NAME=( ... )` the array elements."""

    parts: tuple
    start: int
    end: int
    array: tuple[Word, ...] | None = None

    def literal_text(self) -> str | None:
        """The word's text when it is made of literals only (keywords, launcher names)."""
        if not all(isinstance(p, Lit) for p in self.parts):
            return None
        return "".join(p.text for p in self.parts)


@dataclass(frozen=True)
class Command:
    """One simple command: its words, in order, and the source line where it starts."""

    words: tuple[Word, ...]
    line: int


def split_assignment(word: Word) -> tuple[str, str, tuple] | None:
    """`(name, op, value_parts)` when the word is `NAME=value` / `NAME+=value`, else None."""
    if not word.parts or not isinstance(word.parts[0], Lit) or word.parts[0].quoted:
        return None
    first = word.parts[0]
    match = _ASSIGN_RE.match(first.text)
    if not match:
        return None
    cut = match.end()
    rest = first.text[cut:]
    head = (Lit(rest, first.start + cut, first.end, False),) if rest else ()
    return match.group(1), match.group(2), head + word.parts[1:]


def iter_params(parts: tuple):
    """Every Param in the parts, including those nested in `${V:-...}` defaults."""
    for part in parts:
        if isinstance(part, Param):
            yield part
            yield from iter_params(part.arg)


def arith_names(expr: str) -> list[str]:
    """Variable names an arithmetic expression reads (`$V`, `${V}` or bare `V`)."""
    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expr)
