"""How tokens reach the experts in the profiled MoE block: load, capacity, grouped GEMM, GShard."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tests.profile_support import moe_model
from tinker_opt.errors import ConfigError
from tinker_opt.hardware import load_hardware
from tinker_opt.profile.analytic import block_row, trace_block
from tinker_opt.profile.shape import Shape, expert_load, shard_dims

H100 = load_hardware("h100-80gb")


def _model(**fields):
    base = dataclasses.replace(moe_model(seq=1024, hidden=1024), moe_ffn_hidden_size=2048)
    return dataclasses.replace(base, **fields)


EP2 = Shape(ep=2)


def _row(model, shape=EP2):
    return block_row(trace_block(model, "layer.moe", shape), H100)


def test_dropless_busiest_rank_sets_the_pace():
    """Dropless: the busiest rank computes imbalance x its share, however many experts it holds
    (UltraEP's measured inter-rank imbalance; DODOCO: EP degree barely changes it)."""
    model = _model(moe_load_imbalance=1.5)
    assert expert_load(model) == pytest.approx(1.5)
    assert expert_load(_model()) == 1.0  # no imbalance given: balanced


def test_imbalance_does_not_shrink_with_more_local_experts():
    """The rank's routed tokens: seq x topk x imbalance at ep 2 (4 local experts) and at ep 8 (1),
    the same factor 1.5 (the earlier 1 + 0.5 / sqrt(4) = 1.25 at ep 2 is gone)."""
    model = _model(moe_load_imbalance=1.5)
    for ep in (2, 8):
        dims = shard_dims(model, Shape(ep=ep))
        assert dims.expert_tokens == math.ceil(model.seq_length * model.moe_router_topk * 1.5)


def test_capacity_factor_caps_and_padding_fixes_the_load():
    """A capacity factor caps the load; padding to capacity makes every expert compute it."""
    capped = _model(moe_load_imbalance=1.5, moe_expert_capacity_factor=1.2)
    assert expert_load(capped) == pytest.approx(1.2)
    padded = dataclasses.replace(
        capped, moe_load_imbalance=1.0, moe_pad_expert_input_to_capacity=True
    )
    assert expert_load(padded) == pytest.approx(1.2)


def test_imbalance_costs_time_and_activations():
    """More tokens on the busiest rank: a slower, larger MoE block."""
    balanced, busy = _row(_model()), _row(_model(moe_load_imbalance=1.5))
    assert busy["fwd_us"] > balanced["fwd_us"] and busy["bwd_us"] > balanced["bwd_us"]
    assert busy["activation_bytes"] > balanced["activation_bytes"]
    dims = shard_dims(_model(moe_load_imbalance=1.5), Shape(ep=8))
    assert dims.expert_tokens == 1024 * 2 * 1.5


def test_grouped_gemm_is_not_slower_than_a_loop_of_small_gemms():
    """Several small experts per rank: one grouped GEMM beats a loop of per-expert GEMMs."""
    loop, grouped = _row(_model()), _row(_model(moe_grouped_gemm=True))
    assert grouped["fwd_us"] < loop["fwd_us"]
    assert grouped["param_count"] == loop["param_count"]
    assert grouped["expert_param_count"] == loop["expert_param_count"]


def test_gshard_dispatch_adds_the_einsum_matmuls_and_masks():
    """ModelLink's legacy GShard MoE: dense one-hot dispatch / combine cost time and memory."""
    drop = dict(moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)
    plain, gshard = _row(_model(**drop)), _row(_model(**drop, moe_gshard_dispatch=True))
    assert gshard["fwd_us"] > plain["fwd_us"]
    assert gshard["activation_bytes"] > plain["activation_bytes"]


def test_unknown_dispatcher_and_low_imbalance_are_config_errors():
    with pytest.raises(ConfigError, match="moe_token_dispatcher_type"):
        _model(moe_token_dispatcher_type="broadcast")
    with pytest.raises(ConfigError, match="moe_load_imbalance"):
        _model(moe_load_imbalance=0.5)


def test_gshard_builds_deepspeeds_fp32_combine_tensor():
    """DeepSpeed's top2gating builds the combine weights [S, E, C] in fp32 before the dispatch
    and combine matmuls: the GShard block's peak (saved + transient) exceeds the plain block's by
    at least 2 B per capacity slot of every token (the tensor and its casts, not all alive at
    once; before the tensor was traced the two transients were equal; the plain block keeps no
    [T, h] expert output since the probabilities moved into the activation, profile/moe.py)."""
    drop = dict(moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)
    model = _model(**drop, moe_gshard_dispatch=True)
    dims = shard_dims(model, EP2)
    tokens = model.seq_length  # mbs 1, no sp
    slots = -(-dims.expert_tokens // dims.num_experts) * dims.num_experts
    plain, gshard = _row(_model(**drop)), _row(model)

    def peak(row: dict) -> int:
        return row["activation_bytes"] + row["transient_bytes"]

    assert peak(gshard) - peak(plain) >= 2 * tokens * slots


def test_routed_experts_keep_what_megatron_keeps():
    """DeepSeek-V3's 4 local experts (EP 64) on 16,384 assignments: the grouped GEMMs keep their
    inputs (7168 and 2048 wide), the weighted SwiGLU its input (2 x 2048) and the probabilities,
    all at 2 B (Megatron-core TEGroupedMLP + weighted_bias_swiglu_impl); no [T, h] output."""
    import torch

    from tinker_opt.profile.accounting import SavedTensorCounter
    from tinker_opt.profile.moe import GroupedExperts

    n = 16384
    experts = GroupedExperts(
        4, 7168, 2048, swiglu=True, bias=False, device="meta", dtype=torch.bfloat16
    )
    tokens = torch.empty(n, 7168, device="meta", dtype=torch.bfloat16, requires_grad=True)
    probs = torch.empty(n, 1, device="meta", dtype=torch.bfloat16, requires_grad=True)
    with SavedTensorCounter(exclude=experts.parameters()) as counter:
        experts(tokens, probs)
    assert counter.saved_bytes == n * (7168 + 2 * 2048 + 1 + 2048) * 2 == 436_240_384


def test_weighted_swiglu_gradients():
    """WeightedSwiGLU's hand-written backward (Megatron's weighted_swiglu_back) against autograd."""
    import torch

    from tinker_opt.profile.kernels import REFERENCE
    from tinker_opt.profile.moe import WeightedSwiGLU

    x = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    p = torch.rand(3, 5, 1, dtype=torch.float64, requires_grad=True)
    fn = REFERENCE["swiglu"].fn
    assert torch.autograd.gradcheck(lambda a, b: WeightedSwiGLU.apply(a, b, fn), (x, p))
