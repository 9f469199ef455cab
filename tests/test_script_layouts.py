"""MoE and pipeline layout forms of a launch script: read, reported by inspect, kept by apply."""

from __future__ import annotations

import pytest
from script_support import FIXTURES

from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.errors import ScriptError, StrategyError
from tinker_opt.rules import check_strategy
from tinker_opt.script.layer_pattern import parse_layer_freq
from tinker_opt.script.noop_layers import computing_layer_strategy
from tinker_opt.script.reader import inspect_dict, read_script, read_script_text
from tinker_opt.specs import ClusterSpec

GLM45_AIR = FIXTURES / "pretrain_glm45_air_106b_4k_ptd.sh"


def megatron_moe_script(*extra: str, num_layers: int = 61, pp: int = 1) -> str:
    """A Megatron-LM MoE launch (DeepSeek-V3's layer count) with extra arguments."""
    args = " ".join(extra)
    return (
        "#!/bin/bash\n"
        "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\\n"
        f"    --num-layers {num_layers} --hidden-size 1024 --num-attention-heads 16 \\\n"
        "    --seq-length 1024 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 8 \\\n"
        f"    --pipeline-model-parallel-size {pp} --num-experts 8 --bf16 {args}\n"
    )


def test_deepseek_v3_list_form_gives_3_dense_and_58_moe():
    """`--moe-layer-freq "([0]*3+[1]*58)"` is Megatron's list form: 3 dense then 58 MoE layers."""
    info = read_script_text(megatron_moe_script('--moe-layer-freq "([0]*3+[1]*58)"'))
    kinds = info.model.layer_kinds()
    assert kinds[:3] == ("dense",) * 3 and kinds.count("dense") == 3
    assert kinds.count("moe") == 58
    assert inspect_dict(info)["model"]["moe_layer_pattern"][:4] == [0, 0, 0, 1]


def test_first_k_dense_replace_and_integer_frequency():
    """MindSpeed's `--first-k-dense-replace k` makes the first k layers dense; an integer
    frequency f makes every f-th layer MoE (layer i when i % f == 0)."""
    info = read_script_text(megatron_moe_script("--first-k-dense-replace 3 --moe-layer-freq 2"))
    kinds = info.model.layer_kinds()
    assert kinds[:5] == ("dense", "dense", "dense", "dense", "moe")
    assert info.model.moe_layer_pattern is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", 1), ("-1", -1), ("[1,0,1]", (1, 0, 1)), ("'([0]*1+[1]*2)*2'", (0, 1, 1, 0, 1, 1))],
)
def test_layer_freq_forms(text, expected):
    """Integers (MindSpeed scripts write -1), list literals, quoted and repeated forms."""
    assert parse_layer_freq(text) == expected


@pytest.mark.parametrize(
    "text", ['__import__("os").system("true")', "[2]*3", "[1]*10**9", "[1]*1000000", "x"]
)
def test_layer_freq_never_executes_code(text):
    """Anything but integer / 0-1 list literals, + and * is refused, never evaluated."""
    with pytest.raises(ScriptError, match="--moe-layer-freq"):
        parse_layer_freq(text)


def test_layer_freq_list_must_cover_every_layer():
    with pytest.raises(ScriptError, match="lists 4 layers but --num-layers is 61"):
        read_script_text(megatron_moe_script("--moe-layer-freq [1,1,1,1]"))


@pytest.mark.parametrize("dispatcher", ["allgather", "alltoall", "alltoall_seq", "flex"])
def test_dispatcher_read_reported_and_kept(dispatcher):
    """Each dispatcher is read, reported by inspect and survives apply; each is priced (no
    warning)."""
    deepep = " --moe-enable-deepep" if dispatcher == "flex" else ""
    info = read_script_text(
        megatron_moe_script(f"--moe-token-dispatcher-type {dispatcher}{deepep}", pp=1)
    )
    model = inspect_dict(info)["model"]
    assert model["moe_token_dispatcher_type"] == dispatcher
    assert model["moe_enable_deepep"] == (dispatcher == "flex")
    warned = any("--moe-token-dispatcher-type" in w for w in info.warnings)
    assert not warned
    tuned = apply_strategy(info.text, info.train.strategy.replace(ep=2), nnodes=1, nproc_per_node=8)
    back = read_script_text(tuned.text)
    assert back.model.moe_token_dispatcher_type == dispatcher
    assert back.model.moe_enable_deepep == (dispatcher == "flex")


