"""Multi-head latent attention sub-graphs: exact weights, saved activations, analytic == measured."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.profile_support import mla_model
from tinker_opt.errors import ConfigError
from tinker_opt.hardware import load_hardware
from tinker_opt.profile.analytic import analytic_profile
from tinker_opt.profile.mla import LatentAttention
from tinker_opt.profile.runner import MeasureSettings, run_profile
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.subgraphs import build_block, saved_activation_bytes


def mla_attention_params(model, tp: int) -> int:
    """Hand count of one rank's MLA weights (mcore MLASelfAttention, RMSNorm, no biases)."""
    h, n = model.hidden_size, model.num_attention_heads // tp
    dq = model.qk_head_dim + model.qk_pos_emb_head_dim
    if model.q_lora_rank:  # down (whole on each rank) + q norm + up (column parallel)
        query = h * model.q_lora_rank + model.q_lora_rank + model.q_lora_rank * n * dq
    else:
        query = h * n * dq
    kv = (
        h * (model.kv_lora_rank + model.qk_pos_emb_head_dim)
        + model.kv_lora_rank
        + model.kv_lora_rank * n * (model.qk_head_dim + model.v_head_dim)
    )
    return query + kv + n * model.v_head_dim * h  # + linear_proj (row parallel)


def dense_layer_params(model, tp: int) -> int:
    """Two RMSNorms, MLA, SwiGLU MLP (h -> 2f/t -> h)."""
    h, f = model.hidden_size, model.ffn_hidden_size // tp
    return 2 * h + mla_attention_params(model, tp) + 3 * h * f


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("q_lora_rank", [48, None])
def test_layer_param_count_is_the_hand_formula(tp, q_lora_rank):
    """param_count and bf16 weight bytes of the MLA layer shard equal the hand formula exactly."""
    model = mla_model(q_lora_rank=q_lora_rank)
    block = build_block(model, "layer", Shape(tp=tp, sp=tp > 1))
    assert isinstance(block.attention, LatentAttention)
    assert block.param_count == dense_layer_params(model, tp)
    assert block.weight_bytes == 2 * dense_layer_params(model, tp)


def test_deepseek_v3_attention_params_at_tp2():
    """DeepSeek-V3 (h 7168, 128 heads, q/kv ranks 1536/512) holds about 100M attention weights per rank at tp 2."""
    model = replace(
        mla_model(),
        hidden_size=7168,
        num_attention_heads=128,
        num_query_groups=128,
        kv_channels=128,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        ffn_hidden_size=18432,
        seq_length=64,
    )
    with FakeTensorMode():
        block = build_block(model, "layer", Shape(tp=2, sp=True))
        params = sum(p.numel() for p in block.attention.parameters())
    assert params == mla_attention_params(model, 2) == 101_124_096


@pytest.mark.parametrize("shape", [Shape(), Shape(tp=2, sp=True, mbs=2)], ids=["tp1", "tp2-sp"])
@pytest.mark.parametrize("which", ["q_lora_rank", "kv_lora_rank"])
def test_latent_columns_are_saved(shape, which):
    """Each latent column keeps 8 bytes per local token: the norm's fp32 input, its bf16 output, the up-proj input."""

    def saved(rank: int) -> int:
        model = replace(mla_model(), **{which: rank})
        return saved_activation_bytes(build_block(model, "layer", shape, dtype=torch.bfloat16))

    tokens = model_tokens(shape)
    assert saved(48) - saved(32) == 16 * 8 * tokens


def model_tokens(shape: Shape, seq: int = 32) -> int:
    """Tokens of the norms on one rank: seq (/tp under sequence parallel) x mbs."""
    return seq // (shape.tp if shape.sp else 1) * shape.mbs


def test_flash_path_does_not_keep_the_scores():
    """With flash attention the saved bytes grow linearly with the sequence (v is padded, no math fallback)."""

    def saved(seq: int) -> int:
        return saved_activation_bytes(build_block(mla_model(seq=seq), "layer", Shape()))

    assert saved(128) == 2 * saved(64)


def test_materialised_path_keeps_the_scores():
    """Without flash attention the scores are kept: the saved bytes grow faster than the sequence."""

    def saved(seq: int) -> int:
        return saved_activation_bytes(
            build_block(mla_model(seq=seq, flash=False), "layer", Shape())
        )

    assert saved(128) > 2 * saved(64)


@pytest.mark.parametrize("shape", [Shape(tp=2, sp=True, mbs=2), Shape(cp=2)], ids=["sp", "cp"])
def test_layer_runs_forward_and_backward(shape):
    """The MLA layer maps [s_sp, b, h] to itself and gives every weight a gradient."""
    block = build_block(mla_model(), "layer", shape, dtype=torch.float32)
    (x,) = block.make_inputs()
    out = block.module(x)
    out.sum().backward()
    assert out.shape == x.shape and x.grad is not None
    assert all(p.grad is not None for p in block.module.parameters())


def test_fake_tensor_mode_counts_the_same_bytes():
    """Under FakeTensorMode the MLA MoE layer counts the same saved bytes as for real."""
    model, shape = mla_model(moe=True), Shape(tp=2, sp=True, mbs=2)
    real = saved_activation_bytes(build_block(model, "layer.moe", shape))
    with FakeTensorMode():
        fake = saved_activation_bytes(build_block(model, "layer.moe", shape))
    assert fake == real


def test_missing_latent_size_is_a_config_error():
    """An MLA model without kv_lora_rank raises ConfigError naming the flag."""
    with pytest.raises(ConfigError, match="--kv-lora-rank"):
        build_block(replace(mla_model(), kv_lora_rank=None), "layer", Shape())


def test_analytic_bytes_equal_the_measured_cpu_profile(tmp_path):
    """Every byte count of the analytic profile of an MLA model equals the measured CPU profile's."""
    model = mla_model()
    settings = MeasureSettings(device="cpu", max_npu=2, max_mbs=1, comm="skip", warmup=1, repeats=5)
    measured = pd.read_csv(run_profile(model, settings, tmp_path / "m") / "blocks.csv")
    analytic = pd.read_csv(
        analytic_profile(model, load_hardware("910b"), tmp_path / "a", limits=settings.limits(None))
        / "blocks.csv"
    )
    key = ["block", "tp", "sp", "cp", "ep", "etp", "mbs"]
    joined = measured.merge(analytic, on=key, suffixes=("_cpu", "_analytic"))
    assert len(joined) == len(measured) == len(analytic) and "layer" in set(joined["block"])
    for column in [
        "param_count",
        "weight_bytes",
        "activation_bytes",
        "selective_activation_bytes",
        "transient_bytes",
        "input_bytes",
        "output_bytes",
    ]:
        assert (joined[f"{column}_cpu"] == joined[f"{column}_analytic"]).all(), column
