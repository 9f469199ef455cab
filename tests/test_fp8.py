"""FP8 training: the flags read, the linear GEMMs at the FP8 rate with their casts, the FP8
weight copies and parameter all-gather in the cost model, and devices without FP8 refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from cli_support import run_cli
from model_support import HARDWARE, cluster, dense_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.costs.fp8_terms import fp8_gather_factor
from tinker_opt.errors import ConfigError
from tinker_opt.hardware import load_hardware
from tinker_opt.profile.analytic import block_row, trace_block
from tinker_opt.profile.shape import Shape
from tinker_opt.script.reader import read_script_text
from tinker_opt.specs import ModelSpec
from tinker_opt.strategy import Strategy

SCRIPT = """#!/bin/bash
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\
    --num-layers 4 --hidden-size 1024 --ffn-hidden-size 4096 --num-attention-heads 16 \\
    --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 \\
    --micro-batch-size 1 --global-batch-size 16 --tensor-model-parallel-size 2 \\
    --use-flash-attn --bf16 {fp8}
"""
FP8 = "--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather --fp8-amax-history-len 1024"
LAYER = dense_model(num_layers=2, hidden=2048, heads=16, seq=2048)


def _fp8(model: ModelSpec, **changes) -> ModelSpec:
    return dataclasses.replace(model, fp8_format="hybrid", **changes)


def test_reader_reads_the_fp8_flags():
    """--fp8-format, --fp8-recipe, --fp8-param-gather and the amax history reach the ModelSpec."""
    model = read_script_text(SCRIPT.format(fp8=FP8), "fp8.sh").model
    assert (model.fp8_format, model.fp8_recipe) == ("hybrid", "tensorwise")
    assert model.fp8_param_gather and model.fp8_amax_history_len == 1024
    assert model.precision == "bf16" and model.is_fp8
    plain = read_script_text(SCRIPT.format(fp8=""), "bf16.sh").model
    assert not plain.is_fp8 and plain.fp8_recipe == "delayed"


def test_inspect_reports_fp8_settings(tmp_path):
    """`inspect --json` lists the FP8 settings among the model keys."""
    script = tmp_path / "fp8.sh"
    script.write_text(SCRIPT.format(fp8=FP8), encoding="utf-8")
    proc = run_cli("inspect", str(script), "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"fp8_format": "hybrid"' in proc.stdout and '"fp8_recipe": "tensorwise"' in proc.stdout


@pytest.mark.parametrize("changes", [{"fp8_recipe": "nvfp4"}, {"fp8_amax_history_len": 0}])
def test_bad_fp8_settings_are_config_errors(changes):
    """An unknown recipe or an empty amax history is a ConfigError naming the field."""
    with pytest.raises(ConfigError, match="fp8_"):
        _fp8(LAYER, **changes)


def test_linear_gemms_run_in_fp8_and_attention_stays_bf16():
    """Every GEMM of the layer's linears is labelled fp8, the attention core keeps bf16; one cast
    per activation / gradient operand (4 forward, 4 backward), none of a weight."""
    trace = trace_block(_fp8(LAYER), "layer", Shape(tp=1, mbs=1))
    ops = trace.fwd_ops + trace.bwd_ops
    gemms = [op for op in ops if op.name in ("mm", "addmm")]
    assert gemms and all(op.precision == "fp8" for op in gemms)
    attention = [op for op in ops if "attention" in op.name and op.flops]
    assert attention and all(op.precision == "bf16" for op in attention)
    casts = [op for op in ops if op.name == "fp8_cast"]
    assert [sum(op.phase == p for op in casts) for p in ("fwd", "bwd")] == [4, 4]


def test_tensorwise_scaling_reads_each_operand_twice():
    """Current (tensorwise) scaling's amax pass adds one read of each cast operand."""
    shape = Shape(tp=1, mbs=1)
    cast = {
        recipe: [
            op.bytes_moved
            for op in trace_block(_fp8(LAYER, fp8_recipe=recipe), "layer", shape).fwd_ops
            if op.name == "fp8_cast"
        ]
        for recipe in ("delayed", "tensorwise")
    }
    # delayed: read 2 B + write 2 x 1 B per element; tensorwise: one more 2 B read.
    assert [t / d for t, d in zip(cast["tensorwise"], cast["delayed"], strict=True)] == [1.5] * 4


