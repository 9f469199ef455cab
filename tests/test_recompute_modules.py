"""Megatron-Core `--recompute-modules` and FP8-saved linear inputs (costs/recompute_modules.py,
costs/fp8_activation.py): each term against a hand computation on DeepSeek-V3's shapes, the
script reading, and the modelled peak of the ModelZoo DeepSeek-V3 H100 case."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tinker_opt.costs.fp8_activation import fp8_saved_input_bytes, linear_input_elements
from tinker_opt.costs.recompute_modules import (
    LayerDims,
    layer_module_terms,
    layernorm_terms,
    mla_up_proj_terms,
    mlp_terms,
    module_terms,
    moe_act_terms,
    moe_terms,
    routed_assignments,
    shared_experts_terms,
    unpriced_modules,
)
from tinker_opt.errors import ScriptError
from tinker_opt.profile.shape import Shape, shard_dims
from tinker_opt.script.reader import read_script

SCRIPT = Path(__file__).parent / "fixtures" / "scripts" / "train_deepseek_v3_h100_modelzoo.sh"
# DeepSeek-V3 at tp 2 with sequence parallelism, seq 4096, mbs 1, BF16 activations, FP8 linears.
DIMS = LayerDims(tokens=4096, tp=2, sp=True, bpe=2, linear_bpe=1)
BF16 = dataclasses.replace(DIMS, linear_bpe=2)
ASSIGNMENTS = 2048 * 8  # the rank's 2048 sequence-parallel tokens, top-8 each (etp 1)


@pytest.fixture(scope="module")
def info():
    return read_script(SCRIPT)


def test_script_reads_the_modules(info):
    assert info.train.recompute_modules == ("mla_up_proj", "mlp")
    assert info.train.strategy.recompute == "selective"
    assert unpriced_modules(("mla_up_proj", "moe", "layernorm", "moe_act")) == []


def test_unknown_module_is_refused(tmp_path):
    bad = tmp_path / "bad.sh"
    bad.write_text(SCRIPT.read_text().replace("mla_up_proj mlp", "mla_up_proj attn"))
    with pytest.raises(ScriptError, match="attn"):
        read_script(bad)


def test_mla_up_proj_by_hand(info):
    # 64 heads a rank: q and k of 128 + 64 dims, v of 128, at 2 B: 64 * 512 * 2 = 65536 B; the up
    # projections' FP8 inputs: 1536 + 512 B. Per token 67584 B.
    saved, flops = mla_up_proj_terms(info.model, DIMS)
    assert saved == 4096 * 67584 == 276_824_064
    # 2 * 64 heads * (1536 * 192 + 512 * (128 + 128)) FLOPs a token.
    assert flops == 4096 * 2 * 64 * (1536 * 192 + 512 * 256)


def test_mlp_by_hand(info):
    # fc1 input 7168 / 2 and fc2 input 18432 / 2 in FP8 (1 B), SwiGLU's fc1 output 2 * 9216 at 2 B.
    saved, flops = mlp_terms(info.model, DIMS)
    assert saved == 4096 * (3584 + 9216 + 2 * 9216 * 2) == 203_423_744
    assert flops == 4096 * 2 * 7168 * 9216 * 3


def test_mlp_only_in_dense_layers(info):
    modules = ("mla_up_proj", "mlp")
    dense, dense_us = module_terms(info.model, "dense", modules, DIMS, 989.0)
    moe, moe_us = module_terms(info.model, "moe", modules, DIMS, 989.0)
    assert dense == 276_824_064 + 203_423_744
    assert moe == 276_824_064
    assert moe_us == pytest.approx(4096 * 2 * 64 * (1536 * 192 + 512 * 256) / 989e6)
    assert dense_us > moe_us
    assert module_terms(info.model, "moe", ("core_attn",), DIMS, 989.0) == (0, 0.0)


def test_fp8_linear_inputs_by_hand(info):
    # Attention: down-projection input 3584, up-projection inputs 1536 + 512, output projection
    # 64 * 128; shared expert fc1 3584 and fc2 2048 / 2: 18432 a token. Routed experts: the rank's
    # 2048 sequence-parallel tokens reach 8 experts each, 7168 + 2048 wide.
    elements = 4096 * (3584 + 1536 + 512 + 8192 + 3584 + 1024) + 2048 * 8 * (7168 + 2048)
    assert linear_input_elements(info.model, "moe", DIMS, 1) == elements == 226_492_416
    assert fp8_saved_input_bytes(info.model, "moe", DIMS, 1) == elements  # 2 B -> 1 B
    bf16 = dataclasses.replace(info.model, fp8_format=None)
    assert fp8_saved_input_bytes(bf16, "moe", DIMS, 1) == 0


def test_routed_assignments_by_hand(info):
    assert routed_assignments(info.model, DIMS, 1) == ASSIGNMENTS
    assert routed_assignments(info.model, DIMS, 2) == 2 * ASSIGNMENTS


def test_routed_assignments_follow_the_busiest_rank(info):
    # Dropless at the 1.25 imbalance: 16384 balanced assignments x 1.25 = 20480, the count the
    # profile sizes the experts' tensors by (shard_dims expert_tokens), so `moe` / `moe_act` free
    # what the profile counted; force-balanced (1.0) keeps the balanced count.
    model = info.model.with_load_imbalance(1.25)
    assert routed_assignments(model, DIMS, 1) == 20480
    shape = Shape(tp=2, sp=True, ep=64, etp=1, mbs=1)
    assert shard_dims(model, shape).expert_tokens == routed_assignments(model, DIMS, 1)
    assert moe_act_terms(model, BF16, 1)[0] == 20480 * 2048 * 2
    balanced = dataclasses.replace(model, moe_load_imbalance=1.0)
    assert routed_assignments(balanced, DIMS, 1) == ASSIGNMENTS


def test_moe_act_by_hand(info):
    # FP8: fc2 keeps its own FP8 copy of the activation output, nothing freed; the rerun reads the
    # fc1 output (2 x 2048) and writes the output (2048) at 2 B for every assignment.
    assert moe_act_terms(info.model, DIMS, 1) == (0, ASSIGNMENTS * 3 * 2048 * 2)
    # BF16: the activation output (fc2's saved input) is freed.
    assert moe_act_terms(info.model, BF16, 1)[0] == ASSIGNMENTS * 2048 * 2 == 67_108_864


def test_shared_experts_by_hand(info):
    # Width 2048 / tp 2 = 1024 a rank: fc1 input 3584 and fc2 input 1024 in FP8, fc1 output 2 x 1024
    # at 2 B: 8704 B a token of the 4096.
    saved, flops = shared_experts_terms(info.model, DIMS)
    assert saved == 4096 * (3584 + 1024 + 2 * 1024 * 2) == 35_651_584
    assert flops == 4096 * 2 * 7168 * 1024 * 3
    # BF16: the fc1 input is the router's saved input, which stays (3584 x 2 B fewer freed).
    assert shared_experts_terms(info.model, BF16)[0] == 4096 * ((3584 + 1024) * 2 + 4096 - 7168)


def test_moe_by_hand(info):
    # Every assignment: fc1 input 7168 and fc2 input 2048 in FP8, fc1 output 2 x 2048 at 2 B and its
    # probability (2 B); the router's fp32 scores 2048 x 256; the shared experts as above.
    saved, flops = moe_terms(info.model, DIMS, 1)
    routed = ASSIGNMENTS * ((7168 + 2048) + 2 * 2048 * 2 + 2)
    assert saved == routed + 2048 * 256 * 4 + 35_651_584 == 322_994_176
    assert flops == ASSIGNMENTS * 2 * 7168 * 2048 * 3 + 4096 * 2 * 7168 * 1024 * 3
    terms = layer_module_terms(info.model, "moe", ("moe", "moe_act", "shared_experts"), DIMS)
    assert terms.saved_bytes == saved and terms.reruns_dispatch  # moe covers the other two
    assert not layer_module_terms(info.model, "dense", ("moe",), DIMS).reruns_dispatch


def test_layernorm_by_hand(info):
    # One norm output: 2048 sequence-parallel tokens x 7168 at 2 B. FP8: only the MoE pre-MLP norm's
    # (the router keeps it in BF16); BF16: the MLA input norm's too (its down projections keep it).
    norm = 2048 * 7168 * 2
    assert layernorm_terms(info.model, "moe", DIMS) == (norm, 2 * 2 * norm)
    assert layernorm_terms(info.model, "moe", BF16) == (2 * norm, 2 * 2 * norm)
    assert layernorm_terms(info.model, "dense", DIMS) == (0, 2 * norm)
    rerun_us = layer_module_terms(info.model, "moe", ("layernorm",), DIMS).extra_us(989.0, 3350.0)
    assert rerun_us == pytest.approx(4 * norm / 3350e3)


def test_modelzoo_case_peak(info, tmp_path):
    """The ModelZoo DeepSeek-V3 case on 1,024 H100s (analytic device, h100-80gb, a profile of the
    run's shapes only): its modelled peak with the module recompute and FP8-input terms, below the
    peak without the script's job flags (core_attn recompute only, BF16-saved inputs)."""
    from tinker_opt.costs.evaluate import CostModel
    from tinker_opt.hardware import load_hardware
    from tinker_opt.profile.analytic import analytic_profile
    from tinker_opt.profile.space import SpaceLimits
    from tinker_opt.profile.store import load_profiled_data
    from tinker_opt.specs import ClusterSpec
    from tinker_opt.verbs import job_options

    s, hardware = info.train.strategy, load_hardware("h100-80gb")
    limits = SpaceLimits(
        max_npu=8, max_mbs=1, prof_tp=(2,), prof_sp=(1,), prof_cp=(1,), prof_ep=(64,), prof_etp=(1,)
    )
    profiled = load_profiled_data(analytic_profile(info.model, hardware, tmp_path, limits=limits))
    cluster = ClusterSpec(num_nodes=128, devices_per_node=8, memory_limit_mb=80 * 1024)
    cost_model = CostModel.from_profile(
        profiled, profiled.model, cluster, 8192, hardware=hardware, job=job_options(info)
    )
    peak = cost_model.evaluate(s).peak_memory_mb
    without = CostModel.from_profile(
        profiled, profiled.model, cluster, 8192, hardware=hardware
    ).evaluate(s)
    # 112,201 MB before the published run's flags, Megatron-core's routed-expert saved tensors
    # (profile/moe.py) and the fused RMSNorm / SwiGLU that Megatron-Core with Transformer Engine
    # runs (ModelSpec.fused_kernels); the run fits its 80 GiB H100s. 57,550 MB before the
    # dispatch kept its permute's probabilities, routing map and indices (profile/moe.py).
    assert peak == pytest.approx(57663, abs=2)
    assert peak < 80 * 1024
    assert without.peak_memory_mb > peak


def test_recomputed_gemms_run_at_the_profiles_large_gemm_rate():
    """The GEMMs a module recompute reruns are priced at the rate the analytic profile gives a
    large GEMM (the peak times the matmul efficiency asymptote: 0.63 on H100), not at the bare
    peak, and at a table curve's largest point."""
    from tinker_opt.costs.inputs import HardwareRates, large_matmul_efficiency
    from tinker_opt.hardware import load_hardware
    from tinker_opt.hardware.efficiency import EfficiencyCurve

    h100 = load_hardware("h100-80gb")
    assert HardwareRates.of(h100).matmul_tflops == pytest.approx(989 * 0.63)
    table = dataclasses.replace(
        h100.efficiency, matmul=EfficiencyCurve(points=((1e9, 0.3), (1e12, 0.7)))
    )
    assert large_matmul_efficiency(dataclasses.replace(h100, efficiency=table)) == 0.7
