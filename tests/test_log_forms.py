"""Training logs as users have them (issue 28): excerpts pasted into issues, stamps and launcher
prefixes, ROCm's `mem usages`, several runs, interleaved ranks, Windows line ends, gzip."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tinker_opt.errors import LogError
from tinker_opt.logs import read_log, steady_state

LOGS = Path(__file__).parent / "fixtures" / "logs"
KISTI = LOGS / "kisti-v100x4-gpt345m-tp4-main202409" / "log.txt"
ISSUE756 = LOGS / "excerpts" / "megatron-issue756-mixtral-h100x16.txt"
KISTI_TIMES = [995.3, 457.6, 464.2, 437.8, 436.9]
ROCM_LINE = (
    " [2025-01-13 10:00:{s:02d}.000000] iteration {i:8d}/     100 | consumed samples: {c:12d} |"
    " elapsed time per iteration (ms): {t:.1f} | mem usages: 0.{m:04d} |"
    " throughput per GPU (TFLOP/s/GPU): 480.2 | learning rate: 1.000000E-05 |"
    " global batch size:    64 | lm loss: 9.1E+00 | loss scale: 1.0 |"
    " number of skipped iterations:   0 | number of nan iterations:   0 |"
)
"""ROCm/Megatron-LM's iteration line (megatron/training/training.py training_log at 27f7be58:
the time stamp, then `mem usages: {:.4f} |` after the elapsed time)."""


def _write(tmp_path: Path, text: str, name: str = "run.log") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", newline="")
    return path


def test_excerpt_from_an_issue_is_read():
    """Megatron-LM issue #756 (Mixtral on 16 H100): stamped lines, two cut lines, no dump
    header; the six whole lines are read and the cut ones named."""
    log = read_log(ISSUE756)
    assert [r.iteration for r in log.iterations] == [29, 30, 31, 43, 44, 45]
    assert [r.time_ms for r in log.iterations][:2] == [5912.1, 5571.1]
    assert {r.interval for r in log.iterations} == {1}
    assert log.stopped_at is not None and "iteration       32/" in log.stopped_at
    assert steady_state(log).iteration_time_ms == pytest.approx(5571.1)


def test_argument_block_without_its_end_line(tmp_path):
    """The dump without `end of arguments` ends at the first line that is not an argument: the
    iteration and memory lines after it are read, the arguments too."""
    text = KISTI.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if "end of arguments" not in line]
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    assert [r.time_ms for r in log.iterations] == KISTI_TIMES
    assert log.arguments["tensor_model_parallel_size"] == "4" and len(log.arguments) > 300
    assert len(log.memory) == 4


def test_windows_line_ends_and_gzip(tmp_path):
    """CRLF line ends, and the same log gzip-compressed (read by its magic bytes)."""
    text = KISTI.read_text(encoding="utf-8").replace("\n", "\r\n")
    assert [r.time_ms for r in read_log(_write(tmp_path, text)).iterations] == KISTI_TIMES
    packed = tmp_path / "log.txt.gz"
    packed.write_bytes(gzip.compress(text.encode("utf-8")))
    log = read_log(packed)
    assert [r.time_ms for r in log.iterations] == KISTI_TIMES
    assert log.arguments["micro_batch_size"] == "4"


def test_cut_gzip_keeps_what_decompresses(tmp_path):
    """A gzip log cut while being written: the lines that decompress are read."""
    data = gzip.compress(KISTI.read_bytes())
    packed = tmp_path / "cut.gz"
    packed.write_bytes(data[: len(data) - 200])
    assert read_log(packed).iterations


@pytest.mark.parametrize("prefix", ["0: ", "[default0]:", "[rank3]: ", "node2:0: "])
def test_launcher_prefixes(tmp_path, prefix):
    """srun -l / torchrun --tee prefixes on every line: the dump and the records still read."""
    text = KISTI.read_text(encoding="utf-8")
    log = read_log(_write(tmp_path, "".join(prefix + line for line in text.splitlines(True))))
    assert [r.time_ms for r in log.iterations] == KISTI_TIMES
    assert log.arguments["tensor_model_parallel_size"] == "4"


def test_rocm_mem_usages_and_log_interval(tmp_path):
    """ROCm's `mem usages` field is read beside the time; log-interval 5 gives interval 5."""
    lines = [
        ROCM_LINE.format(s=i, i=5 * i, c=320 * i, t=t, m=m)
        for i, (t, m) in enumerate([(9000.0, 7100), (2310.5, 7856), (2299.9, 7856)], start=1)
    ]
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    assert [r.time_ms for r in log.iterations] == [9000.0, 2310.5, 2299.9]
    assert [r.memory_used_fraction for r in log.iterations] == [0.71, 0.7856, 0.7856]
    assert {r.interval for r in log.iterations} == {5}


def test_interleaved_copies_and_glued_lines(tmp_path):
    """Two copies of a log interleaved line by line (two ranks' files merged): each record once;
    a memory report glued to an iteration line: both read."""
    lines = KISTI.read_text(encoding="utf-8").splitlines()
    mixed = [line for pair in zip(lines, lines, strict=True) for line in pair]
    log = read_log(_write(tmp_path, "\n".join(mixed)))
    assert [r.time_ms for r in log.iterations] == KISTI_TIMES
    glued = lines[:]
    at = next(i for i, line in enumerate(glued) if "iteration       30/" in line)
    memory = next(line for line in glued if line.startswith("[Rank 0]"))
    glued[at] = memory + glued[at]
    log = read_log(_write(tmp_path, "\n".join(glued), "glued.log"))
    assert [r.time_ms for r in log.iterations] == KISTI_TIMES
    assert len(log.memory) == 5


def test_several_runs_pick_the_last_complete_or_the_one_asked(tmp_path):
    """A full run, then a restart that died after one record: the full run is read (the last
    complete one), the warning names both by their lines; run 2 when asked; run 3 is an error."""
    text = KISTI.read_text(encoding="utf-8")
    cut = text[: text.index(" [2024-09-14 19:44:24]")]
    path = _write(tmp_path, text + cut)
    log = read_log(path)
    assert [r.time_ms for r in log.iterations] == KISTI_TIMES
    assert any("2 runs" in w and "run 1 (lines 1-" in w for w in log.warnings)
    assert [r.time_ms for r in read_log(path, run=2).iterations] == [995.3]
    with pytest.raises(LogError, match="--log-run 3"):
        read_log(path, run=3)


def test_no_whole_time_names_the_line(tmp_path):
    """Iteration lines all cut before their time: the one-line error names the line."""
    lines = [
        line[: line.index("elapsed")] if "elapsed" in line else line
        for line in KISTI.read_text(encoding="utf-8").splitlines()
    ]
    log = read_log(_write(tmp_path, "\n".join(lines)))
    with pytest.raises(LogError, match=r"stopped at line \d+: '.*iteration +10/") as info:
        steady_state(log)
    assert "\n" not in str(info.value)


def test_mindspeed_fsdp2_lines():
    """MindSpeed-LLM FSDP2's lines (its guide's excerpt): times, and the GB peaks as MB."""
    log = read_log(LOGS / "excerpts" / "mindspeed-fsdp2-guide.txt")
    assert [r.time_ms for r in log.iterations] == [7827.39, 1331.74, 981.08]
    assert max(m.max_allocated_mb for m in log.memory) == pytest.approx(19.07 * 1024)
    assert max(m.max_reserved_mb for m in log.memory) == pytest.approx(22.43 * 1024)
