"""The NeMo 2 rows of memory_runs.json: the H100 layouts of NeMo's performance recipes
(scripts/performance/recommended_model_configs/model_configs_h100.csv), which the NeMo 25.02 /
25.04 performance summaries' DGX-H100 tables report, with the settings the recipes' helpers set.

Only the GPT3-175B row has a time read here (the 25.02 page's first DGX-H100 row: 866 tokens/s
per GPU); the others are marked `measured.ran` (the summary reports them; their times are further
down the page than the stored excerpt reaches). ASSUMPTION: the table's rows use the CSV's
layouts (they agree where both were read: GPT3-175B 512 GPUs tp4 pp8 vp6 mbs2 gbs2048 on the
25.02 page, LLAMA3-8B tp1 pp1 cp2 on the 24.07 table).
"""

from memory_rows import NEMOTRON_FLAGS, llama31, nemotron, row

CSV = {
    "repo": "NVIDIA/NeMo",
    "path": "scripts/performance/recommended_model_configs/model_configs_h100.csv",
    "commit": "000e8c17a36b378a57e4df0b5a056568d84ab380",
    "table": "https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/archive/"
    "25.04-performance-summary.html (Pre-Training Performance, System: DGX-H100)",
    "config_via": (
        "scripts/performance/helpers.py @02a0e6a5 set_primary_perf_configs / "
        "set_perf_optimization_configs: cross_entropy_fusion_impl 'te'; bf16: "
        "use_precision_aware_optimizer True (fp32 dtypes); fp8: bf16_with_fp8_mixed (hybrid, "
        "delayed, amax history 1024, fp8_param_gather True; nemo/collections/llm/recipes/"
        "precision/mixed_precision.py) and grad_reduce_in_fp32 False; recompute / offload only "
        "for counts > 0 (the CSV's are 0); sequence parallel for tp > 1; the recipes' "
        "distributed optimizer with overlapped grad reduce / param gather and tp comm overlap. "
        "ASSUMPTION: the helpers read (later than 25.04) set the same for these rows"
    ),
}
RAN = {"ran": "reported in the NeMo performance summary's DGX-H100 table (source.table)"}
NOTE = (
    "stated by the CSV: GPUs, seq, TP/PP/CP/VP, MBS, GBS, no recompute / offload, no FSDP or "
    "CUDA graphs; dp = GPUs / (tp pp cp) [derived]; from the helpers (source.config_via) "
    "[stated by the recipe]: TE cross entropy, precision-aware optimizer for BF16 (fp32 master as "
    "16-bit remainders), FP8 delayed scaling with FP8 parameter gather and bf16 gradient "
    "reduction; ran: the performance summary reports the layout [inferred: ASSUMPTION above]"
)
TE_CE = ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl te"]
BF16 = ["--use-precision-aware-optimizer", *TE_CE]
FP8 = ["--grad-reduce-in-bf16", *TE_CE]
SPLIT_405B = ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
"""126 layers over pp 8 x vp 8 = 64 chunks: with the embedding and the loss counted, 128
(ASSUMPTION, as for the NeMo 2 rows of blackwell_runs.json)."""
GPT3_175B = {
    "name": "GPT-3 175B",
    "arch": "gpt",
    "layers": 96,
    "hidden": 12288,
    "heads": 96,
    "head_dim": 128,
    "ffn": 49152,
    "vocab": 50257,
    "seq": 2048,
}


def nemo2_rows():
    """The NeMo 2 recipe rows (module docstring)."""
    l8, l70, l405 = llama31("llama3_8b"), llama31("llama3_70b"), llama31("llama31_405b")
    n15 = nemotron("Nemotron-4 15B", 32, 6144, 48, 24576)
    n340 = nemotron("Nemotron-4 340B", 96, 18432, 96, 73728)
    out = [
        row("nemo2502_gpt3_175b_fp8_512gpu", CSV, GPT3_175B, 512, 2048, 2, 4, 8, 1, 6,
            {"tokens_per_s_per_device": 866, "model_tflops_per_device": 932}, "fp8", NOTE, FP8),
        row("nemo2504_llama3_70b_bf16_64gpu_cp2", CSV, l70, 64, 128, 1, 4, 4, 2, 5, RAN, "bf16",
            NOTE, BF16),
        row("nemo2504_llama31_405b_bf16_1024gpu_cp2", CSV, l405, 1024, 512, 1, 8, 8, 2, 8, RAN,
            "bf16", NOTE, BF16 + SPLIT_405B),
    ]  # fmt: skip
    for p, extra in (("bf16", BF16), ("fp8", FP8)):
        out += [
            row(f"nemo2504_llama3_8b_{p}_8gpu_cp2", CSV, l8, 8, 128, 1, 1, 1, 2, 1, RAN, p,
                NOTE, extra),
            row(f"nemo2504_nemotron4_15b_{p}_64gpu", CSV, n15, 64, 256, 2, 2, 1, 1, 1, RAN, p,
                NOTE, NEMOTRON_FLAGS + extra),
            row(f"nemo2504_nemotron4_340b_{p}_256gpu", CSV, n340, 256, 64, 1, 8, 8, 1, 12, RAN, p,
                NOTE, NEMOTRON_FLAGS + extra),
        ]  # fmt: skip
    return out
