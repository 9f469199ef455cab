"""Overlap switches, p2p overlap by version, activation-function recompute and the pp-2 interleaved example."""

from __future__ import annotations

import pytest
from script_support import FIXTURES

from tinker_opt.emit.script_writer import apply_strategy
from tinker_opt.errors import StrategyError
from tinker_opt.expressible import expressible_strategy
from tinker_opt.rules import FrameworkRules, check_strategy
from tinker_opt.script import versions
from tinker_opt.script.reader import inspect_dict, read_script, read_script_text
from tinker_opt.specs import ClusterSpec

QWEN3_32B = FIXTURES / "pretrain_qwen3_32b_ptd.sh"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_qwen3_32b_interleaved_pp2_is_valid_for_its_version():
    """MindSpeed-LLM's Qwen3-32B example (pp 2, 64 layers, interleaved) passes the rules and the writer."""
    info = read_script(QWEN3_32B)
    s = info.train.strategy
    assert (s.pp, s.vpp, info.train.overlap_p2p_comm) == (2, 8, True)
    cluster = ClusterSpec(num_nodes=2, devices_per_node=8, memory_limit_mb=60000)
    check_strategy(
        s,
        info.model,
        cluster,
        info.train.global_batch_size,
        FrameworkRules(overlap_p2p_comm=info.train.overlap_p2p_comm),
    )
    for version in (None, "2.2.0"):
        vr = versions.resolve(version, info.text, info.train.framework.flavour)
        assert expressible_strategy(s, info, vr, world=16) == s
    vpp4 = read_script_text(info.text.replace("VPP=4", "VPP=8")).train.strategy
    assert vpp4.vpp == 4
    assert (
        expressible_strategy(vpp4, info, versions.resolve("2.2.0", info.text, "mcore"), world=16)
        == vpp4
    )


def test_interleaved_pp2_refused_where_p2p_overlap_is_off():
    """Before MindSpeed-LLM 2.0.0 (Megatron core 0.6) or with --no-overlap-p2p-communication, pp 2 + vpp fails."""
    info = read_script(QWEN3_32B)
    with pytest.raises(StrategyError, match="pipeline size >= 3"):
        expressible_strategy(
            info.train.strategy, info, versions.resolve("1.0.0", info.text, "mcore"), world=16
        )
    off = read_script_text(
        info.text.replace(
            "--overlap-grad-reduce", "--overlap-grad-reduce \\\n    --no-overlap-p2p-communication"
        )
    )
    assert off.train.overlap_p2p_comm is False
    assert inspect_dict(off)["framework"]["overlap_p2p_comm"] is False


@pytest.mark.parametrize(
    "version, expected",
    [("1.0.0", False), ("2.0.0", True), ("core_v0.7", False), ("core_v0.8", True)],
)
def test_p2p_overlap_default_by_version(version, expected):
    """The interleaved schedule overlaps p2p by default from Megatron core_v0.8 / MindSpeed-LLM 2.0.0."""
    family, key = versions.parse_version(version, versions.MINDSPEED)
    assert versions.p2p_overlap_default(versions.VersionRange(family, exact=key)) is expected


def test_overlaps_read_and_inspected():
    """inspect --json reports the overlap switches, None where they do not apply."""
    info = read_script(FIXTURES / "pretrain_qwen3_30b_a3b_4k_A3_ptd.sh")
    strategy = inspect_dict(info)["strategy"]
    assert strategy["overlap_grad_reduce"] is True and strategy["overlap_moe_comm"] is True
    dense = inspect_dict(read_script(FIXTURES / "pretrain_llama2_7b_ptd.sh"))["strategy"]
    assert dense["overlap_moe_comm"] is None
    assert (dense["overlap_param_gather"] is None) == (dense["zero"] == 0)


