"""Setting `section.key` values in a YAML file's text, keeping every other byte (comments included).

PyYAML cannot write a file back with its comments and layout, so the FSDP2 writer edits lines: a
value on a `key: value` line is replaced in place (its trailing comment stays); a missing key is
added as the section's first child, at the section's indentation; a missing section is appended.
Only two-level keys are edited, with scalar values or lists of strings (`recompute_modules`): a
list replaces the key's block sequence (the `- item` lines below it, comments among them dropped)
or its one-line flow list, written as a block sequence indented as the old one.
The result is parsed back and must hold the new values, else ScriptError.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from tinker_opt.errors import ScriptError


def yaml_scalar(value: Any) -> str:
    """A value as MindSpeed-LLM's example YAML files write it (`True`, `16`, `ulysses`)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def _section_span(lines: list[str], section: str) -> tuple[int, int] | None:
    """(header line, end line) of a top-level section, or None."""
    header = re.compile(rf"^{re.escape(section)}\s*:\s*(#.*)?$")
    for i, line in enumerate(lines):
        if header.match(line.rstrip("\r\n")):
            end = i + 1
            while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t#"):
                end += 1
            return i, end
    return None


def _child_indent(lines: list[str], start: int, end: int) -> str:
    for line in lines[start + 1 : end]:
        if line.strip() and not line.lstrip().startswith("#"):
            return line[: len(line) - len(line.lstrip(" \t"))]
    return "  "


def _sequence_end(lines: list[str], key_line: int, end: int, indent: str) -> tuple[int, str]:
    """(end of the block sequence under the key at `key_line`, its items' indentation)."""
    item_indent, i = indent + "  ", key_line + 1
    while i < end:
        stripped = lines[i].lstrip(" \t")
        depth = len(lines[i]) - len(stripped)
        if (
            stripped.strip()
            and not stripped.startswith("#")
            and not (depth > len(indent) or (depth == len(indent) and stripped.startswith("- ")))
        ):
            break
        if stripped.startswith("- ") and item_indent == indent + "  ":
            item_indent = lines[i][:depth]
        i += 1
    while i > key_line + 1 and not lines[i - 1].strip():
        i -= 1  # blank lines after the sequence stay
    return i, item_indent


def _item(value: str) -> str:
    """A list item as a plain scalar where YAML reads it back unchanged, else double-quoted."""
    try:
        plain = yaml.safe_load(value) == value
    except yaml.YAMLError:
        plain = False
    return value if plain else json.dumps(value)


def _key_lines(indent: str, key: str, value: str | list[str], newline: str) -> list[str]:
    """`key: value`, or `key:` and its block sequence, at the given indentation."""
    if not isinstance(value, list):
        return [f"{indent}{key}: {value}{newline}"]
    return [f"{indent}{key}:{newline}"] + [f"{indent}  - {_item(v)}{newline}" for v in value]


def _set_one(
    lines: list[str], section: str, key: str, value: str | list[str], newline: str
) -> None:
    span = _section_span(lines, section)
    if span is None:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += newline
        lines.extend([f"{section}:{newline}", *_key_lines("  ", key, value, newline)])
        return
    start, end = span
    indent = _child_indent(lines, start, end)
    pattern = re.compile(
        rf"^({re.escape(indent)}{re.escape(key)}\s*:[ \t]*)([^#\r\n]*?)([ \t]+#.*)?(\r?\n)?$"
    )
    for i in range(start + 1, end):
        match = pattern.match(lines[i])
        if match and isinstance(value, list):
            seq_end, item_indent = _sequence_end(lines, i, end, indent)
            lines[i:seq_end] = [match.group(1).rstrip(" \t") + (match.group(3) or "") + newline] + [
                f"{item_indent}- {_item(v)}{newline}" for v in value
            ]
            return
        if match:
            assert isinstance(value, str)  # a list was written by the branch above
            lines[i] = match.group(1) + value + (match.group(3) or "") + (match.group(4) or "")
            return
    lines[start + 1 : start + 1] = _key_lines(indent, key, value, newline)


def set_yaml_values(text: str, values: dict[str, Any]) -> str:
    """The YAML text with each dotted `section.key` set to its value (see the module docstring)."""
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    for dotted, value in reversed(values.items()):  # reversed: inserted keys keep the given order
        section, key = dotted.split(".", 1)
        _set_one(
            lines,
            section,
            key,
            [str(v) for v in value] if isinstance(value, list) else yaml_scalar(value),
            newline,
        )
    out = "".join(lines)
    data = yaml.safe_load(out) or {}
    for dotted, value in values.items():
        section, key = dotted.split(".", 1)
        got = (data.get(section) or {}).get(key)
        if got != value:
            raise ScriptError(
                f"could not set {dotted} to {value!r} in the YAML copy (it reads {got!r}); "
                "its layout is beyond the writer: set it by hand"
            )
    return out
