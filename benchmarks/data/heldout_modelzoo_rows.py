"""Held-out rows from Megatron-MoE-ModelZoo: Qwen3-235B (4K and long context) and Mixtral-8x22B on
H100 (make_heldout_runs.py writes them).
"""

from llama_shapes import mixtral_8x22b
from run_devices import H100

rows = []

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


def _qwen_check(step, tf):
    """GFLOP per token implied by the row's TFLOPS and step time, beside the formula's."""
    return {
        "check_gflop_per_token_implied": round(tf * 1e12 * 256 * step / (2048 * 4096) / 1e9, 1),
        "check_gflop_per_token_formula": round(qwen_flops_per_token(4096) / 1e9, 1),
    }


def qwen(
    rid, tp, ep, pp, vpp, dp, dispatcher, recompute_modules, step, tf, extra=(), note="", **more
):
    """One row of the 4K Performance Results table; `more` overrides strategy keys (the FSDP
    row's mbs, fsdp and full recompute)."""
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
        **more,
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
            "derived": _qwen_check(step, tf),
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
qwen(
    "mz_qwen3_235b_deepep_tp2_ep8_fsdp_mbs4_full",
    2,
    8,
    1,
    1,
    128,
    "flex",
    [],
    17.6,
    276,
    note=(
        "; the table's FSDP 'On' row (EDP 32, MBS 4, GA 4, recompute 'full', note 'disable log "
        "para norm', main(1e057005)): Megatron-FSDP read as --use-megatron-fsdp "
        "--data-parallel-sharding-strategy optim_grads_params [inferred: the sharding is not "
        "stated]; 'full' read as --recompute-granularity full --recompute-method uniform "
        "--recompute-num-layers 1 (the readme's own full-recompute fallback) [inferred]"
    ),
    mbs=4,
    fsdp="FSDP on (table column), sharding not stated",
    recompute="full (table column)",
)

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
