"""FSDP2 launches in the forms of MindSpeed-LLM's other examples: ${VAR:-default} values, "$@",
`--section.key=value`, context parallelism in the YAML, attention-only recompute, ZeRO-2
(`reshard_after_forward: False`); read, written back and read again."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
import yaml
from cli_support import run_all_analytic, run_cli
from script_support import bash_syntax_ok

from tinker_opt.emit.fsdp2_writer import apply_fsdp2
from tinker_opt.emit.yaml_edit import set_yaml_values
from tinker_opt.expressible import search_space_for
from tinker_opt.script.hf_config import model_from_hf_config
from tinker_opt.script.reader import read_script, read_script_text
from tinker_opt.strategy import Strategy

FSDP2 = Path(__file__).parent / "fixtures" / "fsdp2"
QWEN3_14B = FSDP2 / "pretrain_qwen3_14b_4k_fsdp2_A3_optimized.sh"
GPT_OSS_128K = FSDP2 / "tune_gpt_oss_20b_128k_fsdp2_A3.sh"
QWEN3_30B_EP = FSDP2 / "pretrain_qwen3_30b_4k_fsdp2_ep_A3.sh"
GPT_OSS_CONFIG = FSDP2 / "gpt_oss_20b_config.json"
OWNED = {
    "parallel": {
        "tp_size",
        "fsdp_size",
        "cp_size",
        "cp_type",
        "ep_size",
        "ep_fsdp_size",
        "recompute",
        "recompute_modules",
        "reshard_after_forward",
    },
    "training": {"per_device_train_batch_size", "gradient_accumulation_steps"},
}


def _read(script: Path):
    return read_script(script, model_config=GPT_OSS_CONFIG if script == GPT_OSS_128K else None)


def test_variables_defaults_and_passthrough():
    """Qwen3-14B: ${VAR:-default} values, quoted overrides and "$@" read; attention-only recompute is
    selective, with a warning saying how it is priced; bf16 reduction is warned about."""
    info = _read(QWEN3_14B)
    assert (info.model.num_layers, info.model.hidden_size, info.model.ffn_hidden_size) == (
        40,
        5120,
        17408,
    )
    assert (info.model.num_attention_heads, info.model.num_query_groups) == (40, 8)
    assert info.train.strategy == Strategy(tp=1, dp=16, zero=3, mbs=1, recompute="selective")
    assert info.train.global_batch_size == 16
    assert info.fsdp2.get("data.dataset") == {"file_name": "./dataset/alpaca_text_document"}
    assert any("selective" in w and "self_attn" in w for w in info.warnings)
    assert any("reduce_dtype" in w for w in info.warnings)


def test_context_parallel_from_yaml_over_four_nodes():
    """GPT-OSS 128K: cp_size 32 (ulysses) in the YAML, fsdp_size $WORLD_SIZE = 64: dp 2, ZeRO-3."""
    info = _read(GPT_OSS_128K)
    assert (info.train.nnodes, info.train.nproc_per_node) == (4, 16)
    assert info.model.seq_length == 131072
    assert info.train.strategy == Strategy(
        tp=1,
        dp=2,
        cp=32,
        cp_algo="ulysses_cp_algo",
        ep=1,
        etp=1,
        zero=3,
        mbs=1,
        recompute="full",
        recompute_method="block",
        recompute_num_layers=24,
    )
    assert not any("fsdp_size" in w for w in info.warnings)


def test_equals_overrides_and_zero2():
    """`--parallel.ep_size=8` forms, gradient accumulation through $GA, reshard_after_forward False = ZeRO-2;
    a prefetch count other than 1 is warned about."""
    info = _read(QWEN3_30B_EP)
    assert info.train.strategy == Strategy(tp=1, dp=32, ep=8, etp=1, zero=2, mbs=1)
    assert info.train.global_batch_size == 64 and info.train.nnodes == 2
    assert any("num_to_forward_prefetch is 2" in w for w in info.warnings)


def test_no_layer_in_recompute_modules_reads_as_none(tmp_path):
    yaml_text = (
        (FSDP2 / "pretrain_qwen3_30b_4k_fsdp2_ep_A3.yaml")
        .read_text()
        .replace(
            '  recompute: False\n  recompute_modules: ["model.layers.{*}"]',
            "  recompute: True\n  recompute_modules:\n    - mtp.layers.{*}.layer",
        )
    )
    info = read_script_text(
        QWEN3_30B_EP.read_text(), QWEN3_30B_EP.name, path=QWEN3_30B_EP, fsdp2_yaml=yaml_text
    )
    assert info.train.strategy.recompute == "none"
    assert any("name no decoder layer" in w for w in info.warnings)


def test_other_recompute_modules_entries_stay():
    """DeepSeek-V4 style `mtp.layers.{*}.layer` entries stay when the layer entry changes."""
    yaml_text = (
        (FSDP2 / "pretrain_qwen3_30b_4k_fsdp2_ep_A3.yaml")
        .read_text()
        .replace(
            '  recompute: False\n  recompute_modules: ["model.layers.{*}"]',
            "  recompute: True\n  recompute_modules:\n    - model.layers.{*}\n    - mtp.layers.{*}.layer",
        )
    )
    info = read_script_text(
        QWEN3_30B_EP.read_text(), QWEN3_30B_EP.name, path=QWEN3_30B_EP, fsdp2_yaml=yaml_text
    )
    out = apply_fsdp2(
        info,
        Strategy(tp=1, dp=32, ep=8, zero=2, mbs=1, recompute="selective"),
        nnodes=2,
        nproc_per_node=16,
        yaml_reference="t.yaml",
    )
    assert yaml.safe_load(out.yaml_text)["parallel"]["recompute_modules"] == [
        "model.layers.{*}.self_attn",
        "mtp.layers.{*}.layer",
    ]


def test_sliding_and_linear_attention_are_warned():
    """GPT-OSS's sliding-window layers and Qwen3-Next's linear attention are modelled as full attention."""
    config = json.loads(GPT_OSS_CONFIG.read_text())
    warnings: list[str] = []
    model_from_hf_config(
        {**config, "layer_types": ["sliding_attention", "full_attention"]},
        seq_length=4096,
        warn=warnings.append,
    )
    model_from_hf_config(
        {**config, "full_attention_interval": 4}, seq_length=4096, warn=warnings.append
    )
    assert "sliding_attention layers" in warnings[0] and "linear_attention layers" in warnings[1]


def _targets(info, nodes: int):
    """Strategies over the fixture's devices: tp, cp (both types), ep, recompute kinds, ZeRO 2 and 3."""
    world = nodes * 16
    eps = (1, 4) if info.model.is_moe else (1,)
    for tp, cp, ep, rc, zero, algo in itertools.product(
        (1, 2),
        (1, 2),
        eps,
        ("none", "selective", "full"),
        (2, 3),
        ("ulysses_cp_algo", "megatron_cp_algo"),
    ):
        if cp == 1 and algo != "ulysses_cp_algo":
            continue
        dp = world // (tp * cp)
        extra = (
            {"recompute_method": "block", "recompute_num_layers": info.model.num_layers}
            if rc == "full"
            else {}
        )
        yield Strategy(
            tp=tp,
            dp=dp,
            cp=cp,
            cp_algo=algo if cp > 1 else None,
            ep=ep,
            etp=tp if info.model.is_moe else None,
            zero=zero,
            mbs=1,
            recompute=rc,
            **extra,
        )


