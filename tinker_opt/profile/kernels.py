"""Kernel dispatch: the fused implementation of each op the launch script asks for, per device.

MindSpeed-LLM / Megatron scripts ask for fused kernels with flags (`--use-flash-attn`,
`--use-fused-rmsnorm`, `--use-fused-swiglu`, `--use-fused-rotary-pos-emb`, `--use-ascend-mc2`).
A profile that runs the unfused reference ops instead prices a different program, so each op of a
reference block runs the device's fused implementation when one is importable:

* npu (torch_npu; Ascend/op-plugin docs, MindSpeed-LLM `mindspeed_llm/fsdp2/models/common/fusions.py`):
  `npu_fusion_attention(q, k, v, head_num, "SBH", atten_mask=..., scale=..., sparse_mode=2)[0]`,
  `npu_rms_norm(x, gamma, epsilon=eps)[0]`, `npu_swiglu(x, dim=-1)`, `npu_rotary_mul(x, cos, sin)`;
* cuda: flash scaled-dot-product attention (torch's flash / memory-efficient / cuDNN backends,
  never the math one); RMSNorm from apex (`apex.normalization.fused_layer_norm.fused_rms_norm_affine`)
  or torch's native `rms_norm`; SwiGLU from megatron-core (`megatron/core/fusions/fused_bias_swiglu.py`,
  `bias_swiglu_impl`); rotary from Transformer Engine (`transformer_engine.pytorch.attention.rope.
  apply_rotary_pos_emb(..., fused=True)`) or apex (`apex.transformer.functional.fused_apply_rotary_pos_emb`);
* cpu: the reference ops, except attention, where torch's SDPA runs its CPU flash kernel, and
  SwiGLU, where megatron-core's function runs when megatron-core is installed.

* analytic (the meta device, profile/analytic.py): the ops of ModelSpec.fused_kernels (the flags
  above, or Megatron-Core's Transformer Engine defaults: script/reader.py) run FUSED_SAVES, the
  same math saving what the fused kernels save for backward; the others the reference ops.

A requested op with no fused implementation on the device keeps the reference op and yields a
warning (the caller logs it and prints it); MC2 (matmul fused with the tensor-parallel collective)
has no block-level counterpart in a one-rank profile and is always such a warning.
`install_kernels` puts the chosen implementations into a built block and returns which ran.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType

import torch
import torch.nn.functional as F

from tinker_opt.profile import cpu_on_meta
from tinker_opt.specs import FUSED_KERNEL_FLAGS

OPS = ("attention", "rmsnorm", "swiglu", "rope", "mc2")
FLAG_OPS = {
    "--use-flash-attn": "attention",
    **FUSED_KERNEL_FLAGS,
    "--use-ascend-mc2": "mc2",
    "--use-mc2": "mc2",
}
"""The launch-script flags that ask for a fused kernel, and the op each one fuses."""
OP_FLAGS = {
    "attention": "--use-flash-attn",
    "rmsnorm": "--use-fused-rmsnorm",
    "swiglu": "--use-fused-swiglu",
    "rope": "--use-fused-rotary-pos-emb",
    "mc2": "--use-ascend-mc2",
}
NPU_CAUSAL_MASK_SIZE = 2048
"""MindSpeed passes a compressed 2048 x 2048 upper-triangular mask with sparse_mode 2 (left-up causal)."""


@dataclass(frozen=True)
class Impl:
    """One implementation of an op: its name as recorded in meta.json, whether it is fused, the function.

    Signatures by op: attention fn(q, k, v, causal, scale) with q [s, b, n, d], k / v [s, b, g, d]
    -> [s, b, n * dv]; rmsnorm fn(x, weight, eps); swiglu fn(x) -> silu(first half) * second half;
    rope fn(t, cos, sin, freqs) with cos / sin / freqs broadcastable to t [s, b, n, d]."""

    op: str
    name: str
    fused: bool
    fn: Callable | None = field(default=None, compare=False, repr=False)


# --- reference ops (Megatron's local, unfused layers) -----------------------------------------


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Megatron's local RMSNorm: x * rsqrt(mean(x^2) + eps) in fp32, cast back, times the weight."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return normed.type_as(x) * weight


def reference_swiglu(x: torch.Tensor) -> torch.Tensor:
    """Unfused SwiGLU: silu keeps its input, the product keeps both factors."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def reference_rope(
    t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, freqs: torch.Tensor
) -> torch.Tensor:
    """mcore's unfused rotate-half rotary: t * cos + rotate_half(t) * sin."""
    first, second = t.chunk(2, dim=-1)
    return t * cos + torch.cat((-second, first), dim=-1) * sin


