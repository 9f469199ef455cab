"""The MoE rows of a published-runs file as runs the launch-script writer understands.

The runs file describes a MoE run's strategy partly in free text ("not stated", "full, block,
recompute-num-layers 32 (all layers)", "flag set (TP=1)") and its model with `model.moe`
(num_experts, topk, moe_ffn). `moe_run` turns such a row into the fields `launch_script`
writes, with the MoE flags of the script the run used:

* Megatron-Core rows (Mixtral-8x7B, NVIDIA/Megatron-LM megatron/core/transformer/moe/README.md,
  "Reference Best Parallel Mapping" and its "MoE training example" at the same commit):
  `--moe-token-dispatcher-type alltoall` (the table's dispatcher), dropless, `--moe-grouped-gemm`,
  `--moe-permute-fusion`, `--use-distributed-optimizer`, `--overlap-grad-reduce`,
  `--overlap-param-gather` and no recompute, as the README's example script sets them.
  ASSUMPTION: the published run used the example's flags (the README does not tie them to it).
  Attention: Transformer Engine's fused attention (flash).
* The ModelLink RC1 row (Ascend/MindSpeed-LLM examples/mixtral/pretrain_mixtral_8x7b_ptd.sh of
  that tag): legacy GShard-style MoE (DeepSpeed sharded_moe: one-hot einsum dispatch and combine,
  every expert padded to its capacity), `--moe-train-capacity-factor 1.1`, a loop over the
  local experts, full recompute of every layer, flash attention, fused RMSNorm, no distributed
  optimizer.

Mixtral is a LLaMA-style network (RMSNorm, SwiGLU, rotary, untied output, no biases), so the row
is written with `arch: llama` and the experts' width as `--ffn-hidden-size`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

LEGACY_MARK = "legacy"


def _is_legacy(strategy: dict[str, Any]) -> bool:
    return LEGACY_MARK in str(strategy.get("framework", "")).lower()


def _moe_flags(moe: dict[str, Any], strategy: dict[str, Any]) -> list[str]:
    flags = [
        f"--num-experts {moe['num_experts']}",
        f"--moe-router-topk {moe['topk']}",
        f"--expert-model-parallel-size {strategy.get('ep') or 1}",
    ]
    if _is_legacy(strategy):
        # The ModelLink script's flags: the legacy MoE is the one `--moe-train-capacity-factor`
        # selects (the row's moe_routing: "train capacity factor 1.1", noisy gate RSample).
        capacity = re.search(r"capacity factor ([0-9.]+)", str(strategy.get("moe_routing", "")))
        return flags + [
            f"--moe-train-capacity-factor {capacity.group(1) if capacity else 1.0}",
            "--noisy-gate-policy RSample",
        ]
    # A row whose `framework` names Transformer Engine ("Megatron-Core v0.9, ... with
    # TransformerEngine v1.11") ran TE's layer spec, with its fused kernels (script/reader.py).
    te = "transformerengine" in str(strategy.get("framework", "")).lower().replace(" ", "")
    return flags + [
        *(["--transformer-impl transformer_engine"] if te else []),
        f"--moe-token-dispatcher-type {strategy.get('moe_dispatcher') or 'alltoall'}",
        # A row whose script sets neither (MindSpeed-LLM RC3: `grouped_gemm` / `permute_fusion`
        # false) runs a loop over its experts and the unfused permutation.
        *(["--moe-grouped-gemm"] if strategy.get("grouped_gemm", True) else []),
        *(["--moe-permute-fusion"] if strategy.get("permute_fusion", True) else []),
        "--overlap-param-gather",
    ]


def moe_run(run, derived: dict[str, Any]):
    """The run with the fields launch_script writes; a row without `model.moe` unchanged.
    Its iteration time is the row's `derived.iteration_time_s` when nothing was timed (the
    Megatron-Core rows publish TFLOPS per GPU; the file gives the formula it used)."""
    moe = run.model.get("moe")
    if not moe:
        return run
    measured = dict(run.measured)
    if "iteration_time_s" in derived and "step_time_s" not in measured:
        measured["iteration_time_s"] = float(derived["iteration_time_s"])
    s = run.strategy
    legacy = _is_legacy(s)
    strategy = dict(
        s,  # the normalised knobs (published_runs.normalised_strategy), then the MoE rows' own
        dp=s.get("dp", 1),
        sp=s["tp"] > 1,
        recompute=s["recompute"],  # none | selective | full (published_runs._recompute)
        precision=s.get("precision", "bf16"),
        distributed_optimizer=not legacy,
        overlap_grad_reduce=not legacy,
        flash_attn=True,
        fused=["use-fused-rmsnorm"] if legacy else [],
        # The MoE flags, then the row's own (flags of the run's config the source states, e.g.
        # --recompute-modules, --moe-enable-deepep, --expert-tensor-parallel-size).
        extra_flags=_moe_flags(moe, s) + list(s.get("extra_flags", ())),
    )
    # The dense layers' width where the row states one (first-k-dense layers), else the experts'.
    model = dict(run.model, arch="llama", ffn=run.model.get("ffn") or moe["moe_ffn"])
    return replace(run, model=model, strategy=strategy, measured=measured)