@pytest.mark.parametrize("version, flag", [("2.2.0", "--use-ascend-mc2"), ("2.1.0", "--use-mc2")])
def test_tp_overlap_flag_follows_the_version(version, flag):
    """MindSpeed's MC2 switch is --use-mc2 before 2.2.0 and --use-ascend-mc2 from it; off removes it."""
    text = _text("pretrain_qwen25_7b_32k_ptd.sh")
    info = read_script_text(text)
    s = info.train.strategy.replace(
        tp=2,
        pp=1,
        cp=1,
        dp=info.train.strategy.world_size // 2,
        sp=True,
        tp_comm_overlap=True,
        num_layer_list=None,
        vpp=1,
    )
    out = apply_strategy(
        text, s, nnodes=info.train.nnodes, nproc_per_node=info.train.nproc_per_node, version=version
    )
    assert flag in out.text and read_script_text(out.text).train.strategy.tp_comm_overlap is True
    back = apply_strategy(
        out.text,
        s.replace(tp_comm_overlap=False),
        nnodes=info.train.nnodes,
        nproc_per_node=info.train.nproc_per_node,
        version=version,
    )
    assert flag not in back.text


def test_megatron_moe_overlap_flag():
    """Megatron-LM's MoE all-to-all overlap is --overlap-moe-expert-parallel-comm (core_v0.14+)."""
    text = _text("train_mixtral_8x7b_distributed.sh")
    info = read_script_text(text)
    # Megatron-Core refuses it with the script's full recompute (transformer_config.py): selective.
    s = info.train.strategy.replace(
        overlap_moe_comm=True,
        recompute="selective",
        recompute_method=None,
        recompute_num_layers=None,
    )
    out = apply_strategy(
        text,
        s,
        nnodes=info.train.nnodes,
        nproc_per_node=info.train.nproc_per_node,
        version="core_v0.14",
    )
    assert "--overlap-moe-expert-parallel-comm" in out.text
    full = info.train.strategy.replace(overlap_moe_comm=True)
    with pytest.raises(StrategyError, match="no full recompute"):
        apply_strategy(
            text,
            full,
            nnodes=info.train.nnodes,
            nproc_per_node=info.train.nproc_per_node,
            version="core_v0.14",
        )
    with pytest.raises(StrategyError, match="--overlap-moe-expert-parallel-comm"):
        apply_strategy(
            text,
            s,
            nnodes=info.train.nnodes,
            nproc_per_node=info.train.nproc_per_node,
            version="core_v0.10",
        )


def test_activation_function_recompute_read_where_the_version_has_it():
    """--recompute-activation-function[-num-layers] land in the TrainSpec (MindSpeed only)."""
    text = _text("pretrain_qwen3_30b_a3b_4k_A3_ptd.sh")
    info = read_script_text(text)
    assert info.train.recompute_activation_function is True
    with_layers = read_script_text(
        text.replace(
            "--recompute-activation-function",
            "--recompute-activation-function --recompute-activation-function-num-layers 3",
            1,
        )
    )
    assert with_layers.train.recompute_activation_function_num_layers == 3
    assert (
        read_script(FIXTURES / "train_gpt3_175b_distributed.sh").train.recompute_activation_function
        is False
    )


@pytest.mark.parametrize("method, layers", [("uniform", 1), ("block", 3)])
def test_recompute_methods_round_trip(method, layers):
    """apply then inspect gives back the recompute method and --recompute-num-layers."""
    text = _text("pretrain_llama2_7b_ptd.sh")
    info = read_script_text(text)
    s = info.train.strategy.replace(
        recompute="full", recompute_method=method, recompute_num_layers=layers
    )
    out = apply_strategy(
        text, s, nnodes=info.train.nnodes, nproc_per_node=info.train.nproc_per_node
    )
    back = inspect_dict(read_script_text(out.text))["strategy"]
    assert (back["recompute"], back["recompute_method"], back["recompute_num_layers"]) == (
        "full",
        method,
        layers,
    )
