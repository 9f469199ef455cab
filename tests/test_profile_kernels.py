"""Kernel dispatch (profile/kernels.py): fused implementations per device from the script's flags.

No NPU, no GPU, no torch_npu here: fake modules in sys.modules stand in for torch_npu, apex,
Transformer Engine and megatron-core, computing the reference math and recording their calls,
so the tests check which implementation runs, with which arguments, and that the block's output
does not change.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F
from profile_support import llama_model, moe_model

from tinker_opt.errors import ConfigError
from tinker_opt.profile import device_kernels
from tinker_opt.profile import kernels as K
from tinker_opt.profile.runner import MeasureSettings
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.subgraphs import build_block

ALL_FLAGS = (
    "--use-flash-attn",
    "--use-fused-rmsnorm",
    "--use-fused-swiglu",
    "--use-fused-rotary-pos-emb",
    "--use-ascend-mc2",
)
CUDA_LIBRARIES = (
    "apex",
    "apex.normalization",
    "apex.normalization.fused_layer_norm",
    "apex.transformer",
    "apex.transformer.functional",
    "transformer_engine",
    "transformer_engine.pytorch",
    "transformer_engine.pytorch.attention",
    "transformer_engine.pytorch.attention.rope",
    "megatron.core.fusions.fused_bias_swiglu",
)


def _rotate(t, cos, sin):
    first, second = t.chunk(2, dim=-1)
    return t * cos + torch.cat((-second, first), dim=-1) * sin


def _fake_torch_npu(calls: list[str]) -> ModuleType:
    """torch_npu's four fused ops with their documented signatures, computing the reference math."""
    npu = ModuleType("torch_npu")

    def npu_fusion_attention(
        query,
        key,
        value,
        head_num,
        input_layout,
        *,
        atten_mask=None,
        scale=1.0,
        keep_prob=1.0,
        sparse_mode=0,
        **_,
    ):
        assert input_layout == "SBH" and keep_prob == 1.0
        assert (sparse_mode == 2) == (
            atten_mask is not None
        )  # compressed causal mask, left-up causal
        s, b = query.shape[:2]
        d = query.shape[-1] // head_num
        q = query.view(s, b, head_num, d).permute(1, 2, 0, 3)
        k = key.view(s, b, -1, d).permute(1, 2, 0, 3)
        v = value.view(s, b, -1, d).permute(1, 2, 0, 3)
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=sparse_mode == 2, scale=scale, enable_gqa=k.shape[1] != head_num
        )
        calls.append("npu_fusion_attention")
        return out.permute(2, 0, 1, 3).reshape(s, b, head_num * d), None, None, None, 0, 0, 0

    def npu_rms_norm(x, gamma, epsilon=1e-6):
        calls.append("npu_rms_norm")
        return K.reference_rms_norm(x, gamma, epsilon), None

    def npu_swiglu(x, dim=-1):
        assert dim == -1
        calls.append("npu_swiglu")
        return K.reference_swiglu(x)

    def npu_rotary_mul(x, r1, r2):
        calls.append("npu_rotary_mul")
        return _rotate(x, r1, r2)

    for fn in (npu_fusion_attention, npu_rms_norm, npu_swiglu, npu_rotary_mul):
        setattr(npu, fn.__name__, fn)
    return npu


def _install_fake_cuda_libraries(monkeypatch, calls: list[str]) -> None:
    """apex's fused RMSNorm, Transformer Engine's fused rope, megatron-core's SwiGLU."""
    for name in CUDA_LIBRARIES:
        monkeypatch.setitem(sys.modules, name, ModuleType(name))

    def fused_rms_norm_affine(x, weight, normalized_shape, eps):
        assert tuple(normalized_shape) == (x.shape[-1],)
        calls.append("apex.fused_rms_norm_affine")
        return K.reference_rms_norm(x, weight, eps)

    def apply_rotary_pos_emb(t, freqs, tensor_format="sbhd", fused=False):
        assert tensor_format == "sbhd" and fused
        calls.append("te.apply_rotary_pos_emb")
        return _rotate(t, freqs.cos().to(t.dtype), freqs.sin().to(t.dtype))

    def bias_swiglu_impl(x, bias):
        assert bias is None
        calls.append("bias_swiglu_impl")
        return K.reference_swiglu(x)

    sys.modules["apex.normalization.fused_layer_norm"].fused_rms_norm_affine = fused_rms_norm_affine
    sys.modules[
        "transformer_engine.pytorch.attention.rope"
    ].apply_rotary_pos_emb = apply_rotary_pos_emb
    sys.modules["megatron.core.fusions.fused_bias_swiglu"].bias_swiglu_impl = bias_swiglu_impl


def _hide_cuda_libraries(monkeypatch) -> None:
    for name in CUDA_LIBRARIES:
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError


