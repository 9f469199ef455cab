"""The flag registry: every launch-script flag the reader knows, and how the model treats it.

One row per flag. `treatment` says what tinker-opt does with it:

* `strategy`: read into the Strategy (searched, written back by `apply`) and priced;
* `strategy, not priced`: read into the Strategy and written back, but the cost model does not
  price it yet (a warning names it);
* `model`: read into the ModelSpec (shapes that are profiled);
* `job`: read into the TrainSpec and priced (or only sizes the job: batch, checkpoint, tuning);
* `job, not priced`: read into the TrainSpec for the cost model, not priced yet (warned);
* `cluster`: the launcher's node / device counts;
* `not modelled`: known to change time or memory, not read; a warning names it;
* `no effect`: known not to change the time or memory of a training step (data, logging,
  checkpoint paths, learning-rate schedule, tokenizer, initialisation, seeds).

A launch flag in none of these rows is *unknown*: `unknown_flags` lists it, once, in its own
warning ("flags tinker-opt does not know"), apart from the known-but-unpriced ones, and `inspect`
reports both lists.

Every flag whose treatment contains "not" is named in the warning of `unpriced_warning` ("the
prediction does not include ..."), which reaches the terminal, search.log and summary.json. The
README table is `markdown_table()` (a test keeps both in step, and checks that every flag the
reader reads is here). Sources: reference/script-conventions.md (flag counts and versions of the
MindSpeed-LLM examples), Ascend/MindSpeed docs/features/*.md, NVIDIA/Megatron-LM
megatron/training/arguments.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinker_opt.knobs import (
    CHOICES,
    LAYOUT,
    OVERLAP_KNOBS,
    ChoiceKnob,
    Knob,
    LayoutKnob,
    all_spellings,
)
from tinker_opt.script.launch import Launch

TREATMENTS = (
    "strategy",
    "strategy, not priced",
    "model",
    "job",
    "job, not priced",
    "cluster",
    "not modelled",
    "no effect",
)


@dataclass(frozen=True)
class Flag:
    """One flag: its name, how tinker-opt treats it, and what it changes."""

    name: str
    treatment: str
    effect: str

    def __post_init__(self) -> None:
        assert self.treatment in TREATMENTS, self.treatment

    @property
    def warned(self) -> bool:
        return "not" in self.treatment


_KNOB_FLAGS = frozenset(spelling.flag for spelling, _ in all_spellings())


def _rows(treatment: str, effect: str, *names: str) -> tuple[Flag, ...]:
    """Rows of flags no knob record declares (a record's flag takes its row from the record)."""
    return tuple(Flag(name, treatment, effect) for name in names if name not in _KNOB_FLAGS)


def _treatment(record: Knob | LayoutKnob | ChoiceKnob) -> str:
    if isinstance(record, Knob):
        return "strategy" if record.priced else "strategy, not priced"
    return record.home if isinstance(record, ChoiceKnob) else "strategy"


def _knob_rows(*records: Knob | LayoutKnob | ChoiceKnob) -> tuple[Flag, ...]:
    """The rows of knob records (knobs.py), one per spelling, in the record's words: a switch
    read into the Strategy, priced as the part that cannot hide (costs/overlap.py) and searched,
    or `not priced` where the record says so; a layout or choice knob where its home is."""
    return tuple(
        Flag(spelling.flag, _treatment(record), spelling.effect or record.effect)
        for record in records
        for spelling in record.spellings
    )


# A table: one row per line reads better than the formatter's layout.
# fmt: off
FLAGS: tuple[Flag, ...] = (
    # Parallel layout, batch and optimizer: the strategy.
    *_knob_rows(*(LAYOUT[key] for key in ("tp", "pp", "cp", "ep", "etp")), CHOICES["cp_algo"], LAYOUT["sp"],
                CHOICES["vpp"]),
    *_knob_rows(CHOICES["num_layer_list"]),
    *_knob_rows(CHOICES["zero"], LAYOUT["mbs"], CHOICES["recompute"], CHOICES["recompute_method"],
                CHOICES["recompute_num_layers"]),
    # Communication overlap: the knob registry's switches.
    *_knob_rows(*OVERLAP_KNOBS),
    # The job.
    *_rows("job", "batch", "--global-batch-size"),
    *_rows("job", "checkpoint loading / fine-tuning (memory of a full tune, conversion warnings)", "--load",
           "--finetune", "--lora-r", "--lora-alpha", "--lora-target-modules"),
    *_rows("job", "optimizer states on the host, swapped in chunks at the step (MindSpeed)", "--swap-optimizer",
           "--swap-optimizer-times"),
    *_rows("job", "pipeline send/recv hidden behind the next chunk in the interleaved schedule (default by "
           "version)", "--overlap-p2p-communication", "--no-overlap-p2p-communication"),
    *_rows("job", "fp32 master weights kept as bf16 weight + residual: 2 B fewer per parameter (/dp with "
           "dist-opt; MindSpeed docs/features/reuse-fp32-param.md)", "--reuse-fp32-param"),
    *_rows("job", "precision-aware optimizer: gradient buffer, master weights and Adam moments in the given "
           "dtypes (Megatron-LM; specs.OptimizerPrecision)", "--use-precision-aware-optimizer", "--main-grads-dtype",
           "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype", "--grad-reduce-in-bf16",
           "--no-store-param-remainders", "--store-param-remainders"),
    *_rows("job", "fp16 training: gradient buffer in fp32 instead of fp16 (bf16 training always does; "
           "Megatron-LM arguments.py)", "--accumulate-allreduce-grads-in-fp32"),
    *_rows("job", "MLP activation output dropped and recomputed in the backward (MindSpeed; costs/recompute.py)",
           "--recompute-activation-function"),
    *_knob_rows(CHOICES["recompute_modules"]),
    *_rows("job", "attention activations kept on the host, copied out and back behind compute (MindSpeed; "
           "costs/swap_terms.py)", "--swap-attention"),
    *_rows("job", "the fused attention's deterministic backward: the description's factor on its time (1.61x, "
           "FlashAttention-3 on Hopper, where it states none; 1.0 on Blackwell; costs/deterministic.py)",
           "--deterministic-mode"),
    *_rows("job", "weight gradients added to the main grad by a separate kernel per weight and micro-batch "
           "(costs/grad_accumulation.py)", "--no-gradient-accumulation-fusion"),
    *_rows("job", "optimizer-step passes and scalar all-reduces each iteration: gradient clipping, Megatron-LM "
           "training.py calc_params_l2_norm and count_zeros (costs/step_costs.py)", "--clip-grad",
           "--log-params-norm", "--log-num-zeros-in-grad"),
    *_rows("job", "the data loader's [b, 1, s, s] attention mask copied to the device and broadcast over tp "
           "each micro-batch, unless this flag (costs/step_costs.py)", "--no-create-attention-mask-in-dataloader"),
    *_rows("job", "Ulysses group of hybrid_cp_algo: all-to-all over it, ring over cp / it (MindSpeed; "
           "rules.hybrid_ulysses_degree)", "--ulysses-degree-in-cp"),
    *_rows("job, not priced", "activation recompute in the first N layers of each chunk only; with it the "
           "activation recompute is left out of the prediction", "--recompute-activation-function-num-layers"),
    # The model (profiled shapes).
    *_rows("model", "model shape", "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads",
           "--num-query-groups", "--group-query-attention", "--kv-channels", "--seq-length", "--vocab-size",
           "--padded-vocab-size", "--make-vocab-size-divisible-by", "--untie-embeddings-and-output-weights",
           "--swiglu", "--normalization", "--use-rmsnorm", "--use-fused-rmsnorm", "--position-embedding-type",
           "--use-rotary-position-embeddings", "--disable-bias-linear", "--attention-dropout", "--hidden-dropout",
           "--bf16", "--fp16", "--noop-layers", "--use-mcore-models"),
    *_rows("model", "fused attention kernel (no seq x seq scores)", "--use-flash-attn", "--attention-backend"),
    *_rows("model", "Transformer Engine: its own fused attention unless --attention-backend unfused / local, on "
           "sm80+ devices (script/reader.py)", "--transformer-impl", "--use-legacy-models"),
    *_rows("model", "fused SwiGLU / rotary kernels: the tensors they keep for backward (Megatron-Core with "
           "Transformer Engine fuses RMSNorm, SwiGLU and rotary unless --no-*-fusion; profile/kernels.py)",
           "--use-fused-swiglu", "--use-fused-rotary-pos-emb", "--no-bias-swiglu-fusion", "--no-rope-fusion"),
    *_rows("model", "mixture of experts", "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
           "--moe-intermediate-size", "--moe-shared-expert-intermediate-size", "--n-shared-experts",
           "--first-k-dense-replace", "--moe-layer-freq"),
    *_knob_rows(CHOICES["dualpipev"], CHOICES["moe_fb_overlap"], CHOICES["moe_token_dispatcher_type"]),
    *_rows("model", CHOICES["moe_token_dispatcher_type"].effect, "--moe-grouped-gemm", "--moe-expert-capacity-factor",
           "--moe-pad-expert-input-to-capacity", "--moe-train-capacity-factor",
           "--moe-router-force-load-balancing", "--moe-enable-deepep", "--moe-flex-dispatcher-backend"),
    *_rows("model", "latent attention and multi-token prediction", "--multi-latent-attention",
           "--multi-head-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
           "--qk-nope-head-dim", "--qk-pos-emb-head-dim", "--qk-rope-head-dim", "--v-head-dim", "--mtp-num-layers"),
    *_knob_rows(CHOICES["fp8_format"]),
    *_rows("model", CHOICES["fp8_format"].effect, "--fp8-recipe", "--fp8-param-gather", "--fp8-amax-history-len"),
    # The launcher.
    *_rows("cluster", "nodes and devices per node", "--nnodes", "--nproc_per_node", "--nproc-per-node",
           "--num_nodes", "--num_gpus", "--worker_num", "--local_worker_num"),
    # Known to change time or memory, not modelled.
    *_rows("not modelled", "swapped modules other than mcore's default self_attention (MindSpeed swap-attention)",
           "--swap-modules"),
    *_rows("not modelled", "further recompute / memory features (MindSpeed)", "--recompute-norm",
           "--recompute-mtp-norm", "--recompute-mtp-layer",
           "--recompute-in-advance", "--moe-zero-memory", "--release-fp32-grad",
           "--dualpipev-dw-detach"),
    *_rows("not modelled", "communication-compute fusion (MindSpeed CoC)", "--use-ascend-coc", "--coc-fused-kernel",
           "--coc-parallel-num"),
    *_rows("not modelled", "fused kernels whose speed-up the profile does not measure",
           "--use-fused-ring-attention-update",
           "--moe-permutation-async-comm", "--moe-permute-fusion", "--use-fused-moe-token-permute-and-unpermute",
           "--gemm-gradient-accumulation-fusion", "--mlp-layer-fusion",
           "--moe-router-fusion", "--no-bias-gelu-fusion", "--no-bias-dropout-fusion"),
    *_rows("not modelled", "fused cross entropy: native keeps the unfused one's fp32 softmax (memory as priced; "
           "Megatron-LM core/fusions/fused_cross_entropy.py), its fewer elementwise passes and one tp all-reduce "
           "are not", "--cross-entropy-loss-fusion"),
    *_rows("model", "impl te: the loss keeps the logits in their own dtype, not the fp32 softmax (TE "
           "pytorch/cross_entropy.py; costs/loss_terms.py)", "--cross-entropy-fusion-impl"),
    *_rows("not modelled", "optimizer states and step on the host (Megatron-LM HybridDeviceOptimizer)",
           "--optimizer-cpu-offload", "--optimizer-offload-fraction", "--overlap-cpu-optimizer-d2h-h2d"),
    *_rows("not modelled", "CUDA graphs: launch overhead removed, graph memory pools kept", "--cuda-graph-impl",
           "--cuda-graph-scope", "--enable-cuda-graph", "--external-cuda-graph"),
    *_rows("not modelled", "caching-allocator cache emptied each iteration (time, reserved memory)",
           "--empty-unused-memory-level"),
    *_rows("not modelled", "HybridEP backend of the flex dispatcher (priced as DeepEP)", "--moe-hybridep-num-sms"),
    *_rows("not modelled", "MindSpeed MLA / MTP / sparse-attention kernels and layouts", "--mla-mm-split",
           "--mla-fa-without-pad", "--enable-mla-absorb", "--mtp-mem-efficient-logits", "--enable-dsa-indexer",
           "--use-sparse-flash-attn", "--use-fused-lightning-indexer", "--use-fused-lightning-indexer-loss",
           "--index-topk", "--index-n-heads", "--init-norm-weight-in-fp32"),
    *_rows("not modelled", "FP8 exceptions: weight gradients or the first / last layers kept in BF16",
           "--no-fp8-wgrad", "--first-last-layers-bf16", "--num-layers-at-start-in-bf16", "--num-layers-at-end-in-bf16"),
    *_rows("not modelled", "FP8 alignment: tokens per expert padded to 16 / 32 in the router instead of pad / unpad "
           "copies around the grouped MLP (Megatron-LM arguments.py); MXFP8 all-gather into the gradient buffer",
           "--moe-router-padding-for-fp8", "--moe-router-padding-for-quantization",
           "--reuse-grad-buf-for-mxfp8-param-ag"),
    *_rows("not modelled", "further communication overlap", "--use-cp-send-recv-overlap"),
    *_rows("not modelled", "MoE routing (drop policy, load-balancing loss, grouped routing)", "--moe-token-drop-policy",
           "--noisy_gate_policy", "--moe-router-load-balancing-type", "--moe-router-num-groups",
           "--moe-router-group-topk", "--moe-router-score-function", "--moe-router-enable-expert-bias",
           "--moe-router-topk-scaling-factor", "--moe-router-dtype", "--moe-router-pre-softmax", "--n-group",
           "--topk-group", "--routed-scaling-factor", "--router-gating-in-fp32", "--seq-aux"),
    *_rows("not modelled", "small per-layer extras not in the profiled layer", "--qk-layernorm", "--add-qkv-bias",
           "--spec", "--no-masked-softmax-fusion",
           "--attention-softmax-in-fp32", "--use-glm-rope", "--variable-seq-lengths", "--post-norm",
           "--reset-attention-mask"),
    # Known, and without effect on the time or memory of a training step.
    *_rows("no effect", "data, tokenizer and prompts", "--data-path", "--split", "--data-impl", "--tokenizer-type",
           "--tokenizer-name-or-path", "--tokenizer-model", "--tokenizer-not-use-fast", "--vocab-file",
           "--merge-file", "--prompt-type", "--is-instruction-dataset", "--stage", "--no-shared-storage",
           "--mock-data", "--data-cache-path", "--no-mmap-bin-files", "--num-workers", "--tiktoken-pattern",
           "--reset-position-ids"),
    *_rows("no effect", "logging, evaluation and checkpoints", "--log-interval", "--eval-interval", "--eval-iters",
           "--save", "--save-interval", "--tensorboard-dir", "--no-load-optim", "--no-load-rng", "--no-save-optim",
           "--no-save-rng", "--lora-load", "--distributed-backend", "--ai-framework", "--DDP-impl",
           "--deepspeed_config", "--deepspeed-activation-checkpointing", "--no-pipeline-parallel",
           "--log-throughput", "--log-timers-to-tensorboard", "--log-memory-to-tensorboard",
           "--log-validation-ppl-to-tensorboard", "--timing-log-level", "--logging-level", "--wandb-project",
           "--wandb-exp-name", "--profile", "--profile-step-start", "--profile-step-end", "--profile-ranks",
           "--use-pytorch-profiler", "--ckpt-format", "--auto-detect-ckpt-format", "--dist-ckpt-strictness",
           "--async-save", "--use-persistent-ckpt-worker", "--no-ckpt-fully-parallel-save", "--exit-interval",
           "--exit-duration-in-mins"),
    *_rows("no effect", "host-side controls: Python GC schedule, NaN check of the loss and grad norm, timeouts, "
           "experimental switch (the model prices no host pauses)", "--manual-gc", "--manual-gc-interval",
           "--no-check-for-nan-in-loss-and-grad", "--distributed-timeout-minutes", "--enable-experimental"),
    *_rows("no effect", "optimiser hyper-parameters, schedule and initialisation", "--lr", "--min-lr",
           "--lr-decay-style", "--lr-decay-iters", "--lr-warmup-fraction", "--lr-warmup-iters", "--train-iters",
           "--weight-decay", "--adam-beta1", "--adam-beta2", "--initial-loss-scale", "--seed",
           "--init-method-std", "--rampup-batch-size", "--moe-aux-loss-coeff", "--mtp-loss-scaling-factor",
           "--train-samples", "--lr-decay-samples", "--lr-warmup-samples", "--lr-warmup-init", "--decoupled-lr",
           "--decoupled-min-lr", "--moe-router-bias-update-rate", "--indexer-loss-coeff"),
    *_rows("no effect", "numerical conventions: per-token loss, top-k probabilities renormalised, FP8 amax "
           "reduction, layernorm weight stored as 1 + w", "--calculate-per-token-loss", "--norm-topk-prob",
           "--fp8-amax-compute-algo", "--apply-layernorm-1p"),
    *_rows("no effect", "position-embedding and norm constants", "--max-position-embeddings", "--rotary-base",
           "--rotary-percent", "--no-position-embedding", "--norm-epsilon", "--pad-vocab-size-to",
           "--beta-fast", "--beta-slow", "--rope-scaling-beta-fast", "--rope-scaling-beta-slow",
           "--rope-scaling-factor", "--rope-scaling-mscale",
           "--rope-scaling-mscale-all-dim", "--rope-scaling-original-max-position-embeddings",
           "--rope-scaling-type", "--cp-attention-mask-type", "--rotary-scaling-factor", "--mscale",
           "--mscale-all-dim", "--rotary-seq-len-interpolation-factor"),
)
# fmt: on
"""The registry, grouped by treatment."""

BY_NAME = {flag.name: flag for flag in FLAGS}
assert len(BY_NAME) == len(FLAGS), "a flag is listed twice"


def unpriced_flags(launch: Launch) -> list[str]:
    """Flags of the launch that change time or memory and that the prediction does not include."""
    return [
        flag.name
        for flag in FLAGS
        if flag.warned and flag.treatment != "cluster" and launch.has(flag.name)
    ]


def unknown_flags(launch: Launch) -> list[str]:
    """Launch flags in no row of the registry, each once, in the order the script gives them."""
    names = dict.fromkeys(arg.name for arg in launch.args if arg.name.startswith("-"))
    return [name for name in names if name not in BY_NAME]


def _naming(names: list[str], before: str, after: str) -> str | None:
    """One warning naming `names` between two phrases, or None when there are none."""
    return f"{before} {', '.join(names)} ({after})" if names else None


def unknown_warning(launch: Launch) -> str | None:
    """One warning naming the flags tinker-opt does not know (apart from the unpriced ones)."""
    return _naming(
        unknown_flags(launch),
        "flags tinker-opt does not know:",
        "read as having no effect on time or memory; kept as written by apply",
    )


def unpriced_warning(launch: Launch) -> str | None:
    """One warning naming the unpriced flags the script sets, or None."""
    return _naming(
        unpriced_flags(launch),
        "the prediction does not include",
        "time or memory effects not modelled; see the flag table in the README",
    )


def markdown_table() -> str:
    """The README's flag table."""
    lines = ["| flag | treatment | what it changes |", "| --- | --- | --- |"]
    lines += [f"| `{flag.name}` | {flag.treatment} | {flag.effect} |" for flag in FLAGS]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
