"""Held-out dense and context-parallel H100 rows: NeMo 24.07's FP8 pretraining table and
Megatron-Bridge 25.11 (make_heldout_runs.py writes them).
"""

from llama_shapes import llama
from run_devices import H100, nemo_strategy

rows = []

# NeMo 24.07 FP8 pretraining table (DGX-H100) and Megatron-Bridge 25.11 H100 rows.
NEMO_SRC = {
    "repo": "NVIDIA/NeMo",
    "path": "docs/source/performance/performance_summary.md (Pretraining, NeMo 24.07, DGX-H100, FP8)",
    "commit": "070a0bb168d405d653b9734c0017cf5078e77c0d",
}


def dense(rid, key, n, gbs, tp, pp, cp, vpp, tok, src, config, extra=(), note=""):
    m = llama(key)
    rows.append(
        {
            "id": rid,
            "category": "cp" if cp > 1 else "dense_h100",
            "source": dict(src, config_via=config),
            "hardware": H100,
            "model": m,
            "strategy": nemo_strategy(n, gbs, 1, tp, pp, cp, vpp, "fp8", extra),
            "n_devices": n,
            "measured": {"tokens_per_s_per_device": tok},
            (
                "stated_vs_inferred"
            ): "stated: GPUs, GBS, MBS, seq, TP/PP/CP/VP, tokens/s/GPU, FP8; the config file's recompute"
            " "
            "(none), distributed optimizer with overlapped grad/param sync, sequence parallel and "
            "userbuffers tp overlap for tp > 1, "
            "flash attention; FP8 recipe as the shared file's FP8 rows [inferred]" + note,
            "flags": {
                "moe": False,
                "cp_gt_1": cp > 1,
                "fp8": True,
                "iteration_time_from": "tokens/s",
            },
        }
    )


L3 = "NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/llama/"
dense(
    "nemo2407_llama2_7b_fp8_8gpu",
    "llama2_7b",
    8,
    128,
    1,
    1,
    1,
    1,
    16847,
    NEMO_SRC,
    L3 + "llama2_7b.yaml (ASSUMPTION: same recompute / optimizer settings as llama3_8b.yaml)",
)
dense(
    "nemo2407_llama2_13b_fp8_16gpu",
    "llama2_13b",
    16,
    128,
    1,
    4,
    1,
    10,
    8646,
    NEMO_SRC,
    L3 + "llama2_13b.yaml (ASSUMPTION as above)",
)
dense(
    "nemo2407_llama2_70b_fp8_64gpu",
    "llama2_70b",
    64,
    128,
    4,
    4,
    1,
    20,
    1707,
    NEMO_SRC,
    L3 + "llama2_70b.yaml (ASSUMPTION as above)",
)
dense(
    "nemo2407_llama3_8b_fp8_8gpu_cp2",
    "llama3_8b",
    8,
    128,
    1,
    1,
    2,
    1,
    12036,
    NEMO_SRC,
    L3
    + (
        "llama3_8b.yaml @14860f74 (read: mcore_gpt, activations_checkpoint_granularity null, "
        "sequence_parallel false, distributed_fused_adam with overlap_grad_sync / "
        "overlap_param_sync and contiguous grad / param buffers, no grad_sync_dtype (Apex's "
        "default: the fp32 optimizer dtype), transformer_engine true, use_flash_attention true, "
        "activation fast-swiglu with bias_activation_fusion, apply_rope_fusion true; cp 2 and fp8 "
        "from the table)"
    ),
)
dense(
    "nemo2407_llama3_70b_fp8_64gpu_cp2",
    "llama3_70b",
    64,
    128,
    4,
    4,
    2,
    5,
    1533,
    NEMO_SRC,
    L3
    + (
        "llama3_70b.yaml @3dd35614 (tp4 pp4 vp5 cp2, sp, ub_tp_comm_overlap, overlap_p2p_comm, "
        "mcore distributed optim with overlap, no recompute)"
    ),
)
BRIDGE = {
    "repo": "NVIDIA-NeMo/Megatron-Bridge",
    "path": "docs/performance-summary-archive.md (25.11 NeMo Container, System: DGX-H100)",
    "commit": "0a25f911b2ed6c6905a539504fdb8e5b40e3438b",
}
BRIDGE_RECIPE = (
    "Megatron-Bridge scripts/performance, read: utils/utils.py WorkloadBaseConfig (recompute and "
    "offload None unless set), utils/precision.py fp8_cs (tensorwise, fp8_param_gather True, "
    "first_last_layers_bf16 False), src/megatron/bridge/recipes/llama/llama3.py @33552627 "
    "_llama3_common (distributed optimizer, overlap_grad_reduce, overlap_param_gather); "
)
BRIDGE_NOTE = (
    "; from the recipe [stated]: no recompute or offload, gradients reduced in bf16 "
    "(--grad-reduce-in-bf16), userbuffers tp overlap; the files read are later than the 25.11 tag "
    "(ASSUMPTION: these rows' settings unchanged)"
)
dense(
    "bridge2511_llama3_70b_fp8cs_64gpu",
    "llama3_70b",
    64,
    128,
    4,
    8,
    1,
    5,
    1602,
    BRIDGE,
    BRIDGE_RECIPE
    + (
        "configs/llama/llama3_workload_base_configs.py @00919dcf LLAMA3_70B_PRETRAIN_CONFIG_H100_"
        "FP8_CS_V1 (tp4 pp8 vp5, no recompute / offload), configs/llama/llama3_llm_pretrain.py "
        "@2a0d46e2 (grad_reduce_in_fp32 False, userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192)"
    ),
    extra=["--fp8-recipe tensorwise", "--grad-reduce-in-bf16"],
    note="; FP8-CS = current (tensorwise) scaling" + BRIDGE_NOTE,
)
dense(
    "bridge2511_llama31_405b_fp8cs_1024gpu_cp2",
    "llama31_405b",
    1024,
    512,
    8,
    8,
    2,
    8,
    292,
    BRIDGE,
    BRIDGE_RECIPE
    + (
        "configs/llama/llama31_workload_base_configs.py @0013c9a8 LLAMA31_405B_PRETRAIN_CONFIG_H100_"
        "FP8_CS_V1 (tp8 pp8 cp2 vp8 gbs512, no recompute / offload), configs/llama/"
        "llama31_llm_pretrain.py @0013c9a8 (grad_reduce_in_fp32 False, "
        "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192); recipes/llama/llama3.py "
        "llama31_405b_pretrain_config: account_for_embedding / loss_in_pipeline_split True (126 "
        "layers + 2 over pp 8 x vp 8 = 64 chunks)"
    ),
    extra=[
        "--fp8-recipe tensorwise",
        "--grad-reduce-in-bf16",
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
    ],
    note="; FP8-CS = current (tensorwise) scaling; the split with embedding / loss counted"
    + BRIDGE_NOTE,
)
