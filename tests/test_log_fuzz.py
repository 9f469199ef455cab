"""Fuzzing the training-log readers with the fixtures cut, interleaved and prefixed.

Each example takes one or two real logs of tests/fixtures/logs and does to them what copying,
pasting and merging logs does: the text truncated at either end, single lines cut at either end,
the lines of two logs interleaved, launcher / time-stamp prefixes put before lines, Windows line
ends, gzip. Properties:

* `read_log` and `steady_state` return a result or raise the tool's one-line LogError, never
  another exception;
* every iteration time read is one the input logs hold (a cut never turns `5571.1` into `557`).

The example counts keep the file to a few seconds; `TINKER_FUZZ_SCALE=20 pytest
tests/test_log_fuzz.py` multiplies them for a longer hunt.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinker_opt.errors import LogError
from tinker_opt.logs import read_log, steady_state

SCALE = int(os.environ.get("TINKER_FUZZ_SCALE", "1"))
LOGS = Path(__file__).parent / "fixtures" / "logs"
TEXT_LOGS = [
    LOGS / "kisti-v100x4-gpt345m-tp4-main202409" / "log.txt",
    LOGS / "kisti-v100x4-gpt345m-tp4-core050" / "log.txt",
    LOGS / "excerpts" / "megatron-issue756-mixtral-h100x16.txt",
    LOGS / "excerpts" / "mindspeed-fsdp2-guide.txt",
]
JSON_LOGS = [
    LOGS / "ms-ci-llama2-l8-tp8-coc-910b" / "log.txt",
    LOGS / "mlm-ci-gpt7b-tp1pp4vpp-h100" / "log.txt",
]
TEXTS = {path: path.read_text(encoding="utf-8") for path in TEXT_LOGS + JSON_LOGS}
PREFIXES = [
    "0: ",
    "[default3]:",
    "[rank1]: ",
    " [2024-04-06 02:58:18] ",
    "node1:7: ",
    "[1,0]<stdout>:",
]
_TIME = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)")
FUZZ = settings(
    max_examples=40 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _text_times(text: str) -> set[float]:
    return {float(value) for value in _TIME.findall(text) if value.count(".") <= 1}


def _json_times(path: Path) -> set[float]:
    """The iteration times (ms) of a whole CI metrics file, as its reader returns them."""
    return {record.time_ms for record in read_log(path).iterations}


def _cut_lines(draw, lines: list[str]) -> list[str]:
    """Some lines cut at their start or end."""
    out = []
    for line in lines:
        if line and draw(st.integers(0, 9)) == 0:
            at = draw(st.integers(0, len(line)))
            line = line[:at] if draw(st.booleans()) else line[at:]
        out.append(line)
    return out


def _interleave(draw, first: list[str], second: list[str]) -> list[str]:
    """The two lists merged, each in its own order (two ranks' output in one file)."""
    out, i, j = [], 0, 0
    while i < len(first) or j < len(second):
        take_first = j >= len(second) or (i < len(first) and draw(st.booleans()))
        if take_first:
            out.append(first[i])
            i += 1
        else:
            out.append(second[j])
            j += 1
    return out


@st.composite
def mangled_text(draw) -> tuple[bytes, set[float]]:
    """(bytes of a mangled log, the iteration times its sources hold)."""
    first = draw(st.sampled_from(TEXT_LOGS))
    lines = TEXTS[first].splitlines()
    times = _text_times(TEXTS[first])
    if draw(st.booleans()):
        second = draw(st.sampled_from(TEXT_LOGS))
        times |= _text_times(TEXTS[second])
        lines = _interleave(draw, lines, TEXTS[second].splitlines())
    lines = _cut_lines(draw, lines)
    if draw(st.booleans()):
        prefix = draw(st.sampled_from(PREFIXES))
        every = draw(st.booleans())
        lines = [prefix + line if every or draw(st.booleans()) else line for line in lines]
    text = ("\r\n" if draw(st.booleans()) else "\n").join(lines)
    start = draw(st.integers(0, len(text) // 3))
    end = draw(st.integers(2 * len(text) // 3, len(text)))
    data = text[start:end].encode("utf-8")
    return (gzip.compress(data) if draw(st.integers(0, 4)) == 0 else data), times


def _read_all(path: Path) -> list[float]:
    """The times read, through the steady-state rule as `check` applies it; [] on a LogError."""
    try:
        log = read_log(path)
        if log.iterations:
            steady_state(log, skip_first=0)
        return [record.time_ms for record in log.iterations]
    except LogError as exc:
        assert "\n" not in str(exc), "a LogError is one line"
        return []


@FUZZ
@given(mangled_text())
def test_mangled_text_logs_read_or_one_line_error(tmp_path_factory, case) -> None:
    """Any cut / interleaved / prefixed text log: its times, or a one-line LogError."""
    data, times = case
    path = tmp_path_factory.mktemp("fuzz") / "log.txt"
    path.write_bytes(data)
    read = _read_all(path)
    assert set(read) <= times, f"invented time(s) {set(read) - times}"


@FUZZ
@given(st.sampled_from(JSON_LOGS), st.data())
def test_cut_ci_metrics_read_or_one_line_error(tmp_path_factory, source, data) -> None:
    """A CI metrics file cut anywhere: a one-line LogError (or, cut in trailing blanks, the
    same times)."""
    text = TEXTS[source]
    end = data.draw(st.integers(0, len(text)))
    path = tmp_path_factory.mktemp("fuzz") / "log.json"
    path.write_text(text[:end], encoding="utf-8")
    read = _read_all(path)
    assert set(read) <= _json_times(source)


def test_fixtures_are_json_where_named() -> None:
    """The JSON fixtures the fuzz cuts are JSON (a fixture change would void the test)."""
    for path in JSON_LOGS:
        assert isinstance(json.loads(TEXTS[path]), dict)