@pytest.mark.parametrize("script", [QWEN3_14B, GPT_OSS_128K, QWEN3_30B_EP], ids=lambda p: p.stem)
def test_apply_then_read_gives_the_strategy(script):
    """read(apply(s)) == s; only owned keys change in the YAML copy; bash -n passes."""
    info = _read(script)
    before = yaml.safe_load(info.fsdp2.yaml_text)
    for target in _targets(info, info.train.nnodes):
        out = apply_fsdp2(
            info,
            target,
            nnodes=info.train.nnodes,
            nproc_per_node=16,
            yaml_reference="tuned.yaml",
            global_batch_size=128,
        )
        check = read_script_text(
            out.text,
            script.name,
            path=script,
            fsdp2_yaml=out.yaml_text,
            model_config=info.fsdp2.model_config_path,
        )
        assert (check.train.strategy, check.train.global_batch_size) == (target, 128), (
            target.label()
        )
        assert bash_syntax_ok(out.text)[0]
        after = yaml.safe_load(out.yaml_text)
        for section in set(before) | set(after):
            for key in set(before.get(section) or {}) | set(after.get(section) or {}):
                if key not in OWNED.get(section, ()):
                    assert before[section].get(key) == after[section].get(key), (section, key)


def test_recompute_modules_follow_the_recompute_kind():
    """Selective -> full replaces the attention-only entry by the whole layer (the YAML's comments stay);
    full -> selective writes the attention; none leaves the list alone."""
    info = _read(QWEN3_14B)
    full = Strategy(
        tp=1,
        dp=16,
        zero=3,
        mbs=1,
        recompute="full",
        recompute_method="block",
        recompute_num_layers=40,
    )
    out = apply_fsdp2(info, full, nnodes=1, nproc_per_node=16, yaml_reference="t.yaml")
    assert (
        "  # only the attention of each layer is recomputed\n  recompute_modules:\n    - model.layers.{*}\n"
        in out.yaml_text
    )
    none = apply_fsdp2(
        info,
        full.replace(recompute="none", recompute_method=None, recompute_num_layers=None),
        nnodes=1,
        nproc_per_node=16,
        yaml_reference="t.yaml",
    )
    assert (
        "    - model.layers.{*}.self_attn\n" in none.yaml_text
        and "  recompute: False\n" in none.yaml_text
    )
    info = _read(QWEN3_30B_EP)
    out = apply_fsdp2(
        info,
        Strategy(tp=1, dp=32, ep=8, zero=2, mbs=1, recompute="selective"),
        nnodes=2,
        nproc_per_node=16,
        yaml_reference="t.yaml",
    )
    assert (
        "  recompute: True\n  recompute_modules:\n    - model.layers.{*}.self_attn\n"
        in out.yaml_text
    )


