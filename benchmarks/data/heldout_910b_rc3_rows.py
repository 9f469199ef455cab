"""Held-out 910B rows: MindSpeed-LLM v1.0.RC3.0's MoE throughput table (make_heldout_runs.py
writes them).

Measured: Ascend/MindSpeed-LLM README.md @31100602dc2b (tag v1.0.RC3.0), table '性能' (tokens/s/p
on Atlas 900 A2 PODc): MiniCPM-MoE-8x2B 2982, DeepSeek-V2-60B (16 layers) 1083, Mixtral-8x7B 32K
706, Mixtral-8x22B 32K 239. Step time = gbs x seq / (tokens/s/p x NPUs) [derived].
Scripts: the RC3-era mcore examples as kept in zzhx1/Hetaceso-ModelLink, a ModelLink fork (the
index holds no v1.0.RC3.0 copy of Ascend's repository), at the commits in each row; each row
keeps the script's layout, batch, recompute and MoE flags (data / checkpoint / log flags dropped).
"""

from heldout_910b_rows import MIX7
from llama_shapes import mixtral_8x22b
from run_devices import B910

rows = []

RC3_README = {
    "repo": "Ascend/MindSpeed-LLM",
    "path": "README.md (v1.0.RC3.0, table '性能', tokens/s/p)",
    "commit": "31100602dc2b",
}
FORK = "zzhx1/Hetaceso-ModelLink"
FRAMEWORK = "MindSpeed-LLM RC3 mcore (Megatron core_r0.7 + MindSpeed)"
MS_FUSED = ["--use-fused-rmsnorm", "--use-fused-swiglu", "--use-fused-rotary-pos-emb"]
MOE = {"first_k_dense": 0, "shared_experts": {"count": 0, "ffn_total": 0}}
MIXTRAL_8X7B_32K = dict(MIX7, seq=32768)


def shape(name, layers, hidden, heads, head_dim, ffn, vocab, seq, moe, **extra):
    """A row's `model` object: LLaMA-style, every head its own KV head (no GQA)."""
    return dict(
        name=name, arch="llama", layers=layers, hidden=hidden, heads=heads, kv_heads=heads,
        head_dim=head_dim, ffn=ffn, vocab=vocab, seq=seq, moe=moe, **extra,
    )  # fmt: skip


MINICPM_MOE = shape(
    "MiniCPM-MoE-8x2B", 40, 2304, 36, 64, None, 122753, 4096,
    dict(MOE, num_experts=8, topk=2, moe_ffn=5760), tied_embeddings=True,
)  # fmt: skip
DEEPSEEK_V2_16L = shape(
    "DeepSeek-V2 (16 layers, 60B)", 16, 5120, 128, 128, 12288, 102400, 8192,
    {"num_experts": 160, "topk": 6, "moe_ffn": 1536, "first_k_dense": 1,
     "shared_experts": {"count": 2, "ffn_total": 3072}},
)  # fmt: skip
MLA = [
    "--multi-head-latent-attention",
    "--qk-rope-head-dim 64",
    "--qk-nope-head-dim 128",
    "--q-lora-rank 1536",
    "--kv-lora-rank 512",
    "--v-head-dim 128",
    "--qk-layernorm",
]


def rc3(rid, model, n, step, tps, script, commit, strategy, stated):
    """One RC3 row: the README's tokens/s/p and step time, the script's strategy."""
    rows.append(
        {
            "id": rid,
            "category": "moe",
            "source": dict(RC3_README, config_via=f"{FORK} {script} @{commit}"),
            "hardware": B910,
            "model": model,
            "strategy": dict(strategy, precision="bf16", framework=FRAMEWORK),
            "n_devices": n,
            "measured": {"step_time_s": step, "tokens_per_s_per_device": tps},
            "derived": {
                "check_step_time_s": round(strategy["gbs"] * model["seq"] / (tps * n), 2),
            },
            "stated_vs_inferred": stated,
            "flags": {
                "moe": True,
                "cp_gt_1": strategy.get("cp", 1) > 1,
                "fp8": False,
                "iteration_time_from": "tokens/s/p",
            },
        }
    )


