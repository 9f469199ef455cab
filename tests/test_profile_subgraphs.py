"""Reference sub-graphs: activation bytes against published formulas, weight bytes, shapes."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.profile_support import gpt_model, llama_model, moe_model
from tinker_opt.errors import ConfigError
from tinker_opt.profile.moe import GroupedExperts
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.subgraphs import build_block, saved_activation_bytes, selective_recompute

SEQ, MBS, HIDDEN, HEADS = 128, 2, 128, 8
TP_SP = [(1, False), (2, False), (2, True), (4, False), (4, True)]
KORTHIKANTI_SEQ = 256
"""Korthikanti's formula is the fused softmax's (16-bit probabilities); Megatron runs that kernel
only where b x heads/tp is a multiple of its rows per block, 8 up to sk 128 and 4 above
(profile/softmax.py), so at 128 tokens tp 4 (2 x 2 batches) takes the unfused fp32 path."""


def korthikanti_bytes(tp: int, sp: bool, selective: bool, seq: int = KORTHIKANTI_SEQ) -> float:
    """Korthikanti et al. (2022), Table 2: activation bytes of one GPT layer in 16-bit."""
    s, b, h, a = seq, MBS, HIDDEN, HEADS
    scores = 0.0 if selective else 5 * a * s / h
    if sp:
        return s * b * h * (34 + scores) / tp
    return s * b * h * (10 + 24 / tp + scores / tp)


@pytest.mark.parametrize("tp,sp", TP_SP)
@pytest.mark.parametrize("selective", [False, True])
def test_gpt_layer_matches_korthikanti(tp, sp, selective):
    """GPT-style layer activations equal Korthikanti's formula within 2 %."""
    block = build_block(
        gpt_model(seq=KORTHIKANTI_SEQ, hidden=HIDDEN, heads=HEADS),
        "layer",
        Shape(tp=tp, sp=sp, mbs=MBS),
    )
    measured = saved_activation_bytes(block, selective=selective)
    assert measured == pytest.approx(korthikanti_bytes(tp, sp, selective), rel=0.02)


def test_unfused_softmax_keeps_fp32_probabilities():
    """Where the fused kernel's conditions fail (128 tokens, tp 4: 4 attention batches, not a
    multiple of 8), the layer keeps the fp32 softmax output: 2 a s^2 b / tp bytes more."""
    block = build_block(
        gpt_model(seq=SEQ, hidden=HIDDEN, heads=HEADS), "layer", Shape(tp=4, mbs=MBS)
    )
    extra = 2 * HEADS * SEQ * SEQ * MBS / 4
    assert saved_activation_bytes(block) == pytest.approx(
        korthikanti_bytes(4, False, False, seq=SEQ) + extra, rel=0.02
    )


@pytest.mark.parametrize("groups,ffn", [(2, 344), (8, 512), (1, 256)])
def test_llama_layer_matches_measured_formula(groups, ffn):
    """LLaMA-style layer saves s*b*h*(22 + 6g/a + 8f/h) + 4*a*s*b bytes within 2 %."""
    model = llama_model(seq=SEQ, hidden=HIDDEN, heads=HEADS, groups=groups, ffn=ffn)
    measured = saved_activation_bytes(build_block(model, "layer", Shape(mbs=MBS)))
    s, b, h, a = SEQ, MBS, HIDDEN, HEADS
    assert measured == pytest.approx(
        s * b * h * (22 + 6 * groups / a + 8 * ffn / h) + 4 * a * s * b, rel=0.02
    )


def test_selective_recompute_drops_little_with_flash():
    """With flash attention, selective recompute only drops the log-sum-exp (4 a s b bytes)."""
    block = build_block(llama_model(seq=SEQ, hidden=HIDDEN, heads=HEADS), "layer", Shape(mbs=MBS))
    full, selective = saved_activation_bytes(block), saved_activation_bytes(block, selective=True)
    assert full - selective == 4 * HEADS * SEQ * MBS


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gpt_layer_weight_bytes_exact(tp):
    """Weight bytes of a GPT layer shard: (12h^2 + 7h)/t sharded plus 6h replicated, in bf16."""
    h = HIDDEN
    block = build_block(gpt_model(seq=SEQ, hidden=h, heads=HEADS), "layer", Shape(tp=tp))
    params = (
        12 * h * h + 7 * h
    ) // tp + 6 * h  # qkv, proj, fc1, fc2 (+ their sharded biases); 2 LN, 2 biases
    assert (block.param_count, block.weight_bytes) == (params, 2 * params)