def test_zero_level_sets_reshard_after_forward():
    """ZeRO 3 <-> 2 flips reshard_after_forward where it is: on the launch line in place, in the YAML
    with its comment kept."""
    info = _read(QWEN3_14B)
    out = apply_fsdp2(
        info,
        Strategy(tp=1, dp=16, zero=2, mbs=1),
        nnodes=1,
        nproc_per_node=16,
        yaml_reference="t.yaml",
    )
    assert "    --parallel.reshard_after_forward False \\\n" in out.text
    info = _read(QWEN3_30B_EP)
    out = apply_fsdp2(
        info,
        Strategy(tp=1, dp=32, ep=8, zero=3, mbs=1),
        nnodes=2,
        nproc_per_node=16,
        yaml_reference="t.yaml",
    )
    assert (
        "  reshard_after_forward: True   # keep the gathered weights until the backward\n"
        in out.yaml_text
    )
    assert (
        "--parallel.ep_size=8" in out.text
        and "--training.gradient_accumulation_steps=$GA" in out.text
    )


def test_unsharded_target_leaves_reshard_alone():
    """fsdp_size 1 (no sharding): reshard_after_forward means nothing and is not written."""
    info = _read(QWEN3_30B_EP)
    out = apply_fsdp2(
        info,
        Strategy(tp=1, dp=32, ep=8, zero=0, mbs=1),
        nnodes=2,
        nproc_per_node=16,
        yaml_reference="t.yaml",
    )
    assert (
        "  reshard_after_forward: False   #" in out.yaml_text
        and "--parallel.fsdp_size=1" in out.text
    )


def _copy(tmp_path: Path) -> None:
    for item in FSDP2.iterdir():
        (shutil.copytree if item.is_dir() else shutil.copy)(item, tmp_path / item.name)