def test_fp8_layer_is_faster_on_h100_and_refused_on_910b():
    """At the H100's FP8 rate the layer runs faster than in BF16; the 910B has no FP8 rate and
    refuses with a one-line ConfigError."""
    h100 = load_hardware("h100-80gb")
    shape = Shape(tp=1, mbs=1)
    bf16 = block_row(trace_block(LAYER, "layer", shape), h100)
    fp8_trace = trace_block(_fp8(LAYER), "layer", shape)
    fp8 = block_row(fp8_trace, h100)
    assert fp8["fwd_us"] < bf16["fwd_us"] and fp8["bwd_us"] < bf16["bwd_us"]
    with pytest.raises(ConfigError, match="no FP8 rate") as info:
        block_row(fp8_trace, load_hardware("910b"))
    assert "\n" not in str(info.value)


def test_profile_on_910b_refuses_fp8_in_one_line(tmp_path):
    """`profile --device analytic --hardware 910b` of an FP8 script exits non-zero, one line."""
    script = tmp_path / "fp8.sh"
    script.write_text(SCRIPT.format(fp8=FP8), encoding="utf-8")
    proc = run_cli(
        "profile", str(script), "--device", "analytic", "--hardware", "910b",
        "--save-path", str(tmp_path / "prof"), "--max-npu", "2", "--max-mbs", "1",
    )  # fmt: skip
    assert proc.returncode != 0
    assert "no FP8 rate" in proc.stderr + proc.stdout and "Traceback" not in proc.stderr


def _layer_weights(model: ModelSpec) -> np.ndarray:
    profile = synthetic_profile(model, tps=(1,), cps=(1,), mbss=(1,))
    cost = CostModel.from_profile(profile, model, cluster(1, 8, 60000), 8, hardware=HARDWARE)
    coeffs = cost.coefficients(Strategy(tp=1, pp=1, dp=8, zero=1))
    return coeffs.layer_static_bytes - coeffs.layer_optimizer_bytes - coeffs.layer_grad_bytes


def test_fp8_weight_copies_and_fp8_param_gather_memory():
    """Without --fp8-param-gather each layer parameter gains 2 B (FP8 weight + transpose); with
    it the FP8 weights replace the BF16 ones (same bytes), and the all-gather moves half."""
    model = dense_model(num_layers=2)
    bf16, cached = _layer_weights(model), _layer_weights(_fp8(model))
    params = bf16 // 2  # bf16 weights: 2 B per parameter
    assert np.array_equal(cached - bf16, 2 * params)
    assert np.array_equal(_layer_weights(_fp8(model, fp8_param_gather=True)), bf16)
    assert fp8_gather_factor(_fp8(model, fp8_param_gather=True)) == 0.5
    assert fp8_gather_factor(_fp8(model)) == fp8_gather_factor(model) == 1.0


def test_fp8_fields_of_the_descriptions():
    """H100 lists peak_tflops.fp8 and a fitted matmul_fp8 curve that survives a JSON round
    trip; A100 and 910B have no FP8 rate."""
    h100 = load_hardware("h100-80gb")
    assert h100.has_fp8 and h100.peak_flops_per_us("fp8") == 1979e6
    again = type(h100).from_dict(h100.to_dict())
    assert again.efficiency.fp8_matmul == h100.efficiency.matmul_fp8 is not None
    for name in ("a100-80gb", "910b"):
        assert not load_hardware(name).has_fp8
