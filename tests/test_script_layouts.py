"""MoE and pipeline layout forms of a launch script: read, reported by inspect, kept by apply."""

from __future__ import annotations

import pytest
from script_support import FIXTURES

from tinker_opt.emit.noop_layers import computing_layer_strategy
from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.errors import ScriptError, StrategyError
from tinker_opt.rules import check_strategy
from tinker_opt.script.layer_pattern import parse_layer_freq
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
    """Each dispatcher is read, reported by inspect and survives apply; those the model does not
    price as they run are named in a warning."""
    deepep = " --moe-enable-deepep" if dispatcher == "flex" else ""
    info = read_script_text(
        megatron_moe_script(f"--moe-token-dispatcher-type {dispatcher}{deepep}", pp=1)
    )
    model = inspect_dict(info)["model"]
    assert model["moe_token_dispatcher_type"] == dispatcher
    assert model["moe_enable_deepep"] == (dispatcher == "flex")
    warned = any("--moe-token-dispatcher-type" in w for w in info.warnings)
    assert warned == (dispatcher in ("allgather", "flex"))
    tuned = apply_strategy(info.text, info.train.strategy.replace(ep=2), nnodes=1, nproc_per_node=8)
    back = read_script_text(tuned.text)
    assert back.model.moe_token_dispatcher_type == dispatcher
    assert back.model.moe_enable_deepep == (dispatcher == "flex")


def test_mtp_layers_read_warned_and_kept():
    info = read_script_text(megatron_moe_script("--mtp-num-layers 1"))
    assert inspect_dict(info)["model"]["mtp_num_layers"] == 1
    assert any("--mtp-num-layers 1" in w for w in info.warnings)
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
        megatron_moe_script("--made-up-knob 3 --moe-grouped-gemm --made-up-knob 4 --lr 1e-4")
    )
    unknown = [w for w in info.warnings if "does not know" in w]
    assert len(unknown) == 1 and unknown[0].count("--made-up-knob") == 1
    assert "--moe-grouped-gemm" not in unknown[0] and "--lr" not in unknown[0]
    unpriced = [w for w in info.warnings if "does not include" in w]
    assert len(unpriced) == 1 and "--moe-grouped-gemm" in unpriced[0]
    assert "--made-up-knob" not in unpriced[0]
    framework = inspect_dict(info)["framework"]
    assert framework["unknown_flags"] == ["--made-up-knob"]
    assert framework["not_priced_flags"] == ["--moe-grouped-gemm"]


def test_search_warnings_name_unknown_and_model_settings():
    """search.log and summary.json take the same list (verbs/search.py _script_warnings)."""
    from tinker_opt.verbs.search import _script_warnings

    info = read_script_text(megatron_moe_script("--made-up-knob --mtp-num-layers 1"))
    warnings = _script_warnings(info)
    assert any("--made-up-knob" in w for w in warnings)
    assert any("--mtp-num-layers 1" in w for w in warnings)
    assert any("--moe-token-dispatcher-type allgather" in w for w in warnings)
