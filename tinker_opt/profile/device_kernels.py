"""The fused implementations a device has, by op: torch_npu's on Ascend, flash SDPA, apex,
Transformer Engine and megatron-core's on CUDA, torch's CPU flash SDPA and megatron-core's SwiGLU
on the CPU (kernels.py's docstring lists the calls and their sources)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

import torch
import torch.nn.functional as F

from tinker_opt.profile.reference_ops import REFERENCE, Impl, _sdpa

NPU_CAUSAL_MASK_SIZE = 2048
"""MindSpeed passes a compressed 2048 x 2048 upper-triangular mask with sparse_mode 2 (left-up causal)."""


# --- device implementations ------------------------------------------------------------------


def _module(name: str) -> ModuleType | None:
    """The module when it imports (sys.modules first, so tests can stand in fakes), else None."""
    try:
        return importlib.import_module(name)
    except Exception:  # not installed, or broken (torch_npu without CANN): not available
        return None


def _attr(module_name: str, attr: str) -> Callable | None:
    module = _module(module_name)
    return getattr(module, attr, None) if module is not None else None


def _npu_attention(npu: ModuleType) -> Callable:
    def attention(q, k, v, causal: bool, scale: float) -> torch.Tensor:
        s, b, n, d = q.shape
        mask = None
        if causal:
            mask = torch.triu(
                torch.ones(
                    NPU_CAUSAL_MASK_SIZE, NPU_CAUSAL_MASK_SIZE, dtype=torch.bool, device=q.device
                ),
                diagonal=1,
            )
        return npu.npu_fusion_attention(
            q.reshape(s, b, n * d),
            k.reshape(k.shape[0], b, -1),
            v.reshape(v.shape[0], b, -1),
            n,
            "SBH",
            atten_mask=mask,
            scale=scale,
            keep_prob=1.0,
            sparse_mode=2 if causal else 0,
        )[0]

    return attention


def _npu_impls() -> dict[str, Impl]:
    npu = _module("torch_npu")
    if npu is None:
        return {}
    found = {}
    if hasattr(npu, "npu_fusion_attention"):
        found["attention"] = Impl(
            "attention", "torch_npu.npu_fusion_attention", True, _npu_attention(npu)
        )
    if hasattr(npu, "npu_rms_norm"):
        found["rmsnorm"] = Impl(
            "rmsnorm",
            "torch_npu.npu_rms_norm",
            True,
            lambda x, w, eps: npu.npu_rms_norm(x, w, epsilon=eps)[0],
        )
    if hasattr(npu, "npu_swiglu"):
        found["swiglu"] = Impl(
            "swiglu", "torch_npu.npu_swiglu", True, lambda x: npu.npu_swiglu(x, dim=-1)
        )
    if hasattr(npu, "npu_rotary_mul"):
        found["rope"] = Impl(
            "rope",
            "torch_npu.npu_rotary_mul",
            True,
            lambda t, cos, sin, freqs: npu.npu_rotary_mul(t, cos, sin),
        )
    return found


def _flash_sdpa(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    """SDPA restricted to the fused backends: an input none of them takes fails instead of
    silently materialising the scores."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # GQA goes in as it is (enable_gqa, which torch's flash backend takes): repeating the key /
    # value groups would save np / ng times their bytes, which no flash kernel does.
    with sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    ):
        return _sdpa(q, k, v, causal, scale)


def _cuda_rms_norm() -> Impl | None:
    apex = _attr("apex.normalization.fused_layer_norm", "fused_rms_norm_affine")
    if apex is not None:
        return Impl(
            "rmsnorm",
            "apex.fused_rms_norm_affine",
            True,
            lambda x, w, eps: apex(x, w, (x.shape[-1],), eps),
        )
    if hasattr(F, "rms_norm"):
        return Impl(
            "rmsnorm",
            "torch.nn.functional.rms_norm",
            True,
            lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps),
        )
    return None


def _cuda_rope() -> Impl | None:
    te = _attr("transformer_engine.pytorch.attention.rope", "apply_rotary_pos_emb") or _attr(
        "transformer_engine.pytorch.attention", "apply_rotary_pos_emb"
    )
    if te is not None:
        return Impl(
            "rope",
            "transformer_engine.apply_rotary_pos_emb(fused)",
            True,
            lambda t, cos, sin, freqs: te(t, freqs, tensor_format="sbhd", fused=True),
        )
    apex = _attr("apex.transformer.functional", "fused_apply_rotary_pos_emb")
    if apex is not None:
        return Impl(
            "rope",
            "apex.fused_apply_rotary_pos_emb",
            True,
            lambda t, cos, sin, freqs: apex(t, freqs),
        )
    return None


def _megatron_swiglu() -> Impl | None:
    """megatron-core's SwiGLU autograd function (saves only its input; torch.jit elementwise)."""
    swiglu = _attr("megatron.core.fusions.fused_bias_swiglu", "bias_swiglu_impl")
    return (
        Impl("swiglu", "megatron.core bias_swiglu_impl", True, lambda x: swiglu(x, None))
        if swiglu
        else None
    )


def _cuda_impls() -> dict[str, Impl]:
    found = {
        "attention": Impl("attention", "torch.sdpa (flash / efficient / cudnn)", True, _flash_sdpa)
    }
    for impl in (_megatron_swiglu(), _cuda_rms_norm(), _cuda_rope()):
        if impl is not None:
            found[impl.op] = impl
    return found


def device_impls(device_kind: str) -> dict[str, Impl]:
    """The fused implementations importable for `device_kind` (npu | cuda | cpu), by op."""
    if device_kind == "npu":
        return _npu_impls()
    if device_kind == "cuda":
        return _cuda_impls()
    found = {"attention": REFERENCE["attention"]}  # torch's CPU flash SDPA kernel
    swiglu = (
        _megatron_swiglu()
    )  # device-agnostic: what megatron-core runs for --use-fused-swiglu on any device
    return found | ({"swiglu": swiglu} if swiglu else {})
