"""The MindSpeed-LLM row of memory_runs.json: Mixtral-8x22B at 32K context on 64 Ascend 910B NPUs
(a script its model list marks as tested), in the row shape of heldout_runs.json."""

from llama_shapes import mixtral_8x22b
from run_devices import B910

MIXTRAL22_32K = mixtral_8x22b(vocab=32000, seq=32768)
"""The script's model: --vocab-size 32000, --seq-length 32768 (Mixtral-8x22B's shape otherwise)."""
MS_SCRIPT = "examples/mcore/mixtral/pretrain_mixtral_8x22b_32k_ptd.sh"
MS_FLAGS = [
    "--use-mcore-models",
    "--context-parallel-algo megatron_cp_algo",
    "--reuse-fp32-param",
    "--use-fused-rmsnorm",
    "--use-fused-swiglu",
    "--use-fused-rotary-pos-emb",
    "--no-masked-softmax-fusion",
    "--moe-aux-loss-coeff 0.001",
    "--moe-permutation-async-comm",
]
"""The script's flags beyond the layout (Ascend/MindSpeed-LLM @015ce048, MS_SCRIPT)."""


STRATEGY = {
    "tp": 8, "pp": 4, "cp": 2, "ep": 1, "etp": 1, "vpp": 7, "mbs": 1, "gbs": 16, "dp": 1,
    "sp": True, "precision": "bf16", "recompute": "full, uniform, recompute-num-layers 1",
    "distributed_optimizer": True, "overlap_grad_reduce": True,
    "moe_dispatcher": "alltoall_seq", "moe_routing": "dropless (aux_loss)",
    "framework": "MindSpeed-LLM mcore", "extra_flags": MS_FLAGS,
}  # fmt: skip


def mindspeed_mixtral22_32k():
    """Mixtral-8x22B at 32K on 64 910B NPUs: the MindSpeed-LLM script, listed as tested."""
    return {
        "id": "mindspeed_mixtral_8x22b_32k_64npu_tp8_pp4_cp2",
        "category": "memory_910b",
        "source": {
            "repo": "Ascend/MindSpeed-LLM",
            "path": MS_SCRIPT,
            "commit": "015ce048f5e153459447556f979ccf64a9ca8e82",
            "ran_via": (
                "docs/models/moe_model.md (moguizhizi/MindSpeed-LLM mirror): Mixtral 8x22B, 32K, "
                "Mcore, cluster 8x8, certification [Pass] ('tested by Ascend's official release')"
            ),
        },
        "hardware": B910,
        "model": MIXTRAL22_32K,
        "strategy": STRATEGY,
        "n_devices": 64,
        "measured": {"ran": "listed [Pass] on 8x8 NPUs (no time published for this script)"},
        "stated_vs_inferred": (
            "stated by the script: NNODES 8 x 8 NPUs, TP 8 PP 4 EP 1 CP 2 megatron_cp_algo, 56 "
            "layers, 2 layers per virtual stage (vpp 7), seq 32768, mbs 1, gbs 16, full recompute "
            "uniform 1, sp, distributed optimizer, overlap grad reduce / param gather, "
            "reuse-fp32-param, alltoall_seq dispatcher, flash attention, fused rmsnorm / swiglu / "
            "rope, bf16; dp = 64/(8*4*2) = 1 [derived]; the writer adds --moe-grouped-gemm and "
            "--moe-permute-fusion (published_moe.py), which the script does not set [inferred]"
        ),
        "flags": {"moe": True, "cp_gt_1": True, "fp8": False, "iteration_time_from": "none"},
    }
