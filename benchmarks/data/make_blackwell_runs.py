"""Writes benchmarks/data/blackwell_runs.json: published measured dense runs on B200 and GB200
(NVIDIA NeMo / Megatron-Bridge performance summaries, NVIDIA's dgxc-benchmarking recipes), each
with its source and what is stated vs inferred, in the row shape of heldout_runs.json
(benchmarks/published_runs.py reads it).

    python benchmarks/data/make_blackwell_runs.py   (from the repository root)

Every Blackwell dense row of the performance summaries is FP8 (per-tensor current scaling; the
MXFP8 figures in parentheses are left out): they determine the FP8 matmul efficiency of the
b200 / gb200-nvl72 descriptions. The BF16 rows are dgxc-benchmarking's LLaMA-3.1-405B step times
on 128 / 256 / 512 GB200 (release 25.05): they determine the GB200 BF16 matmul efficiency
(validate_published.py --fit fits the BF16 curve on the BF16 rows, then the FP8 curve on the FP8
rows with the BF16 one kept). Left out: Megatron-FSDP rows (FSDP > 0: LLaMA3-70B on GB200),
MoE rows (DeepSeek-V3, Qwen3, GPT-OSS, Mixtral, also in BF16: dispatch and grouped GEMMs are
fitted on their own), GPT3-175B (its Model TFLOP/s cell is empty in the 25.04 table), Nemotron
rows (Nemotron-4's squared-ReLU MLP and 256k vocabulary; dgxc-benchmarking also publishes
Nemotron-4 340B BF16 step times on GB200), and dgxc-benchmarking's H100 rows (not Blackwell).
"""

import json
from pathlib import Path

from llama_shapes import llama

B200 = {
    "id": "dgx_b200",
    "name": "NVIDIA DGX B200 (8x B200 180GB, NVLink5, 8x400 Gb/s IB per node)",
    "peak_bf16_tflops": 2250,
    "peak_fp8_tflops": 4500,
    "hbm_gb": 180,
}
GB200 = {
    "id": "dgx_gb200",
    "name": "NVIDIA DGX GB200 NVL72 (4 GPUs per compute tray, one NVLink domain of 72)",
    "peak_bf16_tflops": 2250,
    "peak_fp8_tflops": 4500,
    "hbm_gb": 187.5,
}

BRIDGE_2511 = {
    "repo": "NVIDIA-NeMo/Megatron-Bridge",
    "path": "docs/performance-summary.md (25.11 NeMo Container, Pre-Training Performance)",
    "commit": "00b7660be0254ac6f95f44164ddd0c3e9cc798ed",
    "also": "docs/performance-summary-archive.md @0a25f911b2ed6c6905a539504fdb8e5b40e3438b (same 25.11 rows)",
    "config_via": (
        "Megatron-Bridge scripts/performance, read: configs/llama/llama31_workload_base_configs.py "
        "@0013c9a8 (LLAMA31_405B_PRETRAIN_CONFIG_B200_FP8_CS_V1 tp4 pp8 cp2 vp8 gbs64; "
        "GB200_FP8_CS_V2 tp4 pp16 cp1 vp4 gbs1536, FSDP and cpu offloading off), "
        "configs/llama/llama3_workload_base_configs.py @00919dcf (8B GB200 / B200 FP8_CS mbs 2, "
        "CUDA graphs full_iteration), configs/llama/llama3{1}_llm_pretrain.py @2a0d46e2 / @0013c9a8 "
        "(set_llama3{1}_common_configs: grad_reduce_in_fp32 False; userbuffers tp comm overlap), "
        "utils/utils.py WorkloadBaseConfig (recompute_num_layers / recompute_modules / "
        "cpu_offloading_num_layers None: no recompute, no offload), utils/precision.py fp8_cs = "
        "bf16_with_fp8_current_scaling_mixed (fp8 hybrid, tensorwise, fp8_param_gather True, "
        "first_last_layers_bf16 False), src/megatron/bridge/recipes/llama/llama3.py @33552627 "
        "_llama3_common (distributed optimizer, overlap_grad_reduce, overlap_param_gather; 405B: "
        "account_for_embedding / loss_in_pipeline_split True). The files read are later than the "
        "25.11 tag (ASSUMPTION: the settings of these rows did not change)"
    ),
}
NEMO2_RECIPE = (
    "NVIDIA/NeMo scripts/performance, read: recommended_model_configs/model_configs_b200.csv "
    "@026c682e (pre_train llama31 405b b200 fp8 128 GPUs tp4 pp8 cp2 vp8 mbs1 gbs64, llama3 70b "
    "tp2 pp4 cp2 vp5, llama3 8b mbs2; cuda_graphs / use_mcore_fsdp / recompute_layers / "
    "activation_offload_layers as listed: 0 for 405B and 70B, cuda graphs 1 for 8B and 70B), "
    "model_configs_gb200.csv @06c0e700 (405B bf16 tp4 pp8 cp2 vp8, no recompute or offload; the "
    "fp8 line of that later version is FSDP, ASSUMPTION that 25.04 ran the table's tp4 pp8 cp2 vp8 "
    "the same way), helpers.py set_primary_perf_configs (fp8: grad_reduce_in_fp32 False; recompute "
    "and offload only when their counts are > 0), llm/pretrain_llama31_405b.py and "
    "nemo/collections/llm/recipes/llama31_405b.py @00aa2e12 (distributed fused Adam, "
    "overlap_grad_reduce, overlap_param_gather, userbuffers tp comm overlap, "
    "defer_embedding_wgrad_compute)"
)
NEMO_2502 = {
    "url": "https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance_summary.html",
    "table": "Pretraining, Container NeMo 25.02, System DGX-B200 (FP8, NeMo 2.0)",
    "config_via": NEMO2_RECIPE,
}
NEMO_2504 = {
    "url": "https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/archive/25.04-performance-summary.html",
    "table": "Pre-Training Performance, Container NeMo 25.04, System DGX-GB200 (FP8 per-tensor "
    "current scaling)",
    "config_via": NEMO2_RECIPE,
}

