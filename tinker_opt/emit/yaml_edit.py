"""Setting `section.key` values in a YAML file's text, keeping every other byte (comments included).

PyYAML cannot write a file back with its comments and layout, so the FSDP2 writer edits lines: a
value on a `key: value` line is replaced in place (its trailing comment stays); a missing key is
added as the section's first child, at the section's indentation; a missing section is appended.
Only two-level keys whose values are scalars are edited (all the FSDP2 strategy keys are).
The result is parsed back and must hold the new values, else ScriptError.
"""

from __future__ import annotations

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
    for line in lines[start + 1:end]:
        if line.strip() and not line.lstrip().startswith("#"):
            return line[:len(line) - len(line.lstrip(" \t"))]
    return "  "


def _set_one(lines: list[str], section: str, key: str, value: str, newline: str) -> None:
    span = _section_span(lines, section)
    if span is None:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += newline
        lines.extend([f"{section}:{newline}", f"  {key}: {value}{newline}"])
        return
    start, end = span
    indent = _child_indent(lines, start, end)
    pattern = re.compile(rf"^({re.escape(indent)}{re.escape(key)}\s*:[ \t]*)([^#\r\n]*?)([ \t]+#.*)?(\r?\n)?$")
    for i in range(start + 1, end):
        match = pattern.match(lines[i])
        if match:
            lines[i] = match.group(1) + value + (match.group(3) or "") + (match.group(4) or "")
            return
    lines.insert(start + 1, f"{indent}{key}: {value}{newline}")


def set_yaml_values(text: str, values: dict[str, Any]) -> str:
    """The YAML text with each dotted `section.key` set to its value (see the module docstring)."""
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    for dotted, value in reversed(values.items()):  # reversed: inserted keys keep the given order
        section, key = dotted.split(".", 1)
        _set_one(lines, section, key, yaml_scalar(value), newline)
    out = "".join(lines)
    data = yaml.safe_load(out) or {}
    for dotted, value in values.items():
        section, key = dotted.split(".", 1)
        got = (data.get(section) or {}).get(key)
        if got != value:
            raise ScriptError(f"could not set {dotted} to {value!r} in the YAML copy (it reads {got!r}); "
                              "its layout is beyond the writer: set it by hand")
    return out
