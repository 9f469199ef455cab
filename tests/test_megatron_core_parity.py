"""Parity of the reference blocks with megatron-core's own decoder layer (profile/mcore_blocks.py).

Skipped when megatron-core is not installed (the optional `megatron` extra). At small sizes and
tp = 1, for GPT-style, LLaMA-style (GQA, SwiGLU, RMSNorm, rope) and MoE layers: the same
parameter count, saved-activation bytes within 2 % and the same forward output given the same
weights. All in fp32 on the CPU; in bf16 the GPT-style bytes too (the LLaMA-style layer's bf16
bytes differ on the CPU only: torch's composite CPU rms_norm, which megatron-core's local spec
calls, keeps two fp32 copies that the fused device kernels do not).

The LLaMA-style and MoE layers run the materialised attention on both sides: megatron-core's local
spec has no flash attention (that is the Transformer Engine spec, CUDA only). The MoE layer's routing
differs by design (the reference dispatches a fixed balanced permutation so that its timings do not
depend on random routing), so its output is compared with the routed experts zeroed (attention,
norms, shared expert and residuals) and with megatron-core's router made to choose the reference's
experts (everything); its saved bytes are compared as they are (each token goes to top-k experts
on both sides, so the byte total does not depend on which).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

pytest.importorskip("megatron.core")

from profile_support import gpt_model, llama_model, moe_model

from tinker_opt.profile import kernels as K
from tinker_opt.profile.mcore_blocks import build_block as build_mcore
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.subgraphs import build_block as build_reference
from tinker_opt.profile.subgraphs import saved_activation_bytes

SHAPE = Shape(mbs=2)
MODELS = {
    "gpt": gpt_model(seq=128, hidden=128, heads=8),
    "llama": replace(
        llama_model(seq=128, hidden=128, heads=8, groups=2, ffn=344), use_flash_attn=False
    ),
}
KERNELS = K.select_kernels(frozenset({"swiglu"}), "cpu")
"""megatron-core's default --bias-swiglu-fusion on both sides (kernels.py runs it on the CPU too)."""


def _pair(model, block: str = "layer", dtype=torch.float32):
    torch.manual_seed(0)
    return (
        build_reference(model, block, SHAPE, dtype=dtype, kernels=KERNELS),
        build_mcore(model, block, SHAPE, dtype=dtype),
    )


REFERENCE_TO_MCORE = {
    "norm1.weight": "layer.input_layernorm.weight",
    "norm1.bias": "layer.input_layernorm.bias",
    "norm2.weight": "layer.pre_mlp_layernorm.weight",
    "norm2.bias": "layer.pre_mlp_layernorm.bias",
    "attention.qkv.weight": "layer.self_attention.linear_qkv.weight",
    "attention.qkv.bias": "layer.self_attention.linear_qkv.bias",
    "attention.proj.weight": "layer.self_attention.linear_proj.weight",
    "attention.proj.bias": "layer.self_attention.linear_proj.bias",
    "mlp.fc1.weight": "layer.mlp.linear_fc1.weight",
    "mlp.fc1.bias": "layer.mlp.linear_fc1.bias",
    "mlp.fc2.weight": "layer.mlp.linear_fc2.weight",
    "mlp.fc2.bias": "layer.mlp.linear_fc2.bias",
    "mlp.router": "layer.mlp.router.weight",
    "mlp.shared.fc1.weight": "layer.mlp.shared_experts.linear_fc1.weight",
    "mlp.shared.fc2.weight": "layer.mlp.shared_experts.linear_fc2.weight",
}


def _copy_experts(experts, target) -> None:
    """Routed experts' stacked [E', h, f] weights, transposed, into megatron-core's experts one by
    one: each group of a SequentialExperts holds the experts after the previous groups'."""
    groups = getattr(experts, "local", [experts])
    first = 0
    for group in groups:
        for which, stacked in (("linear_fc1", group.fc1), ("linear_fc2", group.fc2)):
            for e in range(stacked.shape[0]):
                name = f"layer.mlp.experts.local_experts.{first + e}.{which}.weight"
                target[name].copy_(stacked[e].t())
        first += group.num_experts


def _copy_weights(reference, mcore) -> None:
    """The reference block's weights into megatron-core's layer (same layouts: QKV interleaved per
    query group, SwiGLU's fc1 as [gate; up]); routed experts transposed from the stacked form."""
    target = dict(mcore.module.named_parameters())
    with torch.no_grad():
        for name, param in reference.module.named_parameters():
            if not name.startswith("mlp.experts."):
                target[REFERENCE_TO_MCORE[name]].copy_(param)
        if hasattr(reference.module.mlp, "experts"):
            _copy_experts(reference.module.mlp.experts, target)


@pytest.mark.parametrize("style", sorted(MODELS))
def test_same_parameter_count(style):
    """The reference layer holds exactly megatron-core's parameters."""
    reference, mcore = _pair(MODELS[style])
    assert reference.param_count == mcore.param_count