def test_mtp_layers_read_priced_and_kept():
    info = read_script_text(megatron_moe_script("--mtp-num-layers 1"))
    assert inspect_dict(info)["model"]["mtp_num_layers"] == 1
    assert not any("--mtp-num-layers" in w for w in info.warnings)
    tuned = apply_strategy(
        info.text, info.train.strategy.replace(tp=2, dp=4, sp=True), nnodes=1, nproc_per_node=8
    )
    assert read_script_text(tuned.text).model.mtp_num_layers == 1


def test_glm45_air_noop_padding_splits_as_written():
    """48 script layers (46 + noop 1,47) over pp 4: 12 script layers each, 11,12,12,11 computing."""
    info = read_script(GLM45_AIR)
    assert info.model.num_layers == 46 and info.num_layers_in_script == 48
    strategy = info.train.strategy
    assert strategy.pp == 4 and strategy.num_layer_list is None
    computing = computing_layer_strategy(strategy, info.model.noop_layers, 48)
    assert computing.num_layer_list == (11, 12, 12, 11)
    cluster = ClusterSpec(num_nodes=4, devices_per_node=8, memory_limit_mb=64000)
    check_strategy(computing, info.model, cluster, info.train.global_batch_size)
    with pytest.raises(StrategyError, match=r"num_layers \(46\) is not divisible by pp \(4\)"):
        check_strategy(strategy, info.model, cluster, info.train.global_batch_size)


def test_block_recompute_count_above_a_stage_means_every_layer():
    """ModelLink's Mixtral passes --recompute-num-layers 32 with pp 8: block reads it as every
    layer of the stage (accepted); uniform beyond the largest chunk is still refused."""
    info = read_script(GLM45_AIR)
    computing = computing_layer_strategy(info.train.strategy, info.model.noop_layers, 48)
    cluster = ClusterSpec(num_nodes=4, devices_per_node=8, memory_limit_mb=64000)
    gbs = info.train.global_batch_size
    check_strategy(computing.replace(recompute_num_layers=48), info.model, cluster, gbs)
    uniform = computing.replace(recompute_method="uniform", recompute_num_layers=48)
    with pytest.raises(StrategyError, match="recompute_num_layers between 1"):
        check_strategy(uniform, info.model, cluster, gbs)


def test_unknown_flags_listed_once_apart_from_unpriced():
    """A flag the reader does not know is named once in its own warning, apart from the flags it
    knows but does not price; inspect lists both."""
    info = read_script_text(
        megatron_moe_script("--made-up-knob 3 --moe-permute-fusion --made-up-knob 4 --lr 1e-4")
    )
    unknown = [w for w in info.warnings if "does not know" in w]
    assert len(unknown) == 1 and unknown[0].count("--made-up-knob") == 1
    assert "--moe-permute-fusion" not in unknown[0] and "--lr" not in unknown[0]
    unpriced = [w for w in info.warnings if "does not include" in w]
    assert len(unpriced) == 1 and "--moe-permute-fusion" in unpriced[0]
    assert "--made-up-knob" not in unpriced[0]
    framework = inspect_dict(info)["framework"]
    assert framework["unknown_flags"] == ["--made-up-knob"]
    assert framework["not_priced_flags"] == ["--moe-permute-fusion"]


@pytest.mark.parametrize("backend, deepep", [("deepep", True), ("hybridep", False)])
def test_flex_backend_names_deepep(backend, deepep):
    """Megatron-Core 0.15+ writes DeepEP as `--moe-flex-dispatcher-backend deepep`: read as DeepEP
    (no mismatch warning under flex), kept by apply; HybridEP is not DeepEP."""
    info = read_script_text(
        megatron_moe_script(
            f"--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend {backend}"
        )
    )
    assert info.model.moe_enable_deepep is deepep
    assert inspect_dict(info)["framework"]["unknown_flags"] == []
    tuned = apply_strategy(info.text, info.train.strategy.replace(ep=2), nnodes=1, nproc_per_node=8)
    assert f"--moe-flex-dispatcher-backend {backend}" in tuned.text


def test_search_warnings_name_unknown_and_model_settings():
    """search.log, summary.json and simulate take the same list (verbs/common.py script_warnings)."""
    from tinker_opt.verbs.common import script_warnings

    info = read_script_text(
        megatron_moe_script("--made-up-knob --moe-permute-fusion --moe-enable-deepep")
    )
    warnings = script_warnings(info)
    assert any("--made-up-knob" in w for w in warnings)
    assert any("--moe-permute-fusion" in w for w in warnings)
    assert any(
        "--moe-enable-deepep with --moe-token-dispatcher-type allgather" in w for w in warnings
    )