@pytest.mark.parametrize("tp", [1, 2])
def test_llama_layer_weight_bytes_exact(tp):
    """Weight bytes of a LLaMA layer shard: qkv (a + 2g) d h/t, proj h^2/t, SwiGLU 3hf/t, 2 RMSNorms."""
    h, a, g, f = HIDDEN, HEADS, 2, 344
    block = build_block(
        llama_model(seq=SEQ, hidden=h, heads=a, groups=g, ffn=f), "layer", Shape(tp=tp)
    )
    params = ((a + 2 * g) * (h // a) * h + h * h + 3 * h * f) // tp + 2 * h
    assert block.weight_bytes == 2 * params


def test_embedding_and_head_weights_follow_padded_vocab():
    """Embedding and head hold padded_vocab/tp rows (Megatron pads to 128 x tp)."""
    model = llama_model(vocab=1000)
    embedding = build_block(model, "embedding", Shape(tp=2))
    head = build_block(model, "head", Shape(tp=2))
    assert embedding.param_count == head.param_count == (1024 // 2) * model.hidden_size


def test_moe_expert_param_count():
    """Routed-expert parameters: num_experts/ep experts of 3 h ffn/etp (SwiGLU, no bias)."""
    model = moe_model()
    block = build_block(model, "layer.moe", Shape(tp=2, sp=True, ep=4, etp=2))
    assert block.expert_param_count == (8 // 4) * 3 * model.hidden_size * (32 // 2)
    assert block.param_count > block.expert_param_count


@pytest.mark.parametrize(
    "shape",
    [Shape(mbs=2), Shape(tp=2, sp=True, ep=2, etp=1), Shape(tp=2, sp=True, cp=2, ep=4, etp=2)],
)
def test_moe_layer_runs_forward_and_backward(shape):
    """The MoE layer keeps the [s_sp, b, h] shape and gives the input a gradient."""
    block = build_block(moe_model(), "layer.moe", shape)
    (x,) = block.make_inputs()
    block.module(x).float().sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


@pytest.mark.parametrize("name", ["embedding", "final_norm", "head"])
def test_sequence_parallel_shards_tokens(name):
    """Under sp the hidden tensors hold seq/(cp*tp) tokens."""
    block = build_block(gpt_model(seq=SEQ), name, Shape(tp=4, sp=True, cp=2, mbs=1))
    inputs = block.make_inputs()
    out = block.module(*inputs)
    hidden = out if name == "embedding" else inputs[0]
    assert hidden.shape[0] == SEQ // 8


def test_selective_recompute_gives_same_gradients():
    """Selective recompute replays the dropout draws: the input gradient is unchanged."""
    model = gpt_model(seq=32, hidden=32, heads=4)
    block = build_block(model, "layer", Shape(mbs=1), dtype=torch.float32)
    (x,) = block.make_inputs()
    grads = []
    for selective in (False, True):
        x.grad = None
        torch.manual_seed(7)
        with selective_recompute(block, selective):
            block.module(x).sum().backward()
        grads.append(x.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])


def test_fake_tensor_mode_counts_the_same_bytes():
    """Under FakeTensorMode the sub-graph builds and counts the same saved bytes as for real."""
    model, shape = gpt_model(seq=64, hidden=64, heads=4), Shape(tp=2, sp=True, mbs=2)
    real = saved_activation_bytes(build_block(model, "layer", shape))
    with FakeTensorMode():
        fake = saved_activation_bytes(build_block(model, "layer", shape))
    assert fake == real


def test_indivisible_tp_is_a_config_error():
    """tp that does not divide the heads raises ConfigError naming both numbers."""
    with pytest.raises(ConfigError, match="num_attention_heads"):
        build_block(gpt_model(heads=6, hidden=96), "layer", Shape(tp=4))


def test_dense_block_rejects_expert_parallel():
    """A dense block built with ep > 1 is a ConfigError."""
    with pytest.raises(ConfigError, match="no experts"):
        build_block(moe_model(), "layer.dense", Shape(ep=2))


@pytest.mark.parametrize("total", [12, 14])
def test_grouped_experts_match_a_loop_over_experts(total):
    """The batched experts compute what one MLP per expert would, balanced split (uneven too)."""
    torch.manual_seed(0)
    experts = GroupedExperts(4, 8, 6, swiglu=True, bias=True, device="cpu", dtype=torch.float64)
    x = torch.randn(total, 8, dtype=torch.float64)
    sizes = [total // 4 + (1 if i < total % 4 else 0) for i in range(4)]
    expected = []
    for i, part in enumerate(x.split(sizes)):
        gate, up = (part @ experts.fc1[i] + experts.fc1_bias[i]).chunk(2, dim=-1)
        expected.append(
            (torch.nn.functional.silu(gate) * up) @ experts.fc2[i] + experts.fc2_bias[i]
        )
    assert torch.allclose(experts(x), torch.cat(expected))
