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


LOG_SCRIPTS = sorted((FIXTURES.parent / "logs").glob("*/script.sh"))


@pytest.mark.parametrize(
    "path", sorted(FIXTURES.glob("*.sh")) + LOG_SCRIPTS, ids=lambda p: p.parent.name + "/" + p.name
)
def test_real_launch_scripts_have_no_unknown_flags(path):
    """Every flag of the real launch scripts (MindSpeed-LLM examples, Megatron-LM examples and CI
    scripts, the Megatron-MoE-ModelZoo DeepSeek-V3 run) has a row: priced, warned or no effect."""
    info = read_script(path)
    assert flags.unknown_flags(info.launch) == []


def test_modelzoo_deepseek_v3_names_what_it_does_not_price():
    """The ModelZoo DeepSeek-V3 run's fused cross entropy and FP8 router padding are read and named
    in the not-priced warning, not reported as unknown."""
    info = read_script(FIXTURES / "train_deepseek_v3_h100_modelzoo.sh")
    assert flags.unknown_warning(info.launch) is None
    warning = flags.unpriced_warning(info.launch)
    assert warning is not None
    assert "--cross-entropy-loss-fusion" in warning
    assert "--moe-router-padding-for-fp8" in warning


def test_logging_and_checkpoint_flags_are_in_no_warning():
    """The GB200 CI script's logging / checkpoint flags have no effect: named in no warning."""
    info = read_script(FIXTURES.parent / "logs" / "mlm-ci-gpt7b-tp1pp4vpp-gb200" / "script.sh")
    named = " ".join(info.warnings)
    for name in ("--log-throughput", "--ckpt-format", "--async-save", "--exit-interval"):
        assert flags.BY_NAME[name].treatment == "no effect"
        assert name not in named
    # Priced since costs/step_costs.py: the step's logging passes are no longer warned about.
    assert "--log-params-norm" not in (flags.unpriced_warning(info.launch) or "")
    assert info.train.step_flags.log_params_norm and info.train.step_flags.log_num_zeros_in_grad


@pytest.mark.parametrize(
    "name",
    [
        "--cross-entropy-loss-fusion",
        "--moe-router-padding-for-fp8",
        "--optimizer-cpu-offload",
        "--cuda-graph-impl",
        "--empty-unused-memory-level",
    ],
)
def test_flags_that_change_time_or_memory_are_warned(name):
    """Recipe flags that change time or memory and are not priced are named in the warning."""
    assert flags.BY_NAME[name].warned
