"""benchmarks/published_runs.py: the shared file's free-text strategy fields read as typed knobs,
and the generated launch script read back as the run's model and strategy (no profiling)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from published_runs import (  # noqa: E402
    PublishedRun,
    hardware_for,
    launch_script,
    load_runs,
    normalised_strategy,
)

from tinker_opt.script.reader import read_script_text  # noqa: E402

GPT3_FP8 = {
    "tp": 4, "pp": 8, "cp": 1, "vpp": 6, "mbs": 1, "gbs": 256, "sp": True,
    "recompute": "none (activations_checkpoint_* null in gpt3_175b_hydra.yaml)",
    "precision": "fp8", "distributed_optimizer": True,
    "optimizer": "distributed_fused_adam, overlap_grad_sync, overlap_param_sync",
    "tp_comm_overlap": "ub_tp_comm_overlap true", "dp": 4,
}  # fmt: skip
MIXTRAL = {
    "tp": 1, "pp": 4, "cp": 1, "ep": 8, "etp": "n/a (TP=1)", "vpp": 8, "mbs": 1, "gbs": 256,
    "sp": "not stated (TP=1)", "recompute": "not stated", "precision": "bf16",
    "distributed_optimizer": "not stated",
    "overlap": "README tips recommend --overlap-grad-reduce/--overlap-param-gather, distributed "
    "optimizer, grouped GEMM; not stated for this run", "dp": 16,
}  # fmt: skip
FSDP2_CP = {
    "tp": 1, "pp": 1, "cp": 2, "ep": None, "vpp": None, "mbs": 1, "gbs": 128,
    "fsdp": "PyTorch FSDP2, sharding size 32", "dp": 32, "precision": "bf16",
    "recompute": "activation_checkpointing true in the linked yaml",
}  # fmt: skip


def _run(strategy: dict, model: dict, n_devices: int, category: str) -> PublishedRun:
    return PublishedRun(
        run_id="t",
        model=model,
        strategy=normalised_strategy(strategy),
        hardware_id="h100_dgx_ref",
        hardware_name="",
        n_devices=n_devices,
        measured={},
        category=category,
    )


GPT3 = {"arch": "gpt", "layers": 96, "hidden": 12288, "heads": 96, "head_dim": 128,
        "ffn": 49152, "vocab": 50257, "seq": 2048}  # fmt: skip
MIXTRAL_MODEL = {
    "arch": "mixtral", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
    "ffn": None, "vocab": 32000, "seq": 4096,
    "moe": {"num_experts": 8, "topk": 2, "moe_ffn": 14336, "first_k_dense": 0},
}  # fmt: skip


def test_free_text_fields_become_typed_knobs():
    """Quoted sources ('none (...)', 'ub_tp_comm_overlap true', 'overlap_grad_sync') and nulls
    become booleans, recompute kinds and Megatron's defaults."""
    s = normalised_strategy(GPT3_FP8)
    assert (s["recompute"], s["overlap_grad_reduce"], s["overlap_param_gather"]) == (
        "none",
        True,
        True,
    )
    assert s["tp_comm_overlap"] and not s["fsdp"]
    f = normalised_strategy(FSDP2_CP)
    assert (f["vpp"], f["ep"], f["cp"], f["recompute"], f["fsdp"]) == (1, 1, 2, "full", True)


def test_not_stated_takes_the_sources_recommendation():
    """'not stated' is off, unless the source's notes recommend the setting (Mixtral rows)."""
    s = normalised_strategy(MIXTRAL)
    assert s["distributed_optimizer"] and s["overlap_grad_reduce"] and s["overlap_param_gather"]
    assert not s["sp"] and s["etp"] is None and s["recompute"] == "none"
    plain = normalised_strategy(MIXTRAL | {"overlap": ""})
    assert not plain["distributed_optimizer"] and not plain["overlap_grad_reduce"]


@pytest.mark.parametrize(
    "strategy,model,devices,category",
    [(GPT3_FP8, GPT3, 128, "dense_h100"), (MIXTRAL, MIXTRAL_MODEL, 64, "moe")],
)
def test_generated_script_reads_back_as_the_run(strategy, model, devices, category):
    """The launch script of an FP8 and an MoE row reads back with the run's knobs."""
    run = _run(strategy, model, devices, category)
    info = read_script_text(launch_script(run), "run.sh")
    s = info.train.strategy
    assert (s.tp, s.pp, s.vpp, s.mbs, s.dist_opt) == (
        strategy["tp"],
        strategy["pp"],
        strategy["vpp"],
        1,
        True,
    )
    assert info.model.is_fp8 == (strategy["precision"] == "fp8")
    if category == "moe":
        assert (info.model.num_experts, s.ep, info.model.moe_ffn_hidden_size) == (8, 8, 14336)
    else:
        assert info.model.fp8_param_gather and info.model.fp8_amax_history_len == 1024
        assert s.overlap_grad_reduce and s.overlap_param_gather


def test_h100_rows_use_the_h100_description():
    """The DGX H100 id of the shared file maps to the shipped h100-80gb description (FP8 rate)."""
    hardware = hardware_for(_run(GPT3_FP8, GPT3, 128, "dense_h100"))
    assert hardware.has_fp8 and hardware.memory_gb == 80


def test_validator_passes_the_rows_recompute_modules():
    """A Megatron-Core row's `--recompute-modules` reach the cost model as `simulate` passes them
    (the ModelZoo Qwen3-235B long-context recipe: layernorm and moe, not core_attn)."""
    from validate_published import read_run

    runs = load_runs(ROOT / "benchmarks" / "data" / "heldout_runs.json")
    run = next(r for r in runs if r.run_id == "mz_qwen3_235b_long_128k_cp8_dropless")
    _, strategy, _, job = read_run(run, launch_script(run))
    assert job.recompute_modules == ("layernorm", "moe")
    assert strategy.recompute == "selective" and strategy.cp == 8


def test_rc3_rows_write_their_scripts_moe_settings():
    """The MindSpeed-LLM RC3 rows keep what their scripts set: DeepSeek-V2's first dense layer at
    ffn 12288 beside 1536-wide experts and its grouped GEMM; Mixtral-8x7B without grouped GEMM;
    MiniCPM's tied embeddings; no permute fusion (the writer adds it to the other MoE rows)."""
    runs = {r.run_id: r for r in load_runs(ROOT / "benchmarks" / "data" / "heldout_runs.json")}
    ds2 = runs["mindspeed_rc3_deepseek2_60b_16l_8k_32npu_pp4_ep8"]
    script = launch_script(ds2)
    info = read_script_text(script, "run.sh")
    assert (info.model.ffn_hidden_size, info.model.moe_ffn_hidden_size) == (12288, 1536)
    assert info.model.moe_grouped_gemm and "--moe-permute-fusion" not in script
    mixtral = runs["mindspeed_rc3_mixtral_8x7b_32k_64npu_tp8_pp4_cp2"]
    info = read_script_text(launch_script(mixtral), "run.sh")
    assert not info.model.moe_grouped_gemm and info.train.strategy.cp == 2
    minicpm = runs["mindspeed_rc3_minicpm_moe_8x2b_8npu_pp4_ep2"]
    info = read_script_text(launch_script(minicpm), "run.sh")
    assert not info.model.untie_embeddings_and_output_weights
    qwen = launch_script(runs["mz_qwen3_235b_a2a_tp2_ep8_pp32_vpp3"])
    assert read_script_text(qwen, "run.sh").model.moe_grouped_gemm
    assert "--moe-permute-fusion" in qwen