# ----------------------------------------------------------------------------------------------
# Megatron-LM pipeline layouts (script/pipeline_layout.py)
# ----------------------------------------------------------------------------------------------

GPT3 = FIXTURES / "train_gpt3_175b_distributed.sh"
"""Megatron-LM's GPT-3 175B example: 96 layers, tp 8, pp 16, 16 nodes of 8 (bash arrays)."""


def gpt3_with(*extra: str) -> str:
    """The GPT-3 example with extra model-parallel arguments after its pipeline size."""
    text = GPT3.read_text(encoding="utf-8")
    anchor = "--pipeline-model-parallel-size 16"
    assert anchor in text
    return text.replace(anchor, " ".join((anchor, *extra)), 1)


def test_deepseek_v3_layout_string():
    """Megatron's DeepSeek-V3 example `Et*3|(tt|)*29,m|L` with pp 16: vpp 2, 32 virtual stages,
    3 decoder layers on the first, 2 on each of the next 29, none on the MTP and loss stages."""
    info = read_script_text(
        megatron_moe_script(
            "--mtp-num-layers 1 --pipeline-model-parallel-layout 'Et*3|(tt|)*29,m|L'", pp=16
        ).replace("--nnodes 1", "--nnodes 16")
    )
    strategy = info.train.strategy
    assert strategy.vpp == 2 and strategy.per_virtual_stage
    assert strategy.num_layer_list == (3,) + (2,) * 29 + (0, 0)
    assert strategy.stage_layers(61) == (5,) + (4,) * 13 + (2, 2)
    assert inspect_dict(info)["strategy"]["num_layer_list"][:2] == [3, 2]


@pytest.mark.parametrize(
    "layout",
    ["Et*3|t*2L", "Ett|(t|)*3", "E|tt|tt|tt|tt|tt|tt|tt|ttL"],
)
def test_layout_errors_name_the_rule(layout):
    """A layout Megatron refuses (stage count, E/L placement, decoder count) is a ScriptError."""
    with pytest.raises(ScriptError, match="--pipeline-model-parallel-layout"):
        read_script_text(gpt3_with(f"--pipeline-model-parallel-layout '{layout}'"))


def test_account_for_embedding_and_loss():
    """num_layers + 2 split evenly over pp x vpp, one fewer on the first and last virtual stage
    (Megatron's get_num_layers_to_build): 94 + 2 over 16 x 2 is 3 each, 2 at both ends."""
    text = gpt3_with(
        "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
        "--num-virtual-stages-per-pipeline-rank 2"
    ).replace("--num-layers 96", "--num-layers 94")
    strategy = read_script_text(text).train.strategy
    assert strategy.vpp == 2
    assert strategy.chunk_layers(94) == (2,) + (3,) * 30 + (2,)


def test_layers_per_virtual_stage_count_the_embedding_and_loss():
    """`--num-layers-per-virtual-pipeline-stage 3` with both account-for switches, 94 layers, pp 16:
    Megatron's validate_args adds 1 per switch first, vpp = (94 + 2) / 16 / 3 = 2 (the ModelZoo's
    Qwen3-235B runtime.conf: NUM_LAYERS 96 for 94 layers); chunks 2, 3 x 30, 2."""
    text = gpt3_with(
        "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
        "--num-layers-per-virtual-pipeline-stage 3"
    ).replace("--num-layers 96", "--num-layers 94")
    info = read_script_text(text)
    assert info.train.strategy.vpp == 2
    assert info.train.strategy.chunk_layers(94) == (2,) + (3,) * 30 + (2,)
    assert not any("virtual pipeline" in w for w in info.warnings)


def test_layers_per_virtual_stage_not_dividing_with_the_switches_warns():
    """95 + 1 (embedding only) = 6 per stage of pp 16 does not split into chunks of 4: no virtual
    pipeline, and the warning names the counted embedding."""
    text = gpt3_with(
        "--account-for-embedding-in-pipeline-split --num-layers-per-virtual-pipeline-stage 4"
    ).replace("--num-layers 96", "--num-layers 95")
    info = read_script_text(text)
    assert info.train.strategy.vpp == 1
    assert any("(+ 1 for the account-for switches)" in w for w in info.warnings)


