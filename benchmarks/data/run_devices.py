"""What the run-file generators of this folder share (make_heldout_runs.py, make_memory_runs.py):
the accelerators of their rows (a row's `hardware` object) and the strategy of a NeMo
(Megatron-Core) run with its recipes' usual settings."""

H100 = {
    "id": "h100_dgx_ref",
    "name": "NVIDIA DGX H100 (8x H100-SXM 80GB, NVLink4, 8x400 Gb/s IB per node)",
    "peak_bf16_tflops": 989,
    "peak_fp8_tflops": 1979,
    "hbm_gb": 80,
}
B910 = {
    "id": "ascend_910b_atlas_a2",
    "name": "Huawei Ascend 910B (8 NPUs/node)",
    "peak_bf16_tflops": 354,
    "hbm_gb": 64,
}


def nemo_strategy(n, gbs, mbs, tp, pp, cp, vpp, precision, extra=()) -> dict:
    """A NeMo run's `strategy` object: its layout, dp = n / (tp pp cp), sequence parallel and
    userbuffers tp overlap for tp > 1, no recompute, the distributed optimizer with overlapped
    grad / param sync, flash attention, fused cross entropy, Transformer Engine layers."""
    return {
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "vpp": vpp,
        "mbs": mbs,
        "gbs": gbs,
        "dp": n // (tp * pp * cp),
        "sp": tp > 1,
        "precision": precision,
        "recompute": "none (activations_checkpoint_granularity null)",
        "distributed_optimizer": True,
        "optimizer": "distributed optimizer, overlap_grad_sync, overlap_param_sync",
        "tp_comm_overlap": "ub_tp_comm_overlap true" if tp > 1 else "false",
        "flash_attn": True,
        "fused": ["cross-entropy-loss-fusion"],
        "framework": "NeMo (Megatron-Core)",
        "extra_flags": ["--transformer-impl transformer_engine", *extra],
    }
