"""The script's cluster wins: devices per node from the command line or the script, never silently
from a hardware description; the A3 scripts planned for their own clusters (issue 19 done-when)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import run_all

from tinker_opt.errors import ConfigError
from tinker_opt.hardware import load_hardware
from tinker_opt.script.reader import read_script
from tinker_opt.verbs.common import devices_per_node_for

FIXTURES = Path(__file__).parent / "fixtures"
DEEPSEEK_A3 = FIXTURES / "scripts" / "pretrain_deepseek3_671b_4k_A3_ptd.sh"
QWEN3_30B_A3 = FIXTURES / "fsdp2" / "pretrain_qwen3_30b_4k_fsdp2_A3.sh"


def test_script_node_size_beats_the_hardware_and_says_so() -> None:
    """An A3 script (16 per node) with the 910B description (8 per node): 16, with a warning."""
    count = devices_per_node_for(None, read_script(DEEPSEEK_A3), load_hardware("910b"))
    assert count.devices_per_node == 16
    assert any("16 devices per node" in n and "has 8" in n for n in count.notes)


def test_command_line_beats_the_script() -> None:
    """--num-npus-per-node wins over the script's count, and the difference is noted."""
    count = devices_per_node_for(8, read_script(DEEPSEEK_A3), load_hardware("atlas-a3"))
    assert (count.devices_per_node, count.source) == (8, "the command line")
    assert any("the script runs 16" in n for n in count.notes)


def test_hardware_gives_the_count_only_without_script_and_says_so() -> None:
    """No script and no flag: the description's count, with a note naming it."""
    count = devices_per_node_for(None, None, load_hardware("atlas-a3"))
    assert count.devices_per_node == 16
    assert count.notes and "atlas" in count.notes[0].lower()
    assert devices_per_node_for(None, None, None).devices_per_node == 8


def test_domain_of_partial_nodes_is_refused_with_both_numbers() -> None:
    """16 devices per node cannot tile GB200 NVL72's 72-GPU NVLink domain: a one-line error."""
    with pytest.raises(ConfigError, match=r"16 devices per node.*\(72 devices\)"):
        devices_per_node_for(None, read_script(DEEPSEEK_A3), load_hardware("gb200-nvl72"))


def _all_a3(script: Path, tmp_path: Path, *options: str) -> dict:
    """`tinker-opt all` on the analytic atlas-a3, the script's own cluster (no device count given)."""
    summary, _ = run_all(
        script, tmp_path, "--device", "analytic", "--hardware", "atlas-a3", "--time-limit", "20",
        *options,
    )  # fmt: skip
    return summary


def test_deepseek_v3_a3_plans_for_its_512_npus(tmp_path) -> None:
    """MindSpeed-LLM's DeepSeek-V3 A3 script (32 x 16) on atlas-a3: 512 devices, its own
    strategy evaluated as `current` with a speed-up (profile narrowed to keep the test short)."""
    summary = _all_a3(DEEPSEEK_A3, tmp_path, "--prof-tp", "2", "--max-ep", "16", "--max-mbs", "1")
    assert (summary["inputs"]["num_nodes"], summary["inputs"]["num_npus_per_node"]) == (32, 16)
    current = summary["current"]
    assert "error" not in current
    assert current["strategy"]["tp"] * current["strategy"]["pp"] * current["strategy"]["dp"] == 512
    assert summary["speedup_vs_current"] >= 1.0


def test_qwen3_30b_fsdp2_a3_finds_a_strategy_on_its_16_npus(tmp_path) -> None:
    """The FSDP2 Qwen3-30B A3 launch (1 x 16) finds a strategy on its own 16 NPUs."""
    summary = _all_a3(QWEN3_30B_A3, tmp_path, "--max-mbs", "2")
    assert (summary["inputs"]["num_nodes"], summary["inputs"]["num_npus_per_node"]) == (1, 16)
    assert summary["status"] in ("optimal", "feasible")
    best = summary["best"]["strategy"]
    assert best["tp"] * best["pp"] * best["cp"] * best["dp"] == 16
    assert "error" not in summary["current"]


def test_tp_nodes_adds_tensor_parallelism_across_nodes() -> None:
    """--tp-nodes 2 profiles (so the search may choose) tp = 2 x max_npu; the default keeps tp
    within a node (plus the script's own)."""
    from tinker_opt.profile.settings import MeasureSettings
    from tinker_opt.profile.space import tp_values

    model = read_script(DEEPSEEK_A3).model
    base = {"device": "cpu", "max_npu": 8, "max_mbs": 1, "warmup": 0, "repeats": 5}
    assert max(tp_values(model, MeasureSettings(**base).limits(None))) == 8
    across = tp_values(model, MeasureSettings(**base, tp_nodes=2).limits(None))
    assert 16 in across and 32 not in across
