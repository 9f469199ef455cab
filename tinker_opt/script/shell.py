"""A bash lexer for launch scripts: words and simple commands with source offsets, nothing executed.

Launch scripts are bash programs, but only a small part of bash matters for reading them:
assignments (scalars, arrays, `export`), parameter expansion (`$V`, `${V}`, `${V:-d}`,
`${A[@]}`, `${#A[@]}`), `$((...))`, quotes, backslash continuations, comments and heredocs.
This module turns the text into `Command`s made of `Word`s whose parts remember where they
sit in the source (the word types are in `words.py`), so the writer can later change one
argument and keep every other byte. Command substitutions are recognised (their extent) but never
run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tinker_opt.script.shell_scan import (
    ShellSyntaxError,
    ansi_c_quoted,
    arith_end,
    backquote_end,
    matching,
)
from tinker_opt.script.words import Arith, CmdSub, Command, Lit, Param, Word

__all__ = ["ShellSyntaxError", "parse_commands"]

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACE_RE = re.compile(
    r"^(?P<len>#)?(?P<keys>!)?(?P<name>[A-Za-z_][A-Za-z0-9_]*|\d+|[@*#?$!0-])"
    r"(?:\[(?P<index>[^\]]*)\])?(?P<rest>.*)$",
    re.S,
)
_BLANK = " \t\r"
_WORD_END = set(" \t\r\n;&|<>()")
_SPECIAL_PARAMS = "@*#?$!-0123456789"


@dataclass
class _State:
    heredocs: list[tuple[str, bool]] = field(default_factory=list)


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.state = _State()
        self.commands: list[Command] = []

    def _continuation(self, pos: int) -> int:
        """Length of a backslash-newline at pos (CRLF tolerated), 0 when there is none."""
        if self.text.startswith("\\\n", pos):
            return 2
        return 3 if self.text.startswith("\\\r\n", pos) else 0

    # ---- top level -------------------------------------------------------------------------
    def run(self) -> list[Command]:
        words: list[Word] = []
        start_line = 1
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in _BLANK:
                self.pos += 1
            elif self._continuation(self.pos):
                self.pos += self._continuation(self.pos)
            elif ch == "#" and self._at_word_start():
                self._skip_comment()
            elif ch == "\n" or ch in ";&|()":
                self._flush(words, start_line)
                words = []
                self.pos += 1
                if ch == "\n" and self.state.heredocs:
                    self._skip_heredocs()
                start_line = self.text.count("\n", 0, self.pos) + 1
            elif ch in "<>":
                self._redirection()
            else:
                word = self._word()
                if (
                    self.pos < len(self.text)
                    and self.text[self.pos] in "<>"
                    and re.fullmatch(r"\d+", word.literal_text() or "")
                ):
                    continue  # a file-descriptor prefix such as 2>&1
                if not words:
                    start_line = self.text.count("\n", 0, word.start) + 1
                words.append(word)
        self._flush(words, start_line)
        return self.commands

    def _flush(self, words: list[Word], line: int) -> None:
        if words:
            self.commands.append(Command(tuple(words), line))

    def _at_word_start(self) -> bool:
        return self.pos == 0 or self.text[self.pos - 1] in " \t\r\n;&|()"

    def _skip_comment(self) -> None:
        end = self.text.find("\n", self.pos)
        self.pos = len(self.text) if end < 0 else end

    def _redirection(self) -> None:
        match = re.match(r"<<<|<<-|<<|>>|>&|<&|&>|>\||<>|>|<", self.text[self.pos :])
        assert match is not None, "called at a redirection operator (_at_word_start)"
        op = match.group(0)
        self.pos += len(op)
        while self.pos < len(self.text) and self.text[self.pos] in _BLANK:
            self.pos += 1
        if self.pos >= len(self.text) or self.text[self.pos] in "\n;|&":
            return
        target = self._word()
        if op in ("<<", "<<-"):
            raw = self.text[target.start : target.end]
            self.state.heredocs.append(
                (raw.replace("'", "").replace('"', "").replace("\\", ""), op == "<<-")
            )

    def _skip_heredocs(self) -> None:
        for delimiter, strip_tabs in self.state.heredocs:
            while self.pos < len(self.text):
                end = self.text.find("\n", self.pos)
                end = len(self.text) if end < 0 else end
                line = self.text[self.pos : end].rstrip("\r")
                self.pos = min(end + 1, len(self.text))
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
        self.state.heredocs = []

    # ---- words -----------------------------------------------------------------------------
    def _word(self) -> Word:
        start = self.pos
        parts: list = []
        run_start = self.pos
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch in _WORD_END:
                if ch == "(" and self._is_array_open(parts, run_start):
                    self._close_run(parts, run_start)
                    return self._array_word(start, parts)
                break
            if ch in "\\'\"$`":
                self._close_run(parts, run_start)
                self._special(parts, quoted=False)
                run_start = self.pos
            else:
                self.pos += 1
        self._close_run(parts, run_start)
        return Word(tuple(parts), start, self.pos)

    def _close_run(self, parts: list, run_start: int) -> None:
        if self.pos > run_start:
            parts.append(Lit(self.text[run_start : self.pos], run_start, self.pos, False))

    def _is_array_open(self, parts: list, run_start: int) -> bool:
        pending = self.text[run_start : self.pos]
        head = "".join(p.text for p in parts if isinstance(p, Lit)) + pending
        only_lits = all(isinstance(p, Lit) for p in parts)
        return only_lits and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\+?=", head) is not None

    def _array_word(self, start: int, parts: list) -> Word:
        self.pos += 1  # the "("
        elements: list[Word] = []
        while True:
            if self.pos >= len(self.text):
                raise ShellSyntaxError(f"array starting at offset {start} has no closing ')'")
            ch = self.text[self.pos]
            if ch in _BLANK or ch == "\n":
                self.pos += 1
            elif self._continuation(self.pos):
                self.pos += self._continuation(self.pos)
            elif ch == "#" and self._at_word_start():
                self._skip_comment()
            elif ch == ")":
                self.pos += 1
                return Word(tuple(parts), start, self.pos, tuple(elements))
            else:
                elements.append(self._word())
                if self.pos < len(self.text) and self.text[self.pos] in ";&|<>(":
                    raise ShellSyntaxError(f"unexpected {self.text[self.pos]!r} inside an array")

    def _special(self, parts: list, quoted: bool) -> None:
        """One escape, quoted string, expansion or command substitution at self.pos."""
        text, pos = self.text, self.pos
        ch = text[pos]
        if ch == "\\":
            if self._continuation(pos):
                self.pos += self._continuation(pos)
            else:
                parts.append(Lit(text[pos + 1 : pos + 2], pos, pos + 2, True))
                self.pos += 2
        elif ch == "'":
            end = text.find("'", pos + 1)
            if end < 0:
                raise ShellSyntaxError(
                    f"unterminated single quote at line {text.count(chr(10), 0, pos) + 1}"
                )
            parts.append(Lit(text[pos + 1 : end], pos + 1, end, True))
            self.pos = end + 1
        elif ch == '"':
            self._double_quoted(parts)
        elif ch == "`":
            end = backquote_end(self.text, pos)
            parts.append(CmdSub(pos, end, quoted))
            self.pos = end
        else:
            self._dollar(parts, quoted)

    def _double_quoted(self, parts: list) -> None:
        text = self.text
        open_pos = self.pos
        self.pos += 1
        if self.pos < len(text) and text[self.pos] == '"':
            parts.append(Lit("", self.pos, self.pos, True))  # "" makes an empty word
        run_start = self.pos
        while True:
            if self.pos >= len(text):
                line = text.count("\n", 0, open_pos) + 1
                raise ShellSyntaxError(f"unterminated double quote opened at line {line}")
            ch = text[self.pos]
            if ch == '"':
                self._close_quoted_run(parts, run_start)
                self.pos += 1
                return
            if self._continuation(self.pos):
                self._close_quoted_run(parts, run_start)
                self.pos += self._continuation(self.pos)
                run_start = self.pos
            elif ch == "\\" and text[self.pos + 1 : self.pos + 2] in ("$", "`", '"', "\\"):
                self._close_quoted_run(parts, run_start)
                parts.append(Lit(text[self.pos + 1], self.pos, self.pos + 2, True))
                self.pos += 2
                run_start = self.pos
            elif ch in "$`":
                self._close_quoted_run(parts, run_start)
                self._special(parts, quoted=True)
                run_start = self.pos
            else:
                self.pos += 1

    def _close_quoted_run(self, parts: list, run_start: int) -> None:
        if self.pos > run_start:
            parts.append(Lit(self.text[run_start : self.pos], run_start, self.pos, True))

    def _dollar(self, parts: list, quoted: bool) -> None:
        text, pos = self.text, self.pos
        nxt = text[pos + 1 : pos + 2]
        if text.startswith("$((", pos):
            end = arith_end(self.text, pos)
            parts.append(Arith(text[pos + 3 : end - 2], pos, end, quoted))
            self.pos = end
        elif nxt == "(":
            end = matching(self.text, pos + 1, "(", ")")
            parts.append(CmdSub(pos, end, quoted))
            self.pos = end
        elif nxt == "{":
            end = matching(self.text, pos + 1, "{", "}")
            parts.append(self._brace_param(pos, end, quoted))
            self.pos = end
        elif nxt == "'" and not quoted:
            parts.append(ansi_c_quoted(self.text, pos))
            self.pos = parts[-1].end + 1
        elif nxt and (nxt in _SPECIAL_PARAMS):
            parts.append(Param(nxt, pos, pos + 2, quoted))
            self.pos = pos + 2
        else:
            match = _NAME_RE.match(text, pos + 1)
            if match:
                parts.append(Param(match.group(0), pos, match.end(), quoted))
                self.pos = match.end()
            else:
                parts.append(Lit("$", pos, pos + 1, quoted))
                self.pos = pos + 1

    def _brace_param(self, pos: int, end: int, quoted: bool) -> Param:
        inner_start = pos + 2
        inner = self.text[inner_start : end - 1]
        match = _BRACE_RE.match(inner)
        if not match:
            return Param("", pos, end, quoted, op="other")
        name, index, rest = match.group("name"), match.group("index"), match.group("rest")
        if match.group("len"):
            return Param(name, pos, end, quoted, op="len", index=index)
        if match.group("keys"):
            return Param(name, pos, end, quoted, op="keys", index=index)
        op_match = re.match(r":-|:=|:\+|:\?|-|=|\+|\?", rest)
        if not rest:
            return Param(name, pos, end, quoted, index=index)
        if not op_match:
            return Param(name, pos, end, quoted, op="other", index=index)
        op = op_match.group(0)
        arg_start = inner_start + match.start("rest") + len(op)
        return Param(
            name,
            pos,
            end,
            quoted,
            op=op,
            index=index,
            arg=self._parse_region(arg_start, end - 1, quoted),
        )

    def _parse_region(self, start: int, end: int, quoted: bool) -> tuple:
        """Parts of the text [start, end) of a `${V:-word}` default (quotes allowed, blanks literal)."""
        sub = _Lexer(self.text[:end])
        sub.pos = start
        parts: list = []
        run_start = start
        while sub.pos < end:
            if sub.text[sub.pos] in "\\'\"$`":
                if sub.pos > run_start:
                    parts.append(Lit(sub.text[run_start : sub.pos], run_start, sub.pos, quoted))
                sub._special(parts, quoted)
                run_start = sub.pos
            else:
                sub.pos += 1
        if end > run_start:
            parts.append(Lit(sub.text[run_start:end], run_start, end, quoted))
        return tuple(parts)


def parse_commands(text: str) -> list[Command]:
    """Split a bash script into simple commands made of source-located words."""
    return _Lexer(text).run()
