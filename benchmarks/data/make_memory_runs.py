"""Writes benchmarks/data/memory_runs.json: published runs that ran on 80 GB H100s (NVIDIA's DGX
Cloud benchmarking recipes for NeMo: Llama 3.1 8B / 70B / 405B with context parallelism,
Nemotron-4 15B / 340B, Grok-1 314B, each in BF16 and FP8), in the row shape of
heldout_runs.json (benchmarks/published_runs.py reads it), each with its source and what is
stated vs inferred. They check "will it fit": a run that ran must not be modelled above its
device's memory (validate_published.py prints the peak of every row against the device).

    python benchmarks/data/make_memory_runs.py   (from the repository root)

The step times are the recipes' published "Training step time (seconds per step)" on H100 (the
smallest full-model scale of each table; proxy scales with fewer layers are left out).
"""

import json
from pathlib import Path

from memory_rows import NEMOTRON_FLAGS, llama31, nemotron, row
from mindspeed_memory_rows import mindspeed_mixtral22_32k
from nemo2_memory_rows import nemo2_rows

DGXC = "NVIDIA/dgxc-benchmarking"
COMMIT = "143b90dd91f9be958fed4773ae95d941a3356a82"
LAUNCHER = "NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/"
LAUNCHER_READ = (
    " (read @072ecc47 for llama3_1_405b.yaml: mcore_gpt, activations_checkpoint_granularity null, "
    "distributed_fused_adam with overlap_grad_sync / overlap_param_sync and contiguous grad / "
    "param buffers, no grad_sync_dtype (Apex's default: the fp32 optimizer dtype), "
    "cross_entropy_loss_fusion true, transformer_engine true, use_flash_attention true, "
    "ub_tp_comm_overlap true, sequence_parallel true, fp8_amax_history_len 1024); "
    "llama3.1/configure.sh @143b90dd (+model.fp8_params for FP8)"
)
NEMO1_NOTE = (
    "stated: GPUs, layers, TP/PP/CP/VP, MBS, GBS, GA, seconds per step, BF16 or FP8; "
    "dp = GPUs / (tp pp cp) [derived]; from the recipe's configure.sh [stated]: fp8 hybrid "
    "(delayed scaling, amax history 1024) with +model.fp8_params for FP8 rows (-> "
    "--fp8-param-gather); from the NeMo launcher config [stated by the config]: no recompute "
    "unless the row says so, distributed optimizer with overlapped grad / param sync, sequence "
    "parallel and userbuffers tp overlap for tp > 1, flash attention, fused cross entropy"
)
APEX_REMAINDERS = ["--use-precision-aware-optimizer"]
"""NeMo 1's distributed_fused_adam with fp32 state and bf16 weights keeps no fp32 master copy but
Apex's 16-bit remainders (NeMo nlp/models/language_modeling/megatron_base_model.py
setup_optimization: store_params False, store_param_remainders True unless fp8_params; Apex
contrib/optimizers/distributed_fused_adam.py): 2 B per parameter of the shard, the bytes of
Megatron-Core's remainders, which `--use-precision-aware-optimizer` with fp32 dtypes keeps for
bf16 training (specs.OptimizerPrecision.param_remainders). Gradients stay fp32 (no
grad_sync_dtype: Apex's default is the state dtype)."""
APEX_BF16 = ["--use-precision-aware-optimizer", "--main-grads-dtype bf16",
             "--main-params-dtype bf16", "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"]  # fmt: skip
"""The Nemotron-4 configs' optim (dgxc-benchmarking nemotron/nemotron4-340b-synth.yaml:
distributed_fused_adam, dtype bf16, grad_sync_dtype bf16): bf16 gradients and bf16 moments; the
master copy is a bf16 one with fp8_params (store_params True) and none without (store_params
False: optimizer dtype = model dtype). ASSUMPTION: the BF16 rows' missing master copy is counted
as a bf16 one (2 B per parameter / dp too many: the tool has no master-free dtype)."""
SELECTIVE = "selective (activations_checkpoint_granularity selective: core attention)"


