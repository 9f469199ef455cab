"""Megatron-Core's `--recompute-modules` (selective recompute by module, Megatron-Core >= 0.13):
what each listed module no longer keeps for backward, and the forward it runs again.

Source: Megatron-LM megatron/core/transformer/transformer_config.py (`recompute_modules`: core_attn,
moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts; None means ["core_attn"] with
`--recompute-granularity selective`), and the modules' checkpoint calls:

* `core_attn` (attention.py `_checkpointed_attention_forward`): the profile's selective columns
  (the core attention checkpointed), priced in costs/terms.py.
* `mla_up_proj` (multi_latent_attention.py, `recompute_up_proj`): the q / kv up projections (their
  fused q / kv layer norms), the RoPE application and the q / k / v concatenation run under
  `CheckpointWithoutOutput`; the outputs (query, key, value: the core attention's saved inputs)
  are discarded after the core attention's forward and recomputed before its backward. No longer
  kept per token: query and key (heads/tp x (qk_head_dim + rope dim) each), value (heads/tp x
  v_head_dim), and the up projections' saved inputs (q_lora_rank + kv_lora_rank, the layer-norm
  outputs); the checkpoint keeps the compressed latents it was called with (kept anyway).
* `mlp` (transformer_layer.py: `recompute_mlp` only when the MLP is not a MoELayer): the dense MLP
  under `tensor_parallel.checkpoint`, which keeps only its input. No longer kept per token: the
  fc1 input (hidden / tp with sequence parallelism, the layer-norm output), the fc1 output (2 ffn/tp
  with a gated unit) and the fc2 input (ffn/tp).

The saved inputs of the linear layers are counted at `linear_bpe` bytes an element: 1 with FP8
(Transformer Engine's Linear / LayerNormLinear save the FP8-cast input for the weight gradient,
transformer_engine/pytorch/module/linear.py `inputmat` saved after `cast_to_fp8`), else the
training precision's. The recomputed forward is the modules' GEMM FLOPs at the device's dense
matmul peak (ASSUMPTION: the up projections and MLP GEMMs are large and compute-bound; the RoPE /
activation elementwise work is left out).

Not priced (read and named in the warning): moe_act, layernorm, moe, shared_experts.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICED_MODULES = frozenset({"core_attn", "mla_up_proj", "mlp"})
MEGATRON_MODULES = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
)
DEFAULT_MODULES = ("core_attn",)
"""transformer_config.py: selective granularity without `--recompute-modules` recomputes core_attn."""


@dataclass(frozen=True)
class LayerDims:
    """The per-rank sizes the module rules read (one micro-batch on one cp rank)."""

    tokens: int
    tp: int
    sp: bool
    bpe: int
    """Bytes of an activation element in the training precision."""
    linear_bpe: int
    """Bytes of a linear layer's saved input element: 1 with FP8, else `bpe`."""


def mla_up_proj_terms(model, dims: LayerDims) -> tuple[int, float]:
    """(bytes no longer kept, recomputed GEMM FLOPs) of one MLA layer's up projections."""
    if not model.kv_lora_rank:
        return 0, 0.0
    heads = model.num_attention_heads // dims.tp
    qk, rope, v = model.qk_head_dim or 0, model.qk_pos_emb_head_dim or 0, model.v_head_dim or 0
    q_rank = model.q_lora_rank or 0
    kept = (
        heads * (2 * (qk + rope) + v) * dims.bpe + (q_rank + model.kv_lora_rank) * dims.linear_bpe
    )
    flops = 2 * heads * (q_rank * (qk + rope) + model.kv_lora_rank * (qk + v))
    return dims.tokens * kept, float(dims.tokens * flops)


def mlp_terms(model, dims: LayerDims) -> tuple[int, float]:
    """(bytes no longer kept, recomputed GEMM FLOPs) of one dense layer's checkpointed MLP."""
    width = model.ffn_hidden_size // dims.tp
    gated = 2 if model.swiglu else 1
    fc1_in = model.hidden_size // dims.tp if dims.sp else model.hidden_size
    kept = (fc1_in + width) * dims.linear_bpe + gated * width * dims.bpe
    flops = 2 * model.hidden_size * width * (gated + 1)
    return dims.tokens * kept, float(dims.tokens * flops)


def module_terms(
    model, kind: str, modules: tuple[str, ...], dims: LayerDims, matmul_tflops: float
) -> tuple[int, float]:
    """(bytes no longer kept, extra forward microseconds) of one layer of `kind` (dense | moe)
    and micro-batch under the listed modules, core_attn excluded (the profile prices it)."""
    saved, flops = 0, 0.0
    if "mla_up_proj" in modules and model.multi_latent_attention:
        b, f = mla_up_proj_terms(model, dims)
        saved, flops = saved + b, flops + f
    if "mlp" in modules and kind == "dense":
        b, f = mlp_terms(model, dims)
        saved, flops = saved + b, flops + f
    return saved, flops / (matmul_tflops * 1e6)  # 1 TFLOP/s = 1e6 FLOP/us


def unpriced_modules(modules: tuple[str, ...]) -> list[str]:
    """The listed modules this model leaves out of the prediction."""
    return [m for m in modules if m not in PRICED_MODULES]
