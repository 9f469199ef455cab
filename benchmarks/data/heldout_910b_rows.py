"""Held-out 910B rows: MindSpeed-LLM (ModelLink) Mixtral on Ascend (make_heldout_runs.py writes them)."""

from run_devices import B910

rows = []

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
            "default), distributed optimizer, overlap grad reduce, no recompute [inferred]. "
            "Consistency (moe_s28_findings.md): at 32K the figure is 160 TFLOPS per NPU by "
            "Megatron's formula (45 % of 354), 2.2x the RC3 README's 706 tokens/s/p for the same "
            "model at 32K on 64 NPUs; the caption's tp8 pp4 on 16 chips is impossible (32 chips) "
            "and states no sequence: the figure may not be this script's run [unconfirmed]"
        ),
        "derived": {"check_tflops_per_npu_at_32k": 160.4, "check_tflops_per_npu_at_4k": 125.0},
        "flags": {"moe": True, "cp_gt_1": True, "fp8": False, "iteration_time_from": "step time"},
    }
)
