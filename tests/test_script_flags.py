"""The flag registry: the README table, the reader's flags, and the not-priced warning."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from script_support import FIXTURES

from tinker_opt.script import flags
from tinker_opt.script.reader import read_script

ROOT = Path(__file__).resolve().parents[1]


def test_readme_table_is_the_registry():
    """The README's flag table is exactly `markdown_table()`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- flag-table:begin -->\n(.*?)\n<!-- flag-table:end -->", text, re.S)
    assert match, "README lacks the flag table markers"
    assert match.group(1).strip() == flags.markdown_table()


def test_every_flag_the_reader_reads_is_registered():
    """Each flag literal in tinker_opt/script/*.py (the reader's vocabulary) has a registry row."""
    names = set()
    for path in (ROOT / "tinker_opt" / "script").glob("*.py"):
        if path.name != "flags.py":
            names |= set(re.findall(r"\"(--[A-Za-z0-9_-]+)\"", path.read_text(encoding="utf-8")))
    assert names, "no flag literals found"
    assert sorted(names - set(flags.BY_NAME)) == []


@pytest.mark.parametrize(
    "name",
    [
        "--reuse-fp32-param",
        "--swap-attention",
        "--moe-tp-extend-ep",
        "--schedules-method",
        "--use-distributed-optimizer",
        "--swap-optimizer",
        "--use-ascend-mc2",
        "--recompute-activation-function",
        "--use-ascend-coc",
    ],
)
def test_issue_flags_are_registered(name):
    """The time- or memory-changing flags the issue names all have a row."""
    assert name in flags.BY_NAME


def test_unpriced_flags_are_warned_by_the_reader():
    """A script with flags the model does not price gets one warning naming each of them."""
    info = read_script(FIXTURES / "pretrain_deepseek3_671b_4k_ptd.sh")
    warning = [w for w in info.warnings if w.startswith("the prediction does not include")]
    assert len(warning) == 1
    assert "--moe-permutation-async-comm" in warning[0]
    assert "--moe-grouped-gemm" not in warning[0]  # priced: profile/moe.py
    assert "--use-distributed-optimizer" not in warning[0]
    assert (
        "--reuse-fp32-param" not in warning[0] and "--overlap-grad-reduce" not in warning[0]
    )  # priced


def test_no_warning_without_unpriced_flags():
    """A script whose flags are all modelled gets no such warning."""
    info = read_script(FIXTURES / "train_gpt3_175b_distributed.sh")
    assert flags.unpriced_warning(info.launch) is None


def test_fixture_flags_that_change_time_or_memory_are_registered():
    """Flags of the fixture scripts from the known time/memory families are in the registry."""
    families = re.compile(
        r"^--(overlap|recompute|swap|reuse|use-fused|use-ascend|use-mc2|moe-.*(overlap|fusion|gemm|async)|"
        r"schedules|coc|release|tp-comm)"
    )
    found = set()
    for path in FIXTURES.glob("*.sh"):
        found |= {f for f in re.findall(r"(--[a-z0-9-]+)", path.read_text()) if families.match(f)}
    assert sorted(found - set(flags.BY_NAME)) == []