@pytest.mark.parametrize(
    "style,dtype", [("gpt", torch.float32), ("llama", torch.float32), ("gpt", torch.bfloat16)]
)
def test_saved_activation_bytes_within_two_percent(style, dtype):
    """Bytes saved for backward agree within 2 % (megatron-core also keeps its causal mask and rope cos / sin)."""
    reference, mcore = _pair(MODELS[style], dtype=dtype)
    ours, theirs = saved_activation_bytes(reference), saved_activation_bytes(mcore)
    assert abs(theirs - ours) <= 0.02 * theirs, (ours, theirs)


@pytest.mark.parametrize("style", sorted(MODELS))
def test_same_forward_output_given_the_same_weights(style):
    """With megatron-core's weights set to the reference's, both layers compute the same output
    (dropouts off: they draw different random masks)."""
    model = replace(MODELS[style], attention_dropout=0.0, hidden_dropout=0.0)
    reference, mcore = _pair(model)
    _copy_weights(reference, mcore)
    torch.manual_seed(1)
    (x,) = reference.make_inputs()
    torch.testing.assert_close(mcore.module(x), reference.module(x), rtol=1e-4, atol=1e-5)


def _moe():
    """One MoE layer with the materialised attention on both sides (as the LLaMA-style layer)."""
    model = moe_model(seq=64, hidden=64, experts=4)
    return replace(model, num_layers=1, first_k_dense_replace=0, use_flash_attn=False)


def test_moe_same_parameter_count():
    """Router, routed experts (stacked vs one MLP each) and shared expert: the same parameters."""
    reference, mcore = _pair(_moe(), "layer.moe")
    assert reference.param_count == mcore.param_count
    assert reference.expert_param_count == mcore.expert_param_count > 0


def test_moe_saved_activation_bytes_within_two_percent():
    """Router, dispatch, experts and shared expert save what megatron-core's MoE layer saves, within 2 %."""
    reference, mcore = _pair(_moe(), "layer.moe")
    ours, theirs = saved_activation_bytes(reference), saved_activation_bytes(mcore)
    assert abs(theirs - ours) <= 0.02 * theirs, (ours, theirs)


def test_profile_with_megatron_core_blocks(tmp_path):
    """`--blocks megatron-core`: tp = 1 layer rows come from megatron-core, tp = 2 ones from the
    reference (recorded in meta.json), other blocks as before."""
    import json

    from cli_support import EXAMPLE

    from tinker_opt.profile.runner import MeasureSettings, run_profile
    from tinker_opt.script.reader import read_script

    info = read_script(EXAMPLE)
    settings = MeasureSettings(
        device="cpu",
        max_npu=2,
        max_mbs=1,
        prof_sp=(0,),
        warmup=0,
        repeats=5,
        selective=False,
        comm="skip",
        blocks="megatron-core",
    )
    folder = run_profile(
        replace(info.model, seq_length=128), settings, tmp_path / "p", train=info.train
    )
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["rows"]["ok"] == meta["rows"]["total"] == 8
    source = meta["kernels"]["blocks"]["layer"]["source"]
    assert (
        "megatron-core 0.16.1 local spec" in source
        and "reference (megatron-core layers need" in source
    )


def test_moe_same_output_of_the_dense_path():
    """With the routed experts' weights zeroed on both sides, the MoE layers agree (attention,
    norms, shared expert, residuals): routing itself differs by design (module docstring)."""
    reference, mcore = _pair(_moe(), "layer.moe")
    with torch.no_grad():
        for p in reference.module.mlp.experts.parameters():
            p.zero_()
    _copy_weights(reference, mcore)
    torch.manual_seed(1)
    (x,) = reference.make_inputs()
    torch.testing.assert_close(mcore.module(x), reference.module(x), rtol=1e-4, atol=1e-5)


def test_moe_same_output_given_the_same_routing(monkeypatch):
    """With megatron-core's router choosing the experts the reference's fixed routing chooses
    (`MoE.choice`, with the same top-k softmax probabilities), both MoE layers compute the same
    output, routed experts included: dispatch, probabilities in the activation, unpermute."""
    reference, mcore = _pair(_moe(), "layer.moe")
    _copy_weights(reference, mcore)
    choice = reference.module.mlp.choice

    def routing(self, logits, padding_mask=None):
        logits = logits.view(-1, logits.shape[-1])  # [s, b, E] -> [T, E], as Router.routing
        top = torch.softmax(logits.float(), dim=-1).topk(choice.shape[1], dim=-1).values
        probs = torch.zeros_like(logits).scatter(1, choice, top.type_as(logits))
        return probs, torch.zeros_like(logits, dtype=torch.bool).scatter(1, choice, True)

    monkeypatch.setattr(type(mcore.module.layer.mlp.router), "routing", routing)
    torch.manual_seed(1)
    (x,) = reference.make_inputs()
    routed = reference.module(x)
    torch.testing.assert_close(mcore.module(x), routed, rtol=1e-4, atol=1e-5)
    with torch.no_grad():  # the routed experts contribute: zeroing them changes the output
        for p in reference.module.mlp.experts.parameters():
            p.zero_()
    assert not torch.allclose(reference.module(x), routed, rtol=1e-4, atol=1e-5)