def source(path, config):
    return {"repo": DGXC, "path": path, "commit": COMMIT, "config_via": config}


GROK = {
    "name": "Grok-1 314B",
    "arch": "mixtral",
    "layers": 64,
    "hidden": 6144,
    "heads": 48,
    "kv_heads": 8,
    "head_dim": 128,
    "ffn": None,
    "vocab": 128256,
    "seq": 8192,
    "moe": {
        "num_experts": 8,
        "topk": 2,
        "moe_ffn": 32768,
        "first_k_dense": 0,
        "shared_experts": {"count": 0, "ffn_total": 0},
    },
    "stated": (
        "NeMo scripts/performance/llm/pretrain_grok1_314b.py @01b83a7c model(): MixtralConfig8x7B "
        "with 64 layers, hidden 6144, 48 heads, 8 query groups, ffn 32768, 8 experts (top-2 of "
        "the Mixtral config), seq 8192; tokenizer meta-llama/Meta-Llama-3-70B -> vocab 128256 "
        "[inferred]"
    ),
}
GROK_SRC = source(
    "grok1/README_314b.md (Expected Performance, 512 H100 GPUs: TP 4 PP 8 CP 2 EP 8 VP 8 MBS 1 "
    "GBS 1024, 64 layers)",
    "NVIDIA/NeMo scripts/performance/llm/pretrain_grok1_314b.py @01b83a7c (performance mode: "
    "MegatronTokenDropCallback (capacity factor 1.0, padded), tp comm overlap, "
    "distributed_fused_adam, DDP grad_reduce_in_fp32 False in performance mode and for fp8, "
    "overlap grad reduce / param gather; bf16_with_fp8_mixed for fp8) and helpers.py "
    "set_primary_perf_configs (recompute / offload only when their counts are > 0: none here)",
)
GROK_NOTE = (
    "stated: 512 GPUs, TP/PP/CP/EP/VP, MBS, GBS, 64 layers, seconds per step, BF16 or FP8; "
    "from the recipe: token drop with capacity factor 1.0 and padding, distributed optimizer "
    "with overlap, gradients reduced in bf16, sequence parallel, tp overlap, no recompute "
    "[stated by the recipe]; dispatcher alltoall, FP8 delayed scaling and no fp8 parameter "
    "gather [inferred: NeMo 2 defaults of that container]; ASSUMPTION: the recipe file read is "
    "the one the table's container ran"
)
GROK_KW = {
    "ep": 8,
    "etp": 1,
    "moe_dispatcher": "alltoall",
    "moe_routing": "capacity factor 1.0, padded",
    "optimizer": "distributed optimizer, overlap_grad_sync, overlap_param_sync",
}
GROK_FLAGS = [
    "--grad-reduce-in-bf16",
    "--moe-expert-capacity-factor 1.0",
    "--moe-pad-expert-input-to-capacity",
]


