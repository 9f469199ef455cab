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

* `moe_act` (moe/experts.py TEGroupedMLP: `bias_act_func` under `CheckpointWithoutOutput`, its
  output discarded after `linear_fc2`): the routed experts' activation output, fc2's input (moe_ffn
  / etp per token-expert assignment), no longer kept in BF16; with FP8, TE's GroupedLinear keeps
  its own FP8 copy of that input for the weight gradient (grouped_linear.py), which stays: nothing
  freed (ASSUMPTION: the discarded BF16 output is the only tensor the checkpoint frees). Rerun: the
  activation, one elementwise pass (read the fc1 output, write the output) at HBM bandwidth.
* `shared_experts` (moe/shared_experts.py SharedExpertMLP: `tensor_parallel.checkpoint` of the
  MLP, its input kept): the shared expert's fc1 output and fc2 input as `mlp`; its fc1 input (the
  pre-MLP norm output) only with FP8 (its FP8 copy), since in BF16 the router keeps that tensor.
* `moe` (moe/moe_layer.py: `tensor_parallel.checkpoint(custom_forward, False, hidden_states)`
  around router, dispatch, experts, combine and shared experts): everything the MoE part keeps
  but its input: the routed experts (fc1 input hidden, fc1 output 2 moe_ffn/etp at bpe, fc2 input
  moe_ffn/etp per assignment; the probabilities), the shared experts as above and the router's
  fp32 scores ([tokens, experts], ASSUMPTION: one such tensor). Rerun: the experts' and shared
  experts' GEMMs and the dispatch + combine once more (costs/terms.py adds moe_terms.moe_comm_us).
* `layernorm` (transformer_layer.py: `recompute_input_layernorm` / `recompute_pre_mlp_layernorm`,
  only where the norm is a module of its own, not fused into the next linear: the MLA input norm
  and the MoE pre-MLP norm of the Transformer Engine specs): the norm output no longer kept where
  its consumer kept it in BF16: the MoE router (RouterGatingLinearFunction saves its BF16 input),
  and the MLA down projections without FP8 (with FP8 they keep FP8 copies). Rerun: one
  elementwise pass per norm at HBM bandwidth.

Token-expert assignments per rank: each token on a rank (hidden /tp with SP) reaches top-k experts,
gathered over etp, times the busiest rank's load (`routed_assignments`; profile/shape.py
expert_load: 1 with `--moe-router-force-load-balancing`, the imbalance setting under dropless
routing, capped by a capacity factor), the count the profile sizes the experts' tensors by.

The saved inputs of the linear layers are counted at `linear_bpe` bytes an element: 1 with FP8
(Transformer Engine's Linear / LayerNormLinear save the FP8-cast input for the weight gradient,
transformer_engine/pytorch/module/linear.py `inputmat` saved after `cast_to_fp8`), else the
training precision's. The recomputed forward is the modules' GEMM FLOPs at the rate the profile
gives a large GEMM: the dense matmul peak times the description's matmul efficiency asymptote
(costs/inputs.py large_matmul_efficiency; at the bare peak the rerun experts of `moe` cost 0.63x
their profiled forward on H100. ASSUMPTION: the up projections and MLP GEMMs are large and
compute-bound; the RoPE work is left out), plus the elementwise passes named above at HBM
bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tinker_opt.choices import DEFAULT_RECOMPUTE_MODULES, RecomputeModule
from tinker_opt.profile.shape import expert_load

MEGATRON_MODULES = tuple(module.value for module in RecomputeModule)
PRICED_MODULES = frozenset(MEGATRON_MODULES)
DEFAULT_MODULES = DEFAULT_RECOMPUTE_MODULES


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


def mlp_terms(model, dims: LayerDims, ffn: int | None = None) -> tuple[int, float]:
    """(bytes no longer kept, recomputed GEMM FLOPs) of one dense layer's checkpointed MLP (of
    width `ffn`, the dense one by default)."""
    width = (ffn or model.ffn_hidden_size) // dims.tp
    gated = 2 if model.swiglu else 1
    fc1_in = model.hidden_size // dims.tp if dims.sp else model.hidden_size
    kept = (fc1_in + width) * dims.linear_bpe + gated * width * dims.bpe
    flops = 2 * model.hidden_size * width * (gated + 1)
    return dims.tokens * kept, float(dims.tokens * flops)


def routed_assignments(model, dims: LayerDims, etp: int) -> int:
    """Token-expert assignments the busiest rank's experts compute per micro-batch: the rank's
    tokens x topk, gathered over etp, times the busiest rank's load (profile/shape.py
    expert_load), as the profile sizes the routed experts' tensors (shard_dims expert_tokens), so
    a module that frees them frees what the profile counted."""
    tokens = dims.tokens // dims.tp if dims.sp else dims.tokens
    return math.ceil(tokens * model.moe_router_topk * etp * expert_load(model))


def _hidden_in(model, dims: LayerDims) -> int:
    """Elements of a norm output per token on a rank (hidden / tp with SP)."""
    return model.hidden_size // dims.tp if dims.sp else model.hidden_size


