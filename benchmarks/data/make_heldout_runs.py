"""Writes benchmarks/data/heldout_runs.json: the held-out published runs, each with its source and
what is stated vs inferred (the TFLOPS-derived iteration times computed here, formula in the row).

    python benchmarks/data/make_heldout_runs.py   (from the repository root)
"""

import json

from llama_shapes import llama, mixtral_8x22b
from run_devices import B910, H100, nemo_strategy

MZ = "yanring/Megatron-MoE-ModelZoo"
QWEN_SRC = {
    "repo": MZ,
    "path": "best_practice/Qwen3/readme.md (Performance Results table)",
    "commit": "c1ad0b5c89f425d60febddc38e7f741a16f08bd1",
    ("config_via"): (
        "model_configs/benchmarking/Qwen3-235B-A22B.yaml "
        "@1ed4179f72e4873bc246501a976ed21628e99582; runtime_configs/benchmarking/runtime.conf "
        "@30631ea5 (NUM_LAYERS 96 = 94 layers + embedding + loss, 'Account loss and embedding for"
        " number of layers')"
    ),
    "setup": "256 H100, NVLink4, InfiniBand 8x50 GB/s",
}
QWEN = {
    "name": "Qwen3-235B-A22B",
    "arch": "llama",
    "layers": 94,
    "hidden": 4096,
    "heads": 64,
    "kv_heads": 4,
    "head_dim": 128,
    "ffn": None,
    "vocab": 151936,
    "seq": 4096,
    "moe": {
        "num_experts": 128,
        "topk": 8,
        "moe_ffn": 1536,
        "first_k_dense": 0,
        "shared_experts": {"count": 0, "ffn_total": 0},
    },
    ("stated"): (
        "Qwen3-235B-A22B.yaml: num-layers 94, hidden 4096, ffn 12288 (dense, unused: every layer "
        "MoE), 64 heads, kv-channels 128, 4 query groups, qk-layernorm, 128 experts, topk 8, "
        "moe-ffn 1536, untied, RMSNorm, SwiGLU, rope; vocab 151936 = Qwen tokenizer padded to "
        "make-vocab-size-divisible-by 1187 (1187*128) [inferred]"
    ),
}
QWEN_FLAGS = [
    "--expert-tensor-parallel-size 1",
    "--transformer-impl transformer_engine",
    "--qk-layernorm",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--moe-router-load-balancing-type aux_loss",
    "--moe-router-dtype fp32",
    "--moe-router-fusion",
    "--cross-entropy-loss-fusion",
    "--manual-gc",
]


def qwen_flops_per_token(seq):
    """Megatron-LM num_floating_point_operations (2025, causal attention) per token, fwd+bwd (x3)."""
    h, hq, kv, L, V = 4096, 64 * 128, 4 * 128, 94, 151936
    per_layer = (
        2 * h * (hq + 2 * kv) + 2 * hq * h + 2 * seq * hq + 8 * 3 * 2 * h * 1536 + 2 * h * 128
    )
    return 3 * (L * per_layer + 2 * h * V)


rows = []


def qwen(rid, tp, ep, pp, vpp, dp, dispatcher, recompute_modules, step, tf, extra=(), note=""):
    strategy = {
        "tp": tp,
        "pp": pp,
        "cp": 1,
        "ep": ep,
        "etp": 1,
        "vpp": vpp,
        "mbs": 1,
        "gbs": 2048,
        "dp": dp,
        "sp": True,
        "precision": "bf16",
        "moe_dispatcher": dispatcher,
        "moe_routing": "dropless (aux_loss; force balance not set)",
        "recompute": ("selective: " + ", ".join(recompute_modules))
        if recompute_modules
        else "none (recompute column empty)",
        "distributed_optimizer": True,
        "overlap_grad_reduce": True,
        "overlap_param_gather": True,
        "framework": "Megatron-Core (ModelZoo 'Code' column)",
        "extra_flags": QWEN_FLAGS
        + (["--moe-enable-deepep"] if dispatcher == "flex" else [])
        + ([f"--recompute-modules {' '.join(recompute_modules)}"] if recompute_modules else [])
        + list(extra),
    }
    rows.append(
        {
            "id": rid,
            "category": "moe",
            "source": QWEN_SRC,
            "hardware": H100,
            "model": QWEN,
            "strategy": strategy,
            "n_devices": 256,
            "measured": {"step_time_s": step, "tflops_per_device": tf},
            "derived": {
                "check_gflop_per_token_implied": round(
                    tf * 1e12 * 256 * step / (2048 * 4096) / 1e9, 1
                ),
                "check_gflop_per_token_formula": round(qwen_flops_per_token(4096) / 1e9, 1),
            },
            (
                "stated_vs_inferred"
            ): "stated: dispatcher, tp/cp/ep/pp/etp/vpp/dp, mbs, gbs, recompute column, step time, "
            "TFLOPS; "
            "from the yaml: distributed optimizer, overlap grad/param, sp, flash attention, grouped "
            "GEMM, permute/router fusion; "
            "'norm, act' read as --recompute-modules layernorm moe_act [inferred]" + note,
            "flags": {
                "moe": True,
                "cp_gt_1": False,
                "fp8": False,
                "iteration_time_from": "step time",
            },
        }
    )