def test_first_last_counts_with_virtual_stages():
    """First/last stage counts with virtual stages: each rank's layers split evenly over its chunks."""
    text = gpt3_with(
        "--decoder-first-pipeline-num-layers 4 --decoder-last-pipeline-num-layers 8 "
        "--num-virtual-stages-per-pipeline-rank 2"
    )
    strategy = read_script_text(text).train.strategy
    assert strategy.num_layer_list == (4,) + (6,) * 14 + (8,)
    assert strategy.chunk_layers(96)[:2] == (2, 3) and strategy.chunk_layers(96)[-1] == 4


@pytest.mark.parametrize(
    "layers",
    [
        (4,) + (3,) * 30 + (2,),  # per virtual stage
        (4,) + (6,) * 14 + (8,),  # per rank, even chunks
        (3,) * 31 + (3,),  # even: no list
    ],
)
def test_layouts_round_trip_through_apply(layers):
    """apply writes the split (a layout string where it needs one) and reading gives it back;
    writing the script's own strategy back then changes nothing."""
    info = read_script(GPT3)
    target = info.train.strategy.replace(vpp=2, num_layer_list=layers)
    if len(set(layers)) == 1:
        target = target.replace(num_layer_list=None)
    out = apply_strategy(info.text, target, nnodes=16, nproc_per_node=8)
    back = read_script_text(out.text)
    assert back.train.strategy == target
    again = apply_strategy(out.text, back.train.strategy, nnodes=16, nproc_per_node=8)
    assert again.text == out.text


def test_layout_string_bare_inside_a_double_quoted_group():
    """In MindSpeed-style `ARGS="..."` groups the layout is written unquoted (the group keeps it one
    word); on a launch line or in an array it is single-quoted."""
    from tinker_opt.emit.strategy_plan import _inside_double_quotes

    text = 'A="--x 1 --y 2"\ntorchrun a.py --z 3\n'
    assert _inside_double_quotes(text, text.index("--y"))
    assert not _inside_double_quotes(text, text.index("--z"))


def test_mindspeed_refuses_a_layer_list_with_virtual_stages():
    """MindSpeed-LLM: "Dynamic pipeline model and virtual pipeline cannot be enabled at the same time"."""
    info = read_script(FIXTURES / "pretrain_deepseek3_671b_4k_ptd.sh")
    target = info.train.strategy.replace(vpp=2, num_layer_list=(8,) * 7 + (8,))
    with pytest.raises(StrategyError, match="virtual pipeline"):
        apply_strategy(info.text, target, nnodes=16, nproc_per_node=8)


def test_noop_layers_with_virtual_stages_keep_each_chunk():
    """DeepSeek-V3's 64 script layers (noop 61,62,63) over pp 8 x vpp 2: 4 script layers per
    virtual stage, the last holding one computing layer."""
    info = read_script(FIXTURES / "pretrain_deepseek3_671b_4k_ptd.sh")
    strategy = info.train.strategy.replace(num_layer_list=None, vpp=2)
    computing = computing_layer_strategy(strategy, info.model.noop_layers, 64)
    assert computing.num_layer_list == (4,) * 15 + (1,)
    assert computing.stage_layers(61) == (8,) * 7 + (5,)


def test_glm45_air_simulates_as_written_from_the_command_line(tmp_path):
    """`inspect` then `simulate --strategy` of GLM-4.5-Air's own strategy (refused before as
    "num_layers (46) is not divisible by pp (4)") prices 11, 12, 12, 11 computing layers."""
    import json

    from cli_support import run_cli

    profile = tmp_path / "prof"
    proc = run_cli(
        "profile", str(GLM45_AIR), "--device", "analytic", "--hardware", "910b",
        "--prof-tp", "1", "--max-mbs", "1", "--max-ep", "8", "--prof-path", str(profile),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    strategy = tmp_path / "strategy.json"
    inspected = run_cli("inspect", str(GLM45_AIR), "--json")
    strategy.write_text(json.dumps(json.loads(inspected.stdout)["strategy"]))
    proc = run_cli(
        "simulate", str(GLM45_AIR), "--profiled-data-path", str(profile),
        "--strategy", str(strategy), "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    evaluation = json.loads(proc.stdout)
    assert [stage["layers"] for stage in evaluation["stages"]] == [11, 12, 12, 11]
    assert "--mtp-num-layers" not in proc.stderr  # priced on the output stage