def shared_experts_terms(model, dims: LayerDims) -> tuple[int, float]:
    """(bytes no longer kept, recomputed GEMM FLOPs) of one layer's checkpointed shared experts."""
    shared = model.moe_shared_expert_intermediate_size or 0
    if not shared:
        return 0, 0.0
    saved, flops = mlp_terms(model, dims, shared)
    if dims.linear_bpe == dims.bpe:  # BF16: the fc1 input is the router's saved input, kept
        saved -= dims.tokens * _hidden_in(model, dims) * dims.linear_bpe
    return saved, flops


def moe_act_terms(model, dims: LayerDims, etp: int) -> tuple[int, int]:
    """(bytes no longer kept, bytes the rerun activation moves) of one MoE layer's routed experts."""
    width = (model.moe_ffn_hidden_size or model.ffn_hidden_size) // etp
    gated = 2 if model.swiglu else 1
    n = routed_assignments(model, dims, etp)
    saved = n * width * dims.bpe if dims.linear_bpe == dims.bpe else 0
    return saved, n * (gated + 1) * width * dims.bpe


def moe_terms(model, dims: LayerDims, etp: int) -> tuple[int, float]:
    """(bytes no longer kept, recomputed GEMM FLOPs) of one checkpointed MoE layer (routed
    experts, shared experts, router scores); the dispatch's rerun is priced by the caller."""
    width = (model.moe_ffn_hidden_size or model.ffn_hidden_size) // etp
    gated = 2 if model.swiglu else 1
    n = routed_assignments(model, dims, etp)
    h = model.hidden_size
    routed = n * ((h + width) * dims.linear_bpe + gated * width * dims.bpe + dims.bpe)
    scores = (dims.tokens // dims.tp if dims.sp else dims.tokens) * model.num_experts * 4
    shared, shared_flops = shared_experts_terms(model, dims)
    flops = n * 2 * h * width * (gated + 1) + shared_flops
    return routed + scores + shared, float(flops)


def layernorm_terms(model, kind: str, dims: LayerDims) -> tuple[int, int]:
    """(bytes no longer kept, bytes the rerun norms move) of one layer's separate norms."""
    per_norm = dims.tokens // dims.tp if dims.sp else dims.tokens
    per_norm *= model.hidden_size * dims.bpe
    mla = bool(model.multi_latent_attention)
    norms = int(kind == "moe") + int(mla)
    kept_bf16 = int(kind == "moe") + int(mla and dims.linear_bpe == dims.bpe)
    return per_norm * kept_bf16, 2 * norms * per_norm


@dataclass(frozen=True)
class ModuleTerms:
    """What one layer's listed modules (core_attn excluded) free and rerun per micro-batch."""

    saved_bytes: int = 0
    flops: float = 0.0
    moved_bytes: int = 0
    """Bytes the rerun elementwise work (activations, norms) reads and writes."""
    reruns_dispatch: bool = False
    """`moe`: the dispatch and combine run again."""

    def extra_us(self, matmul_tflops: float, mem_bw_gbs: float) -> float:
        """The rerun's microseconds before any communication (1 TFLOP/s = 1e6 FLOP/us)."""
        return self.flops / (matmul_tflops * 1e6) + self.moved_bytes / (mem_bw_gbs * 1e3)


def layer_module_terms(
    model, kind: str, modules: tuple[str, ...], dims: LayerDims, etp: int = 1
) -> ModuleTerms:
    """The listed modules' terms for one layer of `kind` (dense | moe), core_attn excluded (the
    profile prices it). `moe` covers what `moe_act` and `shared_experts` would free."""
    saved, flops, moved = 0, 0.0, 0
    if "mla_up_proj" in modules and model.multi_latent_attention:
        b, f = mla_up_proj_terms(model, dims)
        saved, flops = saved + b, flops + f
    if "mlp" in modules and kind == "dense":
        b, f = mlp_terms(model, dims)
        saved, flops = saved + b, flops + f
    moe = kind == "moe" and "moe" in modules
    if moe:
        b, f = moe_terms(model, dims, etp)
        saved, flops = saved + b, flops + f
    if kind == "moe" and not moe and "shared_experts" in modules:
        b, f = shared_experts_terms(model, dims)
        saved, flops = saved + b, flops + f
    if kind == "moe" and not moe and "moe_act" in modules:
        b, m = moe_act_terms(model, dims, etp)
        saved, moved = saved + b, moved + m
    if "layernorm" in modules:
        b, m = layernorm_terms(model, kind, dims)
        saved, moved = saved + b, moved + m
    return ModuleTerms(saved, flops, moved, moe)


def module_terms(
    model, kind: str, modules: tuple[str, ...], dims: LayerDims, matmul_tflops: float
) -> tuple[int, float]:
    """(bytes no longer kept, extra forward microseconds from GEMMs) of one layer of `kind`
    (dense | moe) and micro-batch under the GEMM-only modules mla_up_proj and mlp."""
    gemm_only = tuple(m for m in modules if m in ("mla_up_proj", "mlp"))
    terms = layer_module_terms(model, kind, gemm_only, dims)
    return terms.saved_bytes, terms.flops / (matmul_tflops * 1e6)


def unpriced_modules(modules: tuple[str, ...]) -> list[str]:
    """The listed modules this model leaves out of the prediction."""
    return [m for m in modules if m not in PRICED_MODULES]