qwen(
    "mz_qwen3_235b_deepep_tp2_ep32_pp8_vpp4",
    2,
    32,
    8,
    4,
    16,
    "flex",
    ["layernorm", "moe_act"],
    19.7,
    245,
)
qwen(
    "mz_qwen3_235b_deepep_tp2_ep32_pp8_vpp4_1f1b_overlap",
    2,
    32,
    8,
    4,
    16,
    "flex",
    ["layernorm", "moe_act"],
    17.6,
    276,
    extra=["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"],
    note=(
        "; '+1f1b overlap' read as --overlap-moe-expert-parallel-comm --delay-wgrad-compute "
        "(DeepSeekV3 readme's 'EP A2A overlapping') [inferred]"
    ),
)
qwen(
    "mz_qwen3_235b_a2a_tp2_ep8_pp32_vpp3",
    2,
    8,
    32,
    3,
    4,
    "alltoall",
    ["layernorm", "moe_act"],
    24.2,
    200,
)
qwen("mz_qwen3_235b_deepep_tp4_ep8_pp8_vpp4_norecompute", 4, 8, 8, 4, 8, "flex", [], 29.0, 167)

# Long context (same readme, 'Long Context' table): TFLOPS only -> time by the formula checked above.
for seq, cp, forced, dropless in (
    (16384, 1, 295, 237),
    (32768, 2, 335, 277),
    (65536, 4, 368, 320),
    (131072, 8, 389, 357),
):
    for routing, tf in (("forced_balance", forced), ("dropless", dropless)):
        f = qwen_flops_per_token(seq)
        t = 256 * seq * f / (tf * 1e12 * 256)
        model = dict(QWEN, seq=seq)
        strategy = {
            "tp": 4,
            "pp": 8,
            "cp": cp,
            "ep": 8,
            "etp": 1,
            "vpp": 4,
            "mbs": 1,
            "gbs": 256,
            "dp": 8 // cp,
            "sp": True,
            "precision": "bf16",
            "moe_dispatcher": "flex",
            "cp_algo": "not stated (Megatron default p2p ring)",
            "moe_routing": routing.replace("_", " "),
            "recompute": "selective: layernorm, moe",
            "distributed_optimizer": True,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "framework": "Megatron-Core (ModelZoo)",
            "extra_flags": QWEN_FLAGS
            + ["--moe-enable-deepep", "--recompute-modules layernorm moe"]
            + (["--moe-router-force-load-balancing"] if routing == "forced_balance" else []),
        }
        rows.append(
            {
                "id": f"mz_qwen3_235b_long_{seq // 1024}k_cp{cp}_{routing}",
                "category": "cp" if cp > 1 else "moe",
                "source": dict(
                    QWEN_SRC,
                    path=(
                        "best_practice/Qwen3/readme.md (Long Context table and its command: PP=8 VPP=4 EP=8 "
                        "OPTIMIZER_OFFLOAD=0 A2A_OVERLAP=0, --recompute-granularity selective --recompute-modules"
                        " layernorm moe)"
                    ),
                ),
                "hardware": H100,
                "model": model,
                "strategy": strategy,
                "n_devices": 256,
                "measured": {"tflops_per_device": tf},
                "derived": {
                    "iteration_time_s": round(t, 3),
                    "model_gflop_per_token": round(f / 1e9, 2),
                    ("iteration_time_how"): (
                        "gbs*seq*F_token/(TFLOPS*devices); F_token = Megatron-LM num_floating_point_operations "
                        "with causal attention (3 x [L x (2h(hq+2kv) + 2hq h + 2 s hq + topk 6 h moe_ffn + 2hE) +"
                        " 2hV]); the formula gives 148.3 GFLOP/token at 4096 against 147.3-148.2 implied by the "
                        "step-time rows of the same readme"
                    ),
                },
                ("stated_vs_inferred"): (
                    "stated: seq, nodes (32), tp, cp, gbs, TFLOPS, dispatcher DeepEP, bf16, PP 8 VPP 4 EP 8 "
                    "and recompute modules in the command; dp = 256/(tp pp cp) [derived]; time from TFLOPS "
                    "[derived]. Recipe read (qwen3mem lane): runtime_configs/benchmarking/runtime.conf "
                    "@30631ea5 (MBS 1, NUM_LAYERS 96 -> 3 layers per virtual stage, grouped GEMM true); "
                    "sbatch_benchmarking.sh @78930f0c (DISPATCHER deepep -> --moe-token-dispatcher-type "
                    "flex --moe-flex-dispatcher-backend deepep; OPTIMIZER_OFFLOAD=0: no optimizer offload; "
                    "A2A_OVERLAP=0: no EP overlap); no activation offloading and no --cp-comm-type in the "
                    "command or Qwen3-235B-A22B.yaml @1ed4179f -> Megatron's default p2p ring [inferred]; "
                    "--tp-comm-overlap (PR=bf16) only in the later stored sbatch_benchmarking.sh @38ce2ed2, "
                    "not taken"
                ),
                "flags": {
                    "moe": True,
                    "cp_gt_1": cp > 1,
                    "fp8": False,
                    "iteration_time_from": "TFLOPS + FLOP formula",
                },
            }
        )


