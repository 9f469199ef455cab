"""MindSpeed-LLM FSDP2 launches: reading the YAML, overrides and config.json; writing them back."""

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
from tinker_opt.errors import ScriptError, StrategyError
from tinker_opt.script.reader import read_script, read_script_text
from tinker_opt.strategy import Strategy

FSDP2 = Path(__file__).parent / "fixtures" / "fsdp2"
QWEN3_8B = FSDP2 / "pretrain_qwen3_8b_4k_fsdp2_A3.sh"
QWEN3_30B = FSDP2 / "pretrain_qwen3_30b_4k_fsdp2_A3.sh"
GPT_OSS = FSDP2 / "pretrain_gpt_oss_20b_4k_fsdp2_A3.sh"
GPT_OSS_CONFIG = FSDP2 / "gpt_oss_20b_config.json"


def test_dense_gqa_model_from_config_json():
    """Qwen3-8B: the shape comes from config.json, the sequence from data.cutoff_len."""
    model = read_script(QWEN3_8B).model
    assert (model.num_layers, model.hidden_size, model.ffn_hidden_size) == (36, 4096, 12288)
    assert (model.num_attention_heads, model.num_query_groups, model.kv_channels) == (32, 8, 128)
    assert (model.seq_length, model.vocab_size, model.padded_vocab_size) == (4096, 151936, 151936)
    assert (
        model.swiglu
        and model.normalization == "RMSNorm"
        and model.untie_embeddings_and_output_weights
    )
    assert not model.is_moe and model.use_flash_attn


def test_dense_strategy_from_overrides():
    """The launch line's --parallel.fsdp_size 16 and batch settings give the strategy (ZeRO-3 over 16)."""
    info = read_script(QWEN3_8B)
    assert info.train.strategy == Strategy(tp=1, pp=1, dp=16, zero=3, mbs=1)
    assert info.train.global_batch_size == 16 and info.train.framework.flavour == "fsdp2"
    assert "parallel.fsdp_size" in info.fsdp2.overrides


def test_moe_model_and_yaml_only_settings():
    """Qwen3-30B-A3B: MoE keys of config.json; every knob in the YAML (recompute on)."""
    info = read_script(QWEN3_30B)
    model = info.model
    assert (model.num_experts, model.moe_router_topk, model.moe_ffn_hidden_size) == (128, 8, 768)
    assert (model.num_layers, model.num_query_groups) == (48, 4)
    assert info.train.strategy.recompute == "full" and info.train.strategy.ep == 1
    assert not info.fsdp2.overrides


def test_missing_model_path_names_it():
    """A model path not on this machine is a one-line error naming it and --model-config."""
    with pytest.raises(
        ScriptError, match=r"/home/data/gpt-oss-20b-hf/config\.json.*--model-config"
    ):
        read_script(GPT_OSS)


def test_model_config_option_stands_in():
    """--model-config gives the shape (GPT-OSS: 32 experts, top-4) when the path is absent."""
    info = read_script(GPT_OSS, model_config=GPT_OSS_CONFIG)
    assert (info.model.num_experts, info.model.moe_router_topk, info.model.kv_channels) == (
        32,
        4,
        64,
    )
    assert info.train.strategy.ep == 4 and info.train.strategy.recompute == "full"


def _copy(tmp_path: Path, script: Path) -> Path:
    for item in FSDP2.iterdir():
        target = tmp_path / item.name
        (shutil.copytree if item.is_dir() else shutil.copy)(item, target)
    return tmp_path / script.name


def test_launch_line_wins_over_yaml(tmp_path):
    """`--parallel.tp_size 2` on the launch line overrides the YAML's tp_size: 1."""
    script = _copy(tmp_path, QWEN3_30B)
    text = script.read_text().replace(
        "pretrain_qwen3_30b_4k_fsdp2_A3.yaml \\",
        "pretrain_qwen3_30b_4k_fsdp2_A3.yaml --parallel.tp_size 2 \\",
    )
    script.write_text(text)
    info = read_script(script)
    assert (info.train.strategy.tp, info.train.strategy.dp) == (2, 8)


def test_missing_yaml_is_one_line_error(tmp_path):
    script = _copy(tmp_path, QWEN3_8B)
    (tmp_path / "pretrain_qwen3_8b_4k_fsdp2_A3.yaml").unlink()
    with pytest.raises(ScriptError, match=r"FSDP2 config .* not found"):
        read_script(script)


def _targets(info):
    """Every strategy the 16-device FSDP2 search space can return for this model."""
    eps = (1, 2, 4, 8) if info.model.is_moe else (1,)
    for tp, cp, ep, mbs, rc in itertools.product((1, 2, 4), (1, 2), eps, (1,), ("none", "full")):
        dp = 16 // (tp * cp)
        if ep > dp * cp:
            continue
        extra = (
            {"recompute_method": "block", "recompute_num_layers": info.model.num_layers}
            if rc == "full"
            else {}
        )
        yield Strategy(
            tp=tp,
            dp=dp,
            cp=cp,
            cp_algo="ulysses_cp_algo" if cp > 1 else None,
            ep=ep,
            etp=tp if info.model.is_moe else None,
            zero=3,
            mbs=mbs,
            recompute=rc,
            **extra,
        )