def test_cli_apply_keeps_the_original_yaml(tmp_path):
    """`apply` on the 14B launch: a tuned script and YAML copy that inspect reads back; the original
    YAML's bytes never change."""
    _copy(tmp_path)
    yaml_file = tmp_path / "pretrain_qwen3_14b_4k_fsdp2_A3_optimized.yaml"
    original = yaml_file.read_bytes()
    strategy = tmp_path / "s.json"
    strategy.write_text(
        json.dumps(
            {
                "tp": 2,
                "dp": 8,
                "zero": 2,
                "mbs": 1,
                "recompute": "full",
                "recompute_method": "block",
                "recompute_num_layers": 40,
            }
        )
    )
    out = tmp_path / "out" / "tuned.sh"
    proc = run_cli("apply", str(tmp_path / QWEN3_14B.name), str(strategy), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert yaml_file.read_bytes() == original
    proc = run_cli(
        "inspect",
        str(out),
        "--model-config",
        str(FSDP2 / "models" / "Qwen3-14B" / "config.json"),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)["strategy"]
    assert (got["tp"], got["dp"], got["zero"], got["recompute"]) == (2, 8, 2, "full")


def test_all_on_the_expert_parallel_launch_round_trips(tmp_path):
    """`all` on two nodes: proven optimum; the tuned launch and its YAML copy read back as the best."""
    summary, script = run_all_analytic(
        QWEN3_30B_EP, tmp_path, "--max-mbs", "1", "--num-nodes", "2", "--top-k", "1"
    )
    assert summary["status"] == "optimal"
    best = Strategy.from_dict(summary["best"]["strategy"])
    assert best.pp == 1 and best.zero in (2, 3)
    info = read_script(script, model_config=FSDP2 / "models" / "Qwen3-30B-A3B" / "config.json")
    assert info.train.strategy == best and info.train.global_batch_size == 64


def test_yaml_lists_block_flow_and_quoting():
    """A block sequence (indented or at the key's level) or a flow list is replaced by a block
    sequence; an item YAML would misread is quoted; a missing key gets its list."""
    text = "parallel:\n  recompute_modules:\n  - a\n  - b  # x\n  cp_size: 1\ntraining:\n  lr: 1\n"
    out = set_yaml_values(text, {"parallel.recompute_modules": ["*lm_head", "c"]})
    assert (
        out
        == 'parallel:\n  recompute_modules:\n  - "*lm_head"\n  - c\n  cp_size: 1\ntraining:\n  lr: 1\n'
    )
    out = set_yaml_values(
        'parallel:\n  recompute_modules: ["a"]  # keep\n\n  cp_size: 2\n',
        {"parallel.recompute_modules": ["model.layers.{*}"]},
    )
    assert (
        out == "parallel:\n  recompute_modules:  # keep\n    - model.layers.{*}\n\n  cp_size: 2\n"
    )
    out = set_yaml_values("parallel:\n  cp_size: 2\n", {"parallel.recompute_modules": ["m"]})
    assert yaml.safe_load(out)["parallel"] == {"recompute_modules": ["m"], "cp_size": 2}


def test_search_space_has_zero_2_and_3():
    """FSDP2 can say ZeRO-3 (reshard_after_forward True) and ZeRO-2 (False): both are searched."""
    info = _read(QWEN3_30B_EP)
    space = search_space_for(info, info.version_range)
    assert space.zero_levels == (2, 3) and space.pp == (1,)


@pytest.mark.parametrize("nodes, cp", [(1, 16), (1, 4), (8, 32)])
def test_apply_to_another_node_count(nodes, cp):
    """The cp-32 launch for 4 nodes written for 1 or 8: the old cp need not fit the new device count
    between the writer's edits."""
    info = _read(GPT_OSS_128K)
    target = Strategy(
        tp=1,
        dp=nodes * 16 // cp,
        cp=cp,
        cp_algo="megatron_cp_algo",
        ep=2,
        etp=1,
        zero=3,
        mbs=1,
        recompute="full",
        recompute_method="block",
        recompute_num_layers=24,
    )
    out = apply_fsdp2(
        info, target, nnodes=nodes, nproc_per_node=16, yaml_reference="t.yaml", global_batch_size=64
    )
    check = read_script_text(
        out.text,
        GPT_OSS_128K.name,
        path=GPT_OSS_128K,
        fsdp2_yaml=out.yaml_text,
        model_config=GPT_OSS_CONFIG,
    )
    assert (check.train.strategy, check.train.nnodes) == (target, nodes)
    assert f"  cp_size: {cp}\n  cp_type: ring\n" in out.yaml_text