# Mixtral-8x22B (ModelZoo best_practice/Mixtral/run_mixtral_8x22B.sh comments).
def mixtral22_flops():
    h, hq, kv, L, V, s = 6144, 6144, 1024, 56, 32768, 4096
    per_layer = 2 * h * (hq + 2 * kv) + 2 * hq * h + 2 * s * hq + 2 * 3 * 2 * h * 16384 + 2 * h * 8
    return 3 * (L * per_layer + 2 * h * V)


for rid, tf, routing, extra in (
    ("mz_mixtral_8x22b_dropless", 455, "dropless", []),
    (
        "mz_mixtral_8x22b_capacity1_padded",
        470,
        "capacity factor 1.0, padded",
        ["--moe-expert-capacity-factor 1.0", "--moe-pad-expert-input-to-capacity"],
    ),
):
    f = mixtral22_flops()
    rows.append(
        {
            "id": rid,
            "category": "moe",
            "source": {
                "repo": MZ,
                ("path"): (
                    "best_practice/Mixtral/run_mixtral_8x22B.sh (comments: 'stable performance should be "
                    "around 455TFLOPS for H100' dropless; 'around 470TFLOPS' token drop)"
                ),
                "commit": "0993e667ef2183563fdb238acba1df94b93744e5",
                ("config_via"): (
                    "model_configs/benchmarking/Mixtral-8x22B.yaml @0993e667; "
                    "runtime_configs/benchmarking/runtime.conf @30631ea5 ([Mixtral-8x22B] TP 2 PP 8 EP 8 CP 1"
                    " VPP 1 MBS 1 GBS 256, alltoall, grouped GEMM, 16 nodes, seq 4096)"
                ),
            },
            "hardware": H100,
            "model": {
                **mixtral_8x22b(vocab=32768, seq=4096),
                ("stated"): (
                    "yaml: 56 layers, h 6144, ffn 16384, 48 heads, 8 query groups, 8 experts top-2; vocab "
                    "32768 (Mixtral-8x22B tokenizer) [inferred]"
                ),
            },
            "strategy": {
                "tp": 2,
                "pp": 8,
                "cp": 1,
                "ep": 8,
                "etp": 1,
                "vpp": 1,
                "mbs": 1,
                "gbs": 256,
                "dp": 8,
                "sp": True,
                "precision": "bf16",
                "moe_dispatcher": "alltoall",
                "moe_routing": routing,
                "recompute": "none (not in yaml)",
                "distributed_optimizer": True,
                "overlap_grad_reduce": True,
                "overlap_param_gather": True,
                "tp_comm_overlap": True,
                "framework": "Megatron-Core (ModelZoo)",
                "extra_flags": [
                    "--expert-tensor-parallel-size 1",
                    "--transformer-impl transformer_engine",
                    "--moe-router-load-balancing-type aux_loss",
                    "--moe-router-fusion",
                ]
                + extra,
            },
            "n_devices": 128,
            "measured": {"tflops_per_device": tf, "wording": "around (approximate)"},
            "derived": {
                "iteration_time_s": round(256 * 4096 * f / (tf * 1e12 * 128), 3),
                "model_gflop_per_token": round(f / 1e9, 2),
                ("iteration_time_how"): (
                    "gbs*seq*F_token/(TFLOPS*devices), F_token as for the Qwen3 rows (causal) [derived]"
                ),
            },
            ("stated_vs_inferred"): (
                "stated: TFLOPS (approximate), routing, the yaml and runtime.conf layout; time derived"
            ),
            "flags": {
                "moe": True,
                "cp_gt_1": False,
                "fp8": False,
                "iteration_time_from": "TFLOPS + FLOP formula",
            },
        }
    )

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