LLAMA3_8B = llama("llama3_8b")
LLAMA3_70B = llama("llama3_70b")
LLAMA31_405B = llama("llama31_405b")
SPLIT_405B = ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
"""126 layers do not split over pp x vp = 64 or pp 16 x vp 4 = 64 stages; with the embedding and
the loss counted as layers (Megatron-LM arguments.py validate_args) 128 do. Stated for the
Megatron-Bridge rows (recipes/llama/llama3.py llama31_405b_pretrain_config sets both switches);
ASSUMPTION for the NeMo 2 rows (NeMo's Llama31Config405B does not name them)."""


def row(run_id, source, hardware, model, n, gbs, mbs, tp, pp, cp, vp, tokens, tflops, extra=()):
    dp = n // (tp * pp * cp)
    return {
        "id": run_id,
        "category": "dense_blackwell",
        "source": source,
        "hardware": hardware,
        "model": model,
        "strategy": {
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "vpp": vp,
            "mbs": mbs,
            "gbs": gbs,
            "dp": dp,
            "sp": tp > 1,
            "precision": "fp8",
            "recompute": "none (recompute_num_layers None / recompute_layers 0 in the recipe)",
            "distributed_optimizer": True,
            "optimizer": "distributed optimizer, overlap_grad_sync, overlap_param_sync",
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "tp_comm_overlap": "true" if tp > 1 else "false",
            "flash_attn": True,
            "framework": "NeMo (Megatron-Core)",
            "extra_flags": ["--fp8-recipe tensorwise", "--grad-reduce-in-bf16", *extra],
        },
        "n_devices": n,
        "measured": {"tokens_per_s_per_device": tokens, "model_tflops_per_device": tflops},
        "stated_vs_inferred": (
            "stated: system, GPUs, GBS, MBS, sequence, FSDP 0, TP/PP/CP/VP, tokens/s/GPU, "
            "Model TFLOP/s/GPU, FP8 (per-tensor current scaling = --fp8-recipe tensorwise); "
            "dp = GPUs / (tp pp cp) [derived]; from the recipes read (source.config_via): no "
            "recompute and no activation offload, distributed optimizer with overlapped grad / "
            "param sync, gradients reduced in bf16 (grad_reduce_in_fp32 False = "
            "--grad-reduce-in-bf16), fp8_param_gather, sequence parallel and userbuffers tp overlap "
            "for tp > 1 [stated by the recipe]; the NeMo 25.02 B200 rows' FP8 recipe (the scripts' "
            "default is delayed scaling) [inferred: tensorwise]"
        ),
        "flags": {"moe": False, "cp_gt_1": cp > 1, "fp8": True, "iteration_time_from": "tokens/s"},
    }


DGXC_2505 = {
    "repo": "NVIDIA/dgxc-benchmarking",
    "path": "llama3.1/README.md ('GB200 Performance': Llama3.1 405b BF16 training step time, "
    "128x / 256x / 512x GB200 GPUs; release gsw 25.05.04, container nvcr.io/nvidia/nemo:25.04.01 "
    "per llama3.1/metadata.yaml at the same commit)",
    "commit": "1f6d9f40e4117d7c71b726f86074ac01c29f87f5",
    "config_via": (
        "the README's GB200 table at the same commit (GPUs, SeqLen 8192, Layers 126, FSDP 0, TP 4, "
        "PP 8, CP 2, VP 8, MBS 1, GBS 64 / 128 / 256, GA 32); the launch runs NeMo 2's "
        "scripts/performance llama31_405b pretraining (" + NEMO2_RECIPE + ")"
    ),
}
"""NVIDIA's DGX Cloud benchmarking recipes: the only published dense BF16 Blackwell step times found
(the NeMo / Megatron-Bridge performance summaries' Blackwell BF16 rows are all MoE)."""