def _layer_output(model, kernels, *, seed: int = 0, shape: Shape | None = None):
    shape = shape or Shape(mbs=2)
    """Forward + backward of one decoder layer with fixed weights and input; (output, input grad, block)."""
    torch.manual_seed(seed)
    block = build_block(model, "layer", shape, dtype=torch.float32, kernels=kernels)
    torch.manual_seed(seed + 1)
    (x,) = block.make_inputs()
    out = block.module(x)
    out.sum().backward()
    return out.detach(), x.grad, block


def test_requested_ops_follow_the_flags():
    """Each fused-kernel flag asks for its op; flash attention also comes from the model."""
    assert K.requested_ops(ALL_FLAGS) == frozenset(K.OPS)
    assert K.requested_ops(("--use-mc2", "--bf16")) == frozenset({"mc2"})
    assert K.requested_ops((), flash_attn=True) == frozenset({"attention"})


def test_script_flags_of_the_example():
    """The bundled example asks for flash attention, fused RMSNorm and fused SwiGLU."""
    from cli_support import EXAMPLE

    from tinker_opt.script.reader import read_script

    assert set(K.script_flags(read_script(EXAMPLE).launch)) == {
        "--use-flash-attn",
        "--use-fused-rmsnorm",
        "--use-fused-swiglu",
    }


def test_cpu_runs_reference_ops_and_warns_for_each_unfused_flag(monkeypatch):
    """On the CPU without megatron-core only attention has a fused kernel (torch's CPU flash SDPA);
    every other flag warns."""
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    _hide_cuda_libraries(monkeypatch)
    chosen = K.select_kernels(K.requested_ops(ALL_FLAGS), "cpu")
    assert chosen.impls["attention"].name == "torch.sdpa"
    assert {op: chosen.impls[op] for op in ("rmsnorm", "swiglu", "rope", "mc2")} == {
        op: K.REFERENCE[op] for op in ("rmsnorm", "swiglu", "rope", "mc2")
    }
    warned = {w.split(":")[0] for w in chosen.warnings}
    assert warned == {
        "--use-fused-rmsnorm",
        "--use-fused-swiglu",
        "--use-fused-rotary-pos-emb",
        "--use-ascend-mc2",
    }


def test_cpu_runs_megatron_core_swiglu_when_installed(monkeypatch):
    """megatron-core's SwiGLU function is device-agnostic: on the CPU it serves --use-fused-swiglu."""
    calls: list[str] = []
    _install_fake_cuda_libraries(monkeypatch, calls)
    chosen = K.select_kernels(frozenset({"swiglu", "rmsnorm"}), "cpu")
    assert chosen.impls["swiglu"].name == "megatron.core bias_swiglu_impl"
    assert (
        chosen.impls["rmsnorm"] == K.REFERENCE["rmsnorm"]
    )  # apex is a CUDA library: not used on the CPU
    assert [w.split(":")[0] for w in chosen.warnings] == ["--use-fused-rmsnorm"]


def test_unrequested_ops_run_the_reference_without_warning(monkeypatch):
    """A fused kernel that the script does not ask for is not used (the job would not use it either)."""
    monkeypatch.setitem(sys.modules, "torch_npu", _fake_torch_npu([]))
    chosen = K.select_kernels(frozenset({"rmsnorm"}), "npu")
    assert chosen.impls["rmsnorm"].name == "torch_npu.npu_rms_norm"
    assert chosen.impls["swiglu"] == K.REFERENCE["swiglu"] and chosen.warnings == ()


def test_npu_uses_torch_npu_fused_ops_with_the_same_output(monkeypatch):
    """With torch_npu present, a LLaMA layer runs npu_fusion_attention / npu_rms_norm / npu_swiglu /
    npu_rotary_mul, and computes what the reference ops compute."""
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "torch_npu", _fake_torch_npu(calls))
    model = llama_model(seq=32, hidden=64, heads=4, groups=2, ffn=96)
    fused = K.select_kernels(K.requested_ops(ALL_FLAGS), "npu")
    assert [w.split(":")[0] for w in fused.warnings] == ["--use-ascend-mc2"]
    out, grad, block = _layer_output(model, fused)
    assert set(calls) == {"npu_fusion_attention", "npu_rms_norm", "npu_swiglu", "npu_rotary_mul"}
    assert block.kernels == {
        "rmsnorm": "torch_npu.npu_rms_norm",
        "attention": "torch_npu.npu_fusion_attention",
        "rope": "torch_npu.npu_rotary_mul",
        "swiglu": "torch_npu.npu_swiglu",
        "mc2": K.REFERENCE["mc2"].name,
    }
    ref_out, ref_grad, _ = _layer_output(model, None)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(grad, ref_grad)


