"""The extent scanners of the bash lexer (shell.py): where a backquote, `$((...))`, a bracketed
`$(...)` / `${...}` (quotes and heredocs inside skipped) or a heredoc body ends, and `$'...'`
decoded. Pure functions of the text and an offset; each raises ShellSyntaxError naming the line
of what is left open."""

from __future__ import annotations

import re

from tinker_opt.script.words import Lit

_HEREDOC_RE = re.compile(r"<<(?P<dash>-?)[ \t]*(?P<q>['\"]?)(?P<word>[A-Za-z_][\w.-]*)(?P=q)")
_ANSI_C_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "e": "\x1b",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
}


class ShellSyntaxError(ValueError):
    """The text is not bash this lexer can follow (unterminated quote, ...)."""


def backquote_end(text: str, pos: int) -> int:
    i = pos + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "`":
            return i + 1
        i += 1
    raise ShellSyntaxError(f"unterminated backquote at line {text.count(chr(10), 0, pos) + 1}")


def ansi_c_quoted(text: str, pos: int) -> Lit:
    """`$'...'` at pos: backslash escapes (`\\'` included) are decoded, the rest is literal."""
    out: list[str] = []
    i = pos + 2
    while i < len(text) and text[i] != "'":
        if text[i] == "\\" and i + 1 < len(text):
            out.append(_ANSI_C_ESCAPES.get(text[i + 1], "\\" + text[i + 1]))
            i += 2
        else:
            out.append(text[i])
            i += 1
    if i >= len(text):
        raise ShellSyntaxError(f"unterminated $' quote at line {text.count(chr(10), 0, pos) + 1}")
    return Lit("".join(out), pos + 2, i, True)


def arith_end(text: str, pos: int) -> int:
    depth = 0
    i = pos + 3
    while i < len(text):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0 and text[i + 1 : i + 2] == ")":
                return i + 2
            depth -= 1
        i += 1
    raise ShellSyntaxError(f"unterminated $(( at line {text.count(chr(10), 0, pos) + 1}")


def matching(text: str, open_pos: int, opener: str, closer: str) -> int:
    """Offset just past the `closer` matching text[open_pos], skipping quotes."""
    depth = 0
    i = open_pos
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "'" and opener == "(":
            i = text.find("'", i + 1) + 1 or len(text)
            continue
        if ch == "<" and opener == "(" and _HEREDOC_RE.match(text, i):
            i = past_heredoc_body(text, i)
            continue
        if ch == opener:
            depth += 1
        elif ch == closer:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    line = text.count("\n", 0, open_pos) + 1
    raise ShellSyntaxError(f"unterminated ${opener} at line {line}")


def past_heredoc_body(text: str, pos: int) -> int:
    """For a heredoc opened at pos inside `$(...)`: the offset after its body's last line."""
    match = _HEREDOC_RE.match(text, pos)
    assert match is not None, "called where a heredoc opens (matching)"
    delimiter, strip_tabs = match.group("word"), bool(match.group("dash"))
    line_end = text.find("\n", match.end())
    while line_end >= 0:
        start = line_end + 1
        line_end = text.find("\n", start)
        line = text[start : len(text) if line_end < 0 else line_end].rstrip("\r")
        if (line.lstrip("\t") if strip_tabs else line) == delimiter:
            return len(text) if line_end < 0 else line_end
    return len(text)