rc3(
    "mindspeed_rc3_minicpm_moe_8x2b_8npu_pp4_ep2",
    MINICPM_MOE,
    8,
    21.98,
    2982,
    "examples/mcore/minicpm/pretrain_minicpm_8x2b.sh",
    "edc8ed518171a0e70deb9146d89fe322768bed7b",
    {
        "tp": 1,
        "pp": 4,
        "cp": 1,
        "ep": 2,
        "vpp": None,
        "mbs": 1,
        "gbs": 128,
        "dp": 2,
        "sp": False,
        "recompute": "none (the script sets none)",
        "distributed_optimizer": True,
        "overlap_grad_reduce": True,
        "moe_dispatcher": "allgather",
        "moe_routing": "dropless (aux_loss 0.01)",
        "grouped_gemm": True,
        "permute_fusion": False,
        "extra_flags": MS_FUSED
        + ["--moe-permutation-async-comm", "--no-gradient-accumulation-fusion"],
    },
    "stated by the script: 1 node x 8 NPUs, TP 1 PP 4 EP 2, 40 layers, h 2304, ffn 5760, 36 "
    "heads, vocab 122753 (tied: no --untie-embeddings-and-output-weights), seq 4096, mbs 1, gbs "
    "128, allgather dispatcher, grouped GEMM, permutation async comm, distributed optimizer, "
    "overlap grad / param, no gradient-accumulation fusion, no recompute; dp = 8/4 = 2 [derived];"
    " muP scale-emb / scale-depth (elementwise) not modelled",
)
rc3(
    "mindspeed_rc3_deepseek2_60b_16l_8k_32npu_pp4_ep8",
    DEEPSEEK_V2_16L,
    32,
    60.51,
    1083,
    "examples/mcore/deepseek2/pretrain_deepseek2_60b_8k_ptd.sh",
    "7857e68009fcb4aca3181f7e725a82d9061d4ae6",
    {
        "tp": 1,
        "pp": 4,
        "cp": 1,
        "ep": 8,
        "vpp": 2,
        "mbs": 1,
        "gbs": 256,
        "dp": 8,
        "sp": False,
        "recompute": "full, uniform, recompute-num-layers 1",
        "distributed_optimizer": True,
        "overlap_grad_reduce": False,
        "moe_dispatcher": "allgather",
        "moe_routing": "dropless (group_limited_greedy, topk-group 3)",
        "grouped_gemm": True,
        "permute_fusion": False,
        "extra_flags": MLA
        + MS_FUSED
        + [
            "--moe-permutation-async-comm",
            "--reuse-fp32-param",
            "--no-gradient-accumulation-fusion",
            "--output-layer-slice-num 8",
        ],
    },
    "stated by the script: 4 nodes x 8 NPUs, TP 1 PP 4 EP 8, 2 layers per virtual stage (vpp 2),"
    " 16 layers (first dense, ffn 12288), h 5120, 128 heads, MLA (q-lora 1536, kv-lora 512, "
    "nope 128, rope 64, v 128), 160 experts top-6, moe ffn 1536, 2 shared experts, vocab 102400,"
    " seq 8192, mbs 1, gbs 256, full recompute uniform 1, allgather dispatcher, grouped GEMM, "
    "distributed optimizer, reuse-fp32-param; dp = 32/4 = 8 [derived]",
)
MIXTRAL_STRATEGY = {
    "tp": 8, "pp": 4, "cp": 2, "ep": 1, "mbs": 1, "sp": True, "dp": 1, "mc2": True,
    "cp_algo": "megatron_cp_algo", "distributed_optimizer": True, "overlap_grad_reduce": True,
    "grouped_gemm": False, "permute_fusion": False,
}  # fmt: skip
rc3(
    "mindspeed_rc3_mixtral_8x7b_32k_64npu_tp8_pp4_cp2",
    MIXTRAL_8X7B_32K,
    64,
    92.83,
    706,
    "examples/mcore/mixtral/pretrain_mixtral_8x7b_ptd.sh",
    "30022c5c2a9ad669cefd65c570a72f9f2eba9e5b",
    dict(
        MIXTRAL_STRATEGY,
        vpp=None,
        gbs=128,
        recompute="none (the script sets none)",
        moe_dispatcher="allgather",
        moe_routing="dropless (aux_loss 0.02)",
        extra_flags=MS_FUSED
        + ["--context-parallel-algo megatron_cp_algo", "--moe-permutation-async-comm"],
    ),
    "stated by the script: 8 nodes x 8 NPUs, TP 8 PP 4 EP 1 CP 2 megatron_cp_algo, 32 layers, "
    "seq 32768, mbs 1, gbs 128, MC2, sp, distributed optimizer, overlap grad / param, flash "
    "attention, fused rmsnorm / swiglu / rope, default (allgather) dispatcher, permutation async "
    "comm, no grouped GEMM, no recompute; dp = 64/(8*4*2) = 1 [derived]",
)
rc3(
    "mindspeed_rc3_mixtral_8x22b_32k_64npu_tp8_pp4_cp2",
    mixtral_8x22b(vocab=32000, seq=32768),
    64,
    34.28,
    239,
    "examples/mcore/mixtral/pretrain_mixtral_8x22b_32k_ptd.sh",
    "8d88f91af84e52970d326cf1753a0070cacfc96b",
    dict(
        MIXTRAL_STRATEGY,
        vpp=7,
        gbs=16,
        recompute="none (--recompute-method block --recompute-num-layers 30 without "
        "--recompute-granularity)",
        moe_dispatcher="alltoall",
        moe_routing="dropless (aux_loss 0.001)",
        extra_flags=MS_FUSED
        + [
            "--context-parallel-algo megatron_cp_algo",
            "--moe-permutation-async-comm",
            "--reuse-fp32-param",
            "--swap-attention",
        ],
    ),
    "stated by the script: 8 nodes x 8 NPUs, TP 8 PP 4 EP 1 CP 2 megatron_cp_algo, 56 layers, 2 "
    "layers per virtual stage (vpp 7), seq 32768, mbs 1, gbs 16, MC2, sp, alltoall dispatcher, "
    "swap-attention, reuse-fp32-param, distributed optimizer, overlap grad / param; recompute "
    "method / layers without a granularity: Megatron recomputes nothing [inferred]; dp = 1 "
    "[derived]",
)