def bf16_row(run_id, source, hardware, model, n, gbs, mbs, tp, pp, cp, vp, step_s, extra=()):
    """A BF16 row with a published step time: `row`'s layout and recipe, no FP8 recipe, gradients
    reduced in BF16 (ASSUMPTION: the NeMo 2 LLaMA performance recipes set
    plugins.grad_reduce_in_fp32 False, as the FP8 rows' scripts state)."""
    out = row(run_id, source, hardware, model, n, gbs, mbs, tp, pp, cp, vp, None, None, extra)
    out["strategy"] |= {"precision": "bf16", "extra_flags": ["--grad-reduce-in-bf16", *extra]}
    out["measured"] = {"step_time_s": step_s}
    out["stated_vs_inferred"] = (
        "stated: system, GPUs, GBS, MBS, sequence, layers, FSDP 0, TP/PP/CP/VP/GA, BF16, training "
        "step time (mean of iterations 11-44, parse_train_timing.sh); dp = GPUs / (tp pp cp) "
        "[derived]; from the NeMo 2 recipe read (source.config_via): no recompute and no "
        "activation offload, distributed optimizer with overlapped grad / param sync, sequence "
        "parallel and userbuffers tp overlap [stated by the recipe]; gradients reduced in bf16 "
        "[inferred]"
    )
    out["flags"] |= {"fp8": False, "iteration_time_from": "step time"}
    return out


RUNS = [
    row("bridge2511_gb200_llama3_8b_fp8cs_8gpu", BRIDGE_2511, GB200, LLAMA3_8B,
        8, 128, 2, 1, 1, 1, None, 31508, 1622),
    row("bridge2511_gb200_llama31_405b_fp8cs_256gpu", BRIDGE_2511, GB200, LLAMA31_405B,
        256, 1536, 1, 4, 16, 1, 4, 813, 2053, SPLIT_405B),
    row("nemo2504_gb200_llama3_8b_fp8_8gpu", NEMO_2504, GB200, LLAMA3_8B,
        8, 128, 2, 1, 1, 1, None, 33099, 1917),
    row("nemo2504_gb200_llama31_405b_fp8_128gpu_cp2", NEMO_2504, GB200, LLAMA31_405B,
        128, 64, 1, 4, 8, 2, 8, 665, 1763, SPLIT_405B),
    row("bridge2511_b200_llama3_8b_fp8cs_8gpu", BRIDGE_2511, B200, LLAMA3_8B,
        8, 128, 2, 1, 1, 1, None, 30624, 1576),
    row("bridge2511_b200_llama31_405b_fp8cs_128gpu_cp2", BRIDGE_2511, B200, LLAMA31_405B,
        128, 64, 1, 4, 8, 2, 8, 661, 1667, SPLIT_405B),
    row("nemo2502_b200_llama3_8b_fp8_8gpu", NEMO_2502, B200, LLAMA3_8B,
        8, 128, 2, 1, 1, 1, None, 26006, 1506),
    row("nemo2502_b200_llama3_70b_fp8_64gpu_cp2", NEMO_2502, B200, LLAMA3_70B,
        64, 128, 1, 2, 4, 2, 5, 3062, 1474),
    row("nemo2502_b200_llama31_405b_fp8_128gpu_cp2", NEMO_2502, B200, LLAMA31_405B,
        128, 64, 1, 4, 8, 2, 8, 625, 1658, SPLIT_405B),
    bf16_row("dgxc2505_gb200_llama31_405b_bf16_128gpu_cp2", DGXC_2505, GB200, LLAMA31_405B,
             128, 64, 1, 4, 8, 2, 8, 9.347, SPLIT_405B),
    bf16_row("dgxc2505_gb200_llama31_405b_bf16_256gpu_cp2", DGXC_2505, GB200, LLAMA31_405B,
             256, 128, 1, 4, 8, 2, 8, 9.484, SPLIT_405B),
    bf16_row("dgxc2505_gb200_llama31_405b_bf16_512gpu_cp2", DGXC_2505, GB200, LLAMA31_405B,
             512, 256, 1, 4, 8, 2, 8, 9.508, SPLIT_405B),
]  # fmt: skip

DOC = {
    "about": (
        "Published measured dense runs on B200 and GB200: FP8 (NeMo 25.02 / 25.04 and "
        "Megatron-Bridge 25.11 performance summaries) and BF16 (NVIDIA dgxc-benchmarking 25.05, "
        "LLaMA-3.1-405B on GB200), in the row shape of heldout_runs.json; "
        "written by benchmarks/data/make_blackwell_runs.py (its docstring says which rows are "
        "left out and why). Evaluate: validate_published.py benchmarks/data/blackwell_runs.json "
        "[--fit]. H200: no published per-iteration training figure was found (MLPerf Training "
        "reports time to train, not a step time)."
    ),
    "runs": RUNS,
}

if __name__ == "__main__":
    out = Path(__file__).with_name("blackwell_runs.json")
    out.write_text(json.dumps(DOC, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(RUNS)} rows)")