def test_npu_without_torch_npu_warns(monkeypatch):
    """--device npu on a machine where torch_npu does not import: every fused flag warns."""
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    chosen = K.select_kernels(K.requested_ops(ALL_FLAGS[1:3]), "npu")
    assert len(chosen.warnings) == 2 and all(
        i.fused is False for i in chosen.impls.values() if i.op != "attention"
    )


def test_cuda_uses_apex_te_and_megatron_core_kernels(monkeypatch):
    """On CUDA: flash SDPA, apex RMSNorm, Transformer Engine rope, megatron-core SwiGLU; same output."""
    calls: list[str] = []
    _install_fake_cuda_libraries(monkeypatch, calls)
    fused = K.select_kernels(K.requested_ops(ALL_FLAGS[:4]), "cuda")
    assert fused.warnings == ()
    assert {op: fused.impls[op].name for op in ("rmsnorm", "swiglu", "rope")} == {
        "rmsnorm": "apex.fused_rms_norm_affine",
        "swiglu": "megatron.core bias_swiglu_impl",
        "rope": "transformer_engine.apply_rotary_pos_emb(fused)",
    }
    model = llama_model(seq=32, hidden=64, heads=4, groups=2, ffn=96)
    out, grad, _ = _layer_output(model, fused)
    assert set(calls) == {
        "apex.fused_rms_norm_affine",
        "te.apply_rotary_pos_emb",
        "bias_swiglu_impl",
    }
    ref_out, ref_grad, _ = _layer_output(model, None)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(grad, ref_grad)


def test_cuda_without_libraries_falls_back_with_warnings(monkeypatch):
    """No apex / TE / megatron-core: RMSNorm is torch's native rms_norm, rope and SwiGLU warn."""
    _hide_cuda_libraries(monkeypatch)
    chosen = K.select_kernels(K.requested_ops(ALL_FLAGS[:4]), "cuda")
    assert chosen.impls["rmsnorm"].name == "torch.nn.functional.rms_norm"
    assert chosen.impls["attention"].name.startswith("torch.sdpa (flash")
    assert {w.split(":")[0] for w in chosen.warnings} == {
        "--use-fused-swiglu",
        "--use-fused-rotary-pos-emb",
    }
    x, w = torch.randn(4, 3, 16), torch.rand(16)
    torch.testing.assert_close(
        chosen.impls["rmsnorm"].fn(x, w, 1e-6), K.reference_rms_norm(x, w, 1e-6)
    )


def test_cuda_flash_sdpa_excludes_the_math_backend(monkeypatch):
    """The CUDA attention runs with the math (score-materialising) backend switched off, flash on,
    and the key / value groups of GQA passed as they are (not repeated to every head)."""
    seen = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        seen.append(
            (
                torch.backends.cuda.math_sdp_enabled(),
                torch.backends.cuda.flash_sdp_enabled(),
                k.shape[1],
            )
        )
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    q, kv = torch.randn(8, 1, 4, 16), torch.randn(8, 1, 2, 16)
    out = device_kernels._flash_sdpa(q, kv, kv, True, 0.25)
    assert seen == [(False, True, 2)]
    torch.testing.assert_close(out, K.sdpa_attention(q, kv, kv, True, 0.25))


def test_moe_experts_use_the_fused_swiglu(monkeypatch):
    """The routed experts' activation dispatches like the dense MLP's."""
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "torch_npu", _fake_torch_npu(calls))
    fused = K.select_kernels(frozenset({"swiglu"}), "npu")
    block = build_block(moe_model(), "layer.moe", Shape(), dtype=torch.float32, kernels=fused)
    block.module(*block.make_inputs()).sum().backward()
    assert calls.count("npu_swiglu") >= 2  # the shared expert and the routed experts


def test_gpt_layer_without_flash_has_no_attention_kernel():
    """The materialised (non-flash) attention is not a kernel op: nothing to record or replace."""
    model = replace(llama_model(seq=32, hidden=64, heads=4, groups=2, ffn=96), use_flash_attn=False)
    block = build_block(
        model, "layer", Shape(), dtype=torch.float32, kernels=K.select_kernels(frozenset(), "cpu")
    )
    assert (
        "attention" not in block.kernels and block.kernels["rmsnorm"] == K.REFERENCE["rmsnorm"].name
    )


BASE = dict(device="cpu", max_npu=2, max_mbs=1, warmup=0, repeats=5)


def test_settings_reject_unknown_flags_and_bad_device_counts():
    """Bad --devices / --blocks values and unknown kernel flags are ConfigErrors naming the value."""
    with pytest.raises(ConfigError, match="--use-fused-nothing"):
        MeasureSettings(**BASE, kernel_flags=("--use-fused-nothing",))
    with pytest.raises(ConfigError, match="devices"):
        MeasureSettings(**BASE, devices=0)
    with pytest.raises(ConfigError, match="megatron"):
        MeasureSettings(**BASE, blocks="megatron")