def _sdpa(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    s, b, n, dv = q.shape[0], q.shape[1], q.shape[2], v.shape[-1]
    attention = cpu_on_meta.sdpa if q.device.type == "meta" else F.scaled_dot_product_attention
    out = attention(
        q.permute(1, 2, 0, 3),
        k.permute(1, 2, 0, 3),
        v.permute(1, 2, 0, 3),
        is_causal=causal,
        dropout_p=0.0,
        scale=scale,
        enable_gqa=k.shape[2] != n,
    )
    return out.permute(2, 0, 1, 3).reshape(s, b, n * dv)


def sdpa_attention(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    """torch SDPA with whichever backend torch picks (the CPU flash kernel on the CPU).

    Flash kernels regenerate the dropout mask in backward and keep no s x s tensor; torch's CPU /
    fake-tensor SDPA would take the materialising math path for dropout > 0, so the profile runs
    it without dropout: saved bytes as the fused kernel's, its elementwise dropout not timed."""
    return _sdpa(q, k, v, causal, scale)


class _SavingInputRMSNorm(torch.autograd.Function):
    """RMSNorm keeping what a fused kernel keeps for backward: its input, the weight and 1/rms per
    token (Transformer Engine's rmsnorm_fwd returns rsigma for rmsnorm_bwd; apex
    FusedRMSNormAffineFunction saves input, weight, invvar; torch_npu's npu_rms_norm returns rstd).
    The reference op keeps the fp32 copy of its input and the normalised bf16 tensor instead."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x32 = x.float()
        rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x32 * rstd).type_as(x) * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        normed = x.float() * rstd
        g = grad.float() * weight.float()
        grad_weight = (grad.float() * normed).sum(dim=tuple(range(grad.dim() - 1)))
        grad_x = rstd * (g - normed * (g * normed).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight.to(weight.dtype), None


class _SavingInputSwiGLU(torch.autograd.Function):
    """SwiGLU keeping only its input, as megatron-core's fused SwiGLUFunction does
    (megatron/core/fusions/fused_bias_swiglu.py: `ctx.save_for_backward(input)`, backward
    `swiglu_back(grad, input)`); the reference op also keeps silu(gate)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        gate, up = x.chunk(2, dim=-1)
        sig = torch.sigmoid(gate)
        return torch.cat((grad * up * sig * (1 + gate * (1 - sig)), grad * gate * sig), dim=-1)


FUSED_SAVES = {
    "rmsnorm": Impl(
        "rmsnorm",
        "fused RMSNorm (keeps input and 1/rms)",
        True,
        lambda x, w, eps: _SavingInputRMSNorm.apply(x, w, eps),
    ),
    "swiglu": Impl("swiglu", "fused SwiGLU (keeps its input)", True, _SavingInputSwiGLU.apply),
}
"""What the analytic device runs for an op the launch fuses (ModelSpec.fused_kernels): the same
math, saving for backward what the fused kernels save. Rotary embeddings need none: the
reference rotate-half already keeps only cos / sin (constants), as the fused kernels keep only
the angles."""


REFERENCE = {
    "attention": Impl("attention", "torch.sdpa", True, sdpa_attention),
    "rmsnorm": Impl("rmsnorm", "reference (unfused fp32 RMSNorm)", False, reference_rms_norm),
    "swiglu": Impl("swiglu", "reference (silu * up)", False, reference_swiglu),
    "rope": Impl("rope", "reference (rotate-half)", False, reference_rope),
    "mc2": Impl("mc2", "none (matmul and tp collective separate)", False, None),
}


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


# --- the choice --------------------------------------------------------------------------------


def requested_ops(flags: Iterable[str], *, flash_attn: bool = False) -> frozenset[str]:
    """The ops a script asks to fuse, from its flags (and the model's flash attention setting)."""
    ops = {FLAG_OPS[f] for f in flags if f in FLAG_OPS}
    return frozenset(ops | ({"attention"} if flash_attn else set()))


def analytic_kernels(fused_kernels: Iterable[str]) -> KernelSet:
    """The analytic device's implementations: FUSED_SAVES for the ops the launch fuses (the
    ModelSpec's `fused_kernels`), the reference ops otherwise (attention follows the model's
    use_flash_attn inside the layer)."""
    ops = frozenset(fused_kernels)
    impls = {
        op: FUSED_SAVES[op] if op in ops and op in FUSED_SAVES else REFERENCE[op] for op in OPS
    }
    return KernelSet(device_kind="analytic", requested=ops, impls=impls, warnings=())


def script_flags(launch) -> tuple[str, ...]:
    """The fused-kernel flags present on a script's launch line (`Launch.has`)."""
    return tuple(f for f in FLAG_OPS if launch.has(f))


@dataclass(frozen=True)
class KernelSet:
    """The implementation of each op on one device, and the warnings of requested ops left unfused."""

    device_kind: str
    requested: frozenset[str]
    impls: dict[str, Impl]
    warnings: tuple[str, ...]

    def summary(self) -> dict:
        """meta.json's view: requested flags, the implementation per op, warnings."""
        return {
            "device": self.device_kind,
            "requested": sorted(OP_FLAGS[op] for op in self.requested),
            "ops": {op: impl.name for op, impl in self.impls.items()},
            "warnings": list(self.warnings),
        }


def _warning(op: str, device_kind: str) -> str:
    if op == "mc2":
        return (
            f"{OP_FLAGS[op]}: a one-rank block profile cannot fuse the matmul with the tensor-parallel "
            "collective; the profile times the matmul alone and the cost model adds the collective unoverlapped"
        )
    return (
        f"{OP_FLAGS[op]}: no fused {op} kernel importable on {device_kind}; the profile measures the "
        f"reference op ({REFERENCE[op].name}), which is slower and may keep more memory than the job's kernel"
    )


def select_kernels(requested: frozenset[str], device_kind: str) -> KernelSet:
    """Per op: the device's fused implementation when requested and available, else the reference."""
    available = device_impls(device_kind)
    impls, warnings = {}, []
    for op in OPS:
        if op in requested and op in available:
            impls[op] = available[op]
        else:
            impls[op] = REFERENCE[op]
            if op in requested:
                warnings.append(_warning(op, device_kind))
    return KernelSet(
        device_kind=device_kind, requested=requested, impls=impls, warnings=tuple(warnings)
    )


def install_kernels(module: torch.nn.Module, kernels: KernelSet | None) -> dict[str, str]:
    """Point every kernel-using submodule of `module` at `kernels`; returns {op: implementation name}
    for the ops the block runs (a submodule declares its op with a `kernel_op` attribute)."""
    used: dict[str, str] = {}
    for sub in module.modules():
        op = getattr(sub, "kernel_op", None)
        if op is None:
            continue
        impl = kernels.impls[op] if kernels is not None else REFERENCE[op]
        sub.kernel = impl
        used[op] = impl.name
    if kernels is not None and "mc2" in kernels.requested and used:
        used["mc2"] = kernels.impls["mc2"].name
    return used