# MindSpeed-LLM (ModelLink) Mixtral-8x7B on 910B.
MIX7 = {
    "name": "Mixtral-8x7B",
    "arch": "mixtral",
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "ffn": None,
    "vocab": 32000,
    "seq": 4096,
    "moe": {
        "num_experts": 8,
        "topk": 2,
        "moe_ffn": 14336,
        "first_k_dense": 0,
        "shared_experts": {"count": 0, "ffn_total": 0},
    },
}
rows.append(
    {
        "id": "mindspeed10_mixtral_8x7b_32npu_tp8_pp4",
        "category": "moe",
        "source": {
            "repo": "Ascend/MindSpeed-LLM",
            ("path"): (
                "examples/mixtral/README_en.md (Throughput: '4 nodes and 32 chips with tp8 pp4', 487 "
                "tokens/s/p, 16.81 s/step)"
            ),
            "commit": "92c3dfe82786ffd422414e636930055e6d35f73c",
            "config_via": "the README's TP=8 PP=4 EP=1 (the branch-1.0 script is not in the index)",
        },
        "hardware": B910,
        "model": MIX7,
        "strategy": {
            "tp": 8,
            "pp": 4,
            "cp": 1,
            "ep": 1,
            "vpp": None,
            "mbs": 1,
            "gbs": 64,
            "dp": 1,
            "sp": True,
            "precision": "bf16",
            ("recompute"): (
                "full, block, recompute-num-layers 32 [inferred from the v1.0.RC1.0 script of the same "
                "example]"
            ),
            "distributed_optimizer": False,
            "moe_routing": "aux_loss, train capacity factor 1.1 [inferred from RC1 script]",
            "framework": "ModelLink 1.0 (legacy Megatron MoE)",
        },
        "n_devices": 32,
        "measured": {"step_time_s": 16.81, "tokens_per_s_per_device": 487},
        ("stated_vs_inferred"): (
            "stated: 32 chips, tp8 pp4 ep1, tokens/s/p, step time; gbs 64 = 487*32*16.81/4096 "
            "[derived]; seq 4096, full recompute, capacity factor 1.1, legacy MoE from the RC1 script"
            " [inferred]"
        ),
        "flags": {"moe": True, "cp_gt_1": False, "fp8": False, "iteration_time_from": "step time"},
    }
)
rows.append(
    {
        "id": "modellink_mcore_mixtral_8x7b_32k_64npu_tp8_pp2_cp4",
        "category": "cp",
        "source": {
            "repo": "Ascend/ModelLink (MindSpeed-LLM)",
            ("path"): (
                "examples/mixtral_mcore/README_en.md (Throughput: 1568.3 tokens/s/p, 20.9 s/step; "
                "training section TP=8 PP=2 EP=1 CP=4, NNODES=8)"
            ),
            "id_in_index": "21759431095",
            "config_via": "the README's training section (Megatron core_r0.6.0, MindSpeed 2b0edd2)",
        },
        "hardware": B910,
        "model": dict(MIX7, seq=32768),
        "strategy": {
            "tp": 8,
            "pp": 2,
            "cp": 4,
            "ep": 1,
            "vpp": None,
            "mbs": 1,
            "gbs": 64,
            "dp": 1,
            "sp": True,
            "precision": "bf16",
            "cp_algo": "megatron_cp_algo [inferred]",
            "recompute": "not stated",
            "distributed_optimizer": True,
            "overlap_grad_reduce": True,
            "moe_dispatcher": "allgather",
            "moe_routing": "dropless (core_r0.6 default) [inferred]",
            "framework": "ModelLink mcore (Megatron-Core 0.6 MoE)",
        },
        "n_devices": 64,
        "measured": {"step_time_s": 20.9, "tokens_per_s_per_device": 1568.3},
        ("stated_vs_inferred"): (
            "stated: TP 8 PP 2 CP 4 EP 1, 8 nodes, tokens/s/p, step time (the table's caption '2 "
            "nodes and 16 chips with tp8 pp4' contradicts the training section; 1568.3*64*20.9 = 64 x"
            " 32768 tokens agrees with 64 NPUs, gbs 64 [derived]); dispatcher allgather (core_r0.6 "
            "default), distributed optimizer, overlap grad reduce, no recompute [inferred]"
        ),
        "flags": {"moe": True, "cp_gt_1": True, "fp8": False, "iteration_time_from": "step time"},
    }
)

about = (
    "Held-out published measured runs (NOT in shared/data/published_calibration.json) for checking the model on MoE, "
    "context-parallel and H100 jobs; the same row shape as the shared file (benchmarks/published_runs.py reads it). "
    "Each row names its source and says what is stated and what is inferred ([inferred] / [derived] / ASSUMPTION). "
    "`strategy.extra_flags` are Megatron flags of the run's config written into the launch script as they are. "
    "Held out: never fit to these rows."
)
with open("benchmarks/data/heldout_runs.json", "w") as out:
    json.dump({"about": about, "runs": rows}, out, indent=1)
print(len(rows))
for r in rows:
    print(r["id"], r.get("derived", {}))