def runs():
    l8, l70, l405 = llama31("llama3_8b"), llama31("llama3_70b"), llama31("llama31_405b", 16)
    n15 = nemotron("Nemotron-4 15B", 32, 6144, 48, 24576)
    n340 = nemotron("Nemotron-4 340B", 96, 18432, 96, 73728)
    out = []
    for precision, t8, t70, t405, t15, t340, tgrok in (
        ("bf16", 12.91, 14.72, 17.20, 2.812, 4.61, 20.83),
        ("fp8", 9.67, 11.01, 11.24, 2.039, 3.16, 16.69),
    ):
        p = precision
        out += [
            row(f"dgxc2409_llama31_8b_{p}_8gpu_cp2",
                source("llama3.1/README_8b.md (24.09, TP 1 PP 1 CP 2 MBS 1 GA 32, 8 GPUs GBS 128)",
                       LAUNCHER + "llama/llama3_1_8b.yaml @2ac7cee8 (optim "
                       "mcore_distributed_optim: Megatron's distributed optimizer, fp32 grads); "
                       "llama3.1/configure.sh @143b90dd"),
                l8, 8, 128, 1, 1, 1, 2, 1, t8, p, NEMO1_NOTE),
            row(f"dgxc2409_llama31_70b_{p}_64gpu_cp2",
                source("llama3.1/README_70b.md (24.09, TP 4 PP 4 CP 2 VP 5 MBS 1, 64 GPUs GBS 128)",
                       LAUNCHER + "llama/llama3_1_70b.yaml (ASSUMPTION: the "
                       "8B config's mcore_distributed_optim); llama3.1/configure.sh @143b90dd"),
                l70, 64, 128, 1, 4, 4, 2, 5, t70, p, NEMO1_NOTE),
            row(f"dgxc2409_llama31_405b_{p}_576gpu_cp2",
                source("llama3.1/README_405b.md (24.09, TP 8 PP 9 CP 2 VP 7 MBS 1, 576 GPUs GBS 252)",
                       LAUNCHER + "llama/llama3_1_405b.yaml" + LAUNCHER_READ
                       + "; num_query_groups 16 as the yaml and the README's FLOP note state"),
                l405, 576, 252, 1, 8, 9, 2, 7, t405, p, NEMO1_NOTE,
                [] if p == "fp8" else APEX_REMAINDERS),
            row(f"dgxc_nemotron4_15b_{p}_16gpu",
                source("nemotron/README_15b.md (TP 4 PP 1 MBS 4 GA 4, 16 GPUs GBS 64)",
                       "nemotron/nemotron4-15b-synth.yaml and configure.sh of the same repository "
                       "(ASSUMPTION: the optimizer and recompute of nemotron4-340b-synth.yaml)"),
                n15, 16, 64, 4, 4, 1, 1, 1, t15, p, NEMO1_NOTE, NEMOTRON_FLAGS + APEX_BF16,
                recompute=SELECTIVE),
            row(f"dgxc2411_nemotron4_340b_{p}_128gpu",
                source("nemotron/README_340b.md (24.11, TP 8 PP 8 VP 12 MBS 1 GA 16, 128 GPUs GBS 32)",
                       "nemotron/nemotron4-340b-synth.yaml @8f5cbb37 (selective recompute, "
                       "distributed_fused_adam dtype bf16, grad_sync_dtype bf16, sp, layernorm1p, "
                       "squared-relu, rope, no bias, untied) and configure.sh @35a9aecc "
                       "(+model.fp8_params for FP8, ub_tp_comm_overlap True)"),
                n340, 128, 32, 1, 8, 8, 1, 12, t340, p, NEMO1_NOTE, NEMOTRON_FLAGS + APEX_BF16,
                recompute=SELECTIVE),
            row(f"dgxc_grok1_314b_{p}_512gpu_cp2", GROK_SRC, GROK,
                512, 1024, 1, 4, 8, 2, 8, tgrok, p, GROK_NOTE, GROK_FLAGS, **GROK_KW),
        ]  # fmt: skip
    return out


DOC = {
    "about": (
        "Published runs that ran on 80 GB H100s (NVIDIA DGX Cloud benchmarking recipes for NeMo), "
        "for the memory check of validate_published.py (no row that ran modelled above its "
        "device); written by benchmarks/data/make_memory_runs.py. Each row names its source and "
        "says what is stated and what is inferred ([inferred] / [derived] / ASSUMPTION)."
    ),
    "runs": runs() + nemo2_rows() + [mindspeed_mixtral22_32k()],
}

if __name__ == "__main__":
    out = Path(__file__).with_name("memory_runs.json")
    out.write_text(json.dumps(DOC, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(DOC['runs'])} rows)")
