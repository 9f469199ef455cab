"""FP8 training: the linear layers' saved inputs are kept in FP8, not in the training precision.

Source: Transformer Engine's Linear / LayerNormLinear / GroupedLinear (transformer_engine/pytorch/
module/linear.py, layernorm_linear.py, grouped_linear.py) cast the input to FP8 for the forward
GEMM and save that FP8 tensor (1 B an element) for the weight-gradient GEMM when fp8 is on
(`ctx.save_for_backward(inputmat, ...)` after `cast_to_fp8`). The profile's sub-graphs save each
linear input in the training precision, so with FP8 every linear input of a decoder layer keeps
`bpe - 1` fewer bytes an element. The embedding, the output layer and the MoE router are not TE
modules (profile/fp8.py) and keep theirs.

Linear inputs per token of a micro-batch on one cp rank (`LayerDims`, costs/recompute_modules.py):
* attention: the QKV (or MLA down-projection) input, hidden (/tp with sequence parallelism); MLA's
  up projections, q_lora_rank + kv_lora_rank; the output projection, heads/tp x v (or kv) head dim;
* dense MLP and shared experts: fc1 input hidden (/tp with SP), fc2 input width/tp;
* routed experts: each token on a rank (hidden /tp with SP) reaches top-k experts: top-k x
  (hidden + moe_ffn / etp) with etp tokens gathered (ASSUMPTION: balanced routing).
ASSUMPTION: a rank's attention sees the sequence-parallel slice (the gathered copy Megatron
re-gathers in the backward is not kept); this errs towards keeping more.
"""

from __future__ import annotations

from tinker_opt.costs.recompute_modules import LayerDims, routed_assignments


def _attention_inputs(model, dims: LayerDims, hidden_in: int) -> int:
    heads = model.num_attention_heads // dims.tp
    if model.multi_latent_attention:
        return (
            hidden_in
            + (model.q_lora_rank or 0)
            + (model.kv_lora_rank or 0)
            + heads * (model.v_head_dim or model.kv_channels)
        )
    return hidden_in + heads * model.kv_channels


def linear_input_elements(model, kind: str, dims: LayerDims, etp: int) -> int:
    """Elements of the linear layers' saved inputs of one layer of `kind` (dense | moe) per
    micro-batch (the module docstring's list)."""
    hidden_in = model.hidden_size // dims.tp if dims.sp else model.hidden_size
    per_token = _attention_inputs(model, dims, hidden_in)
    if kind == "dense":
        return dims.tokens * (per_token + hidden_in + model.ffn_hidden_size // dims.tp)
    shared = model.moe_shared_expert_intermediate_size or 0
    if shared:
        per_token += hidden_in + shared // dims.tp
    # Routed experts: the rank's tokens (its sequence-parallel slice) each reach top-k experts,
    # gathered over etp; every expert GEMM input is [tokens, hidden] then [tokens, moe_ffn/etp].
    arriving = routed_assignments(model, dims, etp)
    expert_ffn = model.moe_ffn_hidden_size or model.ffn_hidden_size
    return dims.tokens * per_token + arriving * (model.hidden_size + expert_ffn // etp)


def fp8_saved_input_bytes(model, kind: str, dims: LayerDims, etp: int) -> int:
    """Bytes one layer no longer keeps because its linear inputs are saved in FP8 (0 without FP8)."""
    if not model.is_fp8:
        return 0
    return linear_input_elements(model, kind, dims, etp) * (dims.bpe - 1)
