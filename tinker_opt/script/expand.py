"""Expanding a launch script's commands in order, without running anything, keeping provenance.

Every expanded character knows where it came from: a `Seg` is a run of text with its source span
(None when computed, e.g. by `$((...))`) and the chain of variable references (`Ref`) through
which it reached the command line. The writer uses that chain to change a value at the right
place: the variable's assignment, or the `${TP}` reference itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tinker_opt.script.arith import eval_arith
from tinker_opt.script.shell import parse_commands
from tinker_opt.script.words import (
    Arith,
    CmdSub,
    Command,
    Lit,
    Param,
    Word,
    arith_names,
    iter_params,
    split_assignment,
)

_DECLARE = {"export", "declare", "typeset", "local", "readonly"}
_SKIP_KEYWORDS = {
    "if",
    "then",
    "else",
    "elif",
    "do",
    "while",
    "until",
    "!",
    "{",
    "}",
    "time",
    "fi",
    "done",
    "esac",
}
_ENVIRONMENT_RE = re.compile(
    r"^(PATH|LD_LIBRARY_PATH|PYTHONPATH|HOME|PWD|USER|HOSTNAME|SHELL|"
    r"ASCEND_\w+|CUDA_\w+|SLURM_\w+|OMPI_\w+|PMI_\w+)$"
)
"""Variables the environment provides: reading them unset is normal, not worth a warning."""


@dataclass(frozen=True)
class Ref:
    """A variable reference in the source: `$NAME` / `${NAME...}` at [start, end)."""

    name: str
    start: int
    end: int


@dataclass(frozen=True)
class Seg:
    """A run of expanded text; `start`/`end` locate it in the source (None if computed)."""

    text: str
    start: int | None
    end: int | None
    path: tuple[Ref, ...] = ()
    """References from the outermost (on the command line) to the innermost one."""
    exact: bool = True
    """True when text == source[start:end] (False for escapes such as `\\$`)."""

    def sub(self, i: int, j: int) -> Seg:
        """The piece text[i:j], with its span when the text maps one to one onto the source."""
        if self.start is None or not self.exact:
            return Seg(self.text[i:j], None, None, self.path, False)
        return Seg(self.text[i:j], self.start + i, self.start + j, self.path)

    def via(self, ref: Ref) -> Seg:
        return Seg(self.text, self.start, self.end, (ref,) + self.path, self.exact)


Field = tuple[Seg, ...]


def field_text(fld: Field) -> str:
    return "".join(s.text for s in fld)


@dataclass(frozen=True)
class Scalar:
    segs: tuple[Seg, ...]
    value_start: int | None
    """Where the assigned value begins in the source (for empty assignments such as `X=`)."""


@dataclass(frozen=True)
class Array:
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class ExecutedCommand:
    """A command as it would run: its words expanded into fields, with the line it starts on."""

    command: Command
    fields: tuple[Field, ...]


@dataclass
class Expansion:
    """The result of walking the script: commands, final variables and reference counts."""

    text: str
    commands: list[ExecutedCommand] = field(default_factory=list)
    variables: dict[str, Scalar | Array] = field(default_factory=dict)
    ref_counts: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


# ---- field splitting -------------------------------------------------------------------------
_BREAK = object()


def split_fields(pieces: list) -> list[Field]:
    """Bash field splitting: pieces are (Seg, splittable) pairs or _BREAK between array elements."""
    fields: list[Field] = []
    current: list[Seg] = []
    have = False
    for piece in pieces:
        if piece is _BREAK:
            if have:
                fields.append(tuple(current))
            current, have = [], False
            continue
        seg, splittable = piece
        if not splittable:
            if seg.text:
                current.append(seg)
            have = True
            continue
        i = 0
        for match in re.finditer(r"[ \t\n]+", seg.text):
            if match.start() > i:
                current.append(seg.sub(i, match.start()))
                have = True
            if have:
                fields.append(tuple(current))
            current, have = [], False
            i = match.end()
        if i < len(seg.text):
            current.append(seg.sub(i, len(seg.text)))
            have = True
    if have:
        fields.append(tuple(current))
    return fields


# ---- the walker ------------------------------------------------------------------------------
class _Walker:
    def __init__(self, text: str, script_name: str) -> None:
        self.out = Expansion(text)
        self.script_name = script_name
        self._warned: set[str] = set()

    def run(self) -> Expansion:
        commands = parse_commands(self.out.text)
        self._count_refs(commands)
        for command in commands:
            self._execute(command)
        return self.out

    def _count_refs(self, commands: list[Command]) -> None:
        counts = self.out.ref_counts

        def visit(parts: tuple) -> None:
            for part in parts:
                if isinstance(part, Arith):
                    for name in arith_names(part.expr):
                        counts[name] = counts.get(name, 0) + 1
            for param in iter_params(parts):
                counts[param.name] = counts.get(param.name, 0) + 1
                visit(param.arg)

        for command in commands:
            for word in command.words:
                visit(word.parts)
                for element in word.array or ():
                    visit(element.parts)

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.out.warnings.append(message)

    def _execute(self, command: Command) -> None:
        words = list(command.words)
        while words and words[0].literal_text() in _SKIP_KEYWORDS:
            words.pop(0)
        if not words:
            return
        head = words[0].literal_text()
        if head in ("for", "select") and len(words) > 1 and words[1].literal_text():
            self._loop_variable(words)
            return
        if head in ("case", "function"):
            return
        if head in _DECLARE:
            for word in words[1:]:
                self._assign(word)
            return
        assigns = 0
        while assigns < len(words) and split_assignment(words[assigns]) is not None:
            assigns += 1
        if assigns == len(words):
            for word in words:
                self._assign(word)
            return
        fields: list[Field] = []
        for word in words[assigns:]:
            fields.extend(self.expand_word(word))
        self.out.commands.append(ExecutedCommand(command, tuple(fields)))

    def _loop_variable(self, words: list[Word]) -> None:
        """`for NAME in items`: NAME takes the first item (the loop body is read once)."""
        fields: list[Field] = []
        for word in words[3:]:
            fields.extend(self.expand_word(word))
        segs = fields[0] if fields else ()
        name = words[1].literal_text()
        if name is not None:  # `for "$x" in ...` names no variable
            self.out.variables[name] = Scalar(tuple(segs), None)

    def _assign(self, word: Word) -> None:
        split = split_assignment(word)
        if split is None:
            return
        name, op, value_parts = split
        if word.array is not None:
            fields: list[Field] = []
            for element in word.array:
                fields.extend(self.expand_word(element))
            old = self.out.variables.get(name)
            if op == "+=" and isinstance(old, Array):
                fields = list(old.fields) + fields
            self.out.variables[name] = Array(tuple(fields))
            return
        segs = tuple(
            seg for seg, _ in self._pieces(value_parts, in_assignment=True) if seg is not _BREAK
        )
        old = self.out.variables.get(name)
        if op == "+=" and isinstance(old, Scalar):
            segs = old.segs + segs
        value_start = value_parts[0].start if value_parts else word.end
        self.out.variables[name] = Scalar(segs, value_start)

    # ---- expansion -------------------------------------------------------------------------
    def expand_word(self, word: Word) -> list[Field]:
        return split_fields(self._pieces(word.parts, in_assignment=False))

    def _pieces(self, parts: tuple, in_assignment: bool) -> list:
        pieces: list = []
        for part in parts:
            if isinstance(part, Lit):
                exact = len(part.text) == part.end - part.start
                splittable = not part.quoted and not in_assignment
                pieces.append((Seg(part.text, part.start, part.end, (), exact), splittable))
            elif isinstance(part, Param):
                pieces.extend(self._param(part, in_assignment))
            elif isinstance(part, Arith):
                value = eval_arith(part.expr, self.lookup_text)
                if value is None:
                    self._warn(
                        f"arith:{part.start}", f"cannot evaluate $(({part.expr})); read as empty"
                    )
                text = "" if value is None else str(value)
                pieces.append(
                    (Seg(text, None, None, (), False), not part.quoted and not in_assignment)
                )
            elif isinstance(part, CmdSub):
                pieces.append(
                    (Seg("", None, None, (), False), False)
                    if part.quoted
                    else (Seg("", None, None, (), False), True)
                )
        return pieces

    def lookup_text(self, name: str) -> str:
        value = self.out.variables.get(name)
        if isinstance(value, Scalar):
            return "".join(s.text for s in value.segs)
        if isinstance(value, Array):
            return field_text(value.fields[0]) if value.fields else ""
        return ""

    def _param(self, part: Param, in_assignment: bool) -> list:
        splittable = not part.quoted and not in_assignment
        ref = Ref(part.name, part.start, part.end)
        value = self._value_fields(part)
        if part.op in (":-", "-", ":=", "=", ":+", "+"):
            is_set = value is not None and (part.op[0] != ":" or any(field_text(f) for f in value))
            use_arg = (not is_set) if part.op not in (":+", "+") else is_set
            if use_arg:
                arg_pieces = self._pieces(part.arg, in_assignment)
                if part.op in (":=", "="):
                    segs = tuple(seg for seg, _ in arg_pieces)
                    self.out.variables[part.name] = Scalar(segs, None)
                result = [(seg, splittable and ok) for seg, ok in arg_pieces]
                if not result and part.quoted:
                    result = [(Seg("", None, None, (), False), False)]
                return result
            if part.op in (":+", "+"):
                return []
        if value is None:
            self._undefined(part)
            return [(Seg("", None, None, (ref,), False), False)] if part.quoted else []
        return self._value_pieces(part, ref, value, splittable)

    def _value_pieces(self, part: Param, ref: Ref, value: list[Field], splittable: bool) -> list:
        if part.op == "len":
            text = (
                str(len(value))
                if part.index in ("@", "*")
                else str(len(field_text(value[0]) if value else ""))
            )
            return [(Seg(text, None, None, (ref,), False), splittable)]
        whole = part.index in ("@", "*") or part.op == "keys"
        pieces: list = []
        for i, fld in enumerate(value if whole else value[:1]):
            if i and whole and part.quoted and part.index == "@":
                pieces.append(_BREAK)
            elif i:
                pieces.append((Seg(" ", None, None, (ref,), False), splittable))
            if not fld and part.quoted:
                pieces.append((Seg("", None, None, (ref,), False), False))
            pieces.extend((seg.via(ref), splittable) for seg in fld)
        if not pieces and part.quoted:
            pieces.append((Seg("", None, None, (ref,), False), False))
        return pieces

    def _value_fields(self, part: Param) -> list[Field] | None:
        """The variable's value as fields (one for a scalar), None when unset."""
        name = part.name
        if name == "0":
            return [(Seg(self.script_name, None, None, (), False),)]
        if name == "#":
            return [(Seg("0", None, None, (), False),)]
        value = self.out.variables.get(name)
        if value is None:
            return None
        if part.op == "keys":
            count = len(value.fields) if isinstance(value, Array) else 1
            return [(Seg(str(i), None, None, (), False),) for i in range(count)]
        if isinstance(value, Scalar):
            if part.index not in (None, "@", "*", "0"):
                return None
            return [value.segs]
        if part.index in ("@", "*") or part.op == "len":
            return list(value.fields)
        index = eval_arith(part.index or "0", self.lookup_text)
        if index is None or not 0 <= index < len(value.fields):
            return None
        if part.index is None and len(value.fields) > 1:
            self._warn(
                f"array:{name}",
                f"array {name} is used as ${name} (first element only); "
                f'write "${{{name}[@]}}" to pass all elements',
            )
        return [value.fields[index]]

    def _undefined(self, part: Param) -> None:
        if part.name.isdigit():
            self._warn(
                f"undef:{part.name}",
                f"positional parameter ${part.name} is not given; read as empty",
            )
        elif part.name not in "@*?$!-" and not _ENVIRONMENT_RE.match(part.name):
            line = self.out.text.count("\n", 0, part.start) + 1
            self._warn(
                f"undef:{part.name}",
                f"variable {part.name} is not set (first used on line {line}); read as empty",
            )


def expand_script(text: str, script_name: str = "script.sh") -> Expansion:
    """Walk the script in order and expand every command, without executing anything."""
    return _Walker(text, script_name).run()