@pytest.mark.parametrize("script", [QWEN3_8B, QWEN3_30B], ids=lambda p: p.stem)
def test_apply_then_read_gives_the_strategy(script):
    """read(apply(s)) == s for every FSDP2 strategy; only owned keys change; bash -n passes."""
    info = read_script(script)
    owned = (
        "tp_size",
        "fsdp_size",
        "cp_size",
        "cp_type",
        "ep_size",
        "ep_fsdp_size",
        "recompute",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
    )
    for target in _targets(info):
        out = apply_fsdp2(
            info,
            target,
            nnodes=1,
            nproc_per_node=16,
            yaml_reference="tuned.yaml",
            global_batch_size=32,
        )
        check = read_script_text(out.text, script.name, path=script, fsdp2_yaml=out.yaml_text)
        assert check.train.strategy == target and check.train.global_batch_size == 32
        assert bash_syntax_ok(out.text)[0]
        before, after = yaml.safe_load(info.fsdp2.yaml_text), yaml.safe_load(out.yaml_text)
        for section in before:
            for key in set(before[section] or {}) | set(after[section] or {}):
                if key not in owned:
                    assert before[section].get(key) == after[section].get(key), key


def test_original_yaml_and_comments_kept(tmp_path):
    """apply writes a tuned copy beside the output; the original YAML's bytes never change."""
    script = _copy(tmp_path, QWEN3_30B)
    yaml_file = tmp_path / "pretrain_qwen3_30b_4k_fsdp2_A3.yaml"
    original = yaml_file.read_bytes()
    strategy = tmp_path / "s.json"
    strategy.write_text(json.dumps({"tp": 2, "dp": 8, "ep": 4, "dist_opt": True, "mbs": 1}))
    proc = run_cli("apply", str(script), str(strategy), "-o", str(tmp_path / "out" / "tuned.sh"))
    assert proc.returncode == 0, proc.stderr
    assert yaml_file.read_bytes() == original
    tuned_yaml = (tmp_path / "out" / "tuned.yaml").read_text()
    assert "# converted weights (mergeExperts)" in tuned_yaml
    assert (
        "  tp_size: 2\n" in tuned_yaml
        and "  ep_size: 4\n" in tuned_yaml
        and "  recompute: False\n" in tuned_yaml
    )
    proc = run_cli(
        "inspect",
        str(tmp_path / "out" / "tuned.sh"),
        "--model-config",
        str(FSDP2 / "models" / "Qwen3-30B-A3B" / "config.json"),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)["strategy"]
    assert (got["tp"], got["dp"], got["ep"], got["recompute"]) == (2, 8, 4, "none")


def test_cli_inspect_missing_model_one_line():
    proc = run_cli("inspect", str(GPT_OSS))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "--model-config" in proc.stderr


@pytest.mark.parametrize(
    "strategy, message",
    [
        (Strategy(tp=1, pp=2, dp=8, zero=1), "pipeline"),
        (
            Strategy(
                tp=1,
                dp=16,
                cp=1,
                zero=1,
                recompute="full",
                recompute_method="block",
                recompute_num_layers=4,
            ),
            "every decoder layer",
        ),
    ],
)
def test_inexpressible_strategies(strategy, message):
    with pytest.raises(StrategyError, match=message):
        apply_fsdp2(
            read_script(QWEN3_8B), strategy, nnodes=1, nproc_per_node=16, yaml_reference="t.yaml"
        )


def test_yaml_edit_in_place_insert_and_new_section():
    """A value changes in place (comment kept), a missing key joins its section, a missing section is added."""
    text = "parallel:\n  fsdp_size: 8   # shards\n  recompute: False\n\ntraining:\n  lr: 1e-05\n"
    out = set_yaml_values(
        text,
        {
            "parallel.fsdp_size": 16,
            "parallel.tp_size": 2,
            "training.gradient_accumulation_steps": 4,
            "data.cutoff_len": 8192,
        },
    )
    assert "  fsdp_size: 16   # shards\n" in out and "  lr: 1e-05\n" in out
    data = yaml.safe_load(out)
    assert data["parallel"] == {"fsdp_size": 16, "tp_size": 2, "recompute": False}
    assert data["training"]["gradient_accumulation_steps"] == 4 and data["data"] == {
        "cutoff_len": 8192
    }


def test_all_on_an_fsdp2_launch_round_trips(tmp_path):
    """`all` (analytic device) proves an optimum and writes each config with its YAML; the tuned
    launch reads back as the best strategy."""
    summary, script = run_all_analytic(
        QWEN3_8B, tmp_path, "--max-npu", "16", "--prof-tp", "1,2", "--max-mbs", "1", "--top-k", "2"
    )
    assert summary["status"] == "optimal"
    best = Strategy.from_dict(summary["best"]["strategy"])
    assert best.pp == 1 and best.zero == 3
    assert script.with_suffix(".yaml").is_file()
    info = read_script(script, model_config=FSDP2 / "models" / "Qwen3-8B" / "config.json")
    assert info.train.strategy == best
