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

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from tinker_opt.knobs import KNOBS, MINDSPEED
from tinker_opt.profile.device_kernels import device_impls
from tinker_opt.profile.reference_ops import (
    FUSED_SAVES,
    REFERENCE,
    Impl,
    reference_rms_norm,
    reference_rope,
    reference_swiglu,
    sdpa_attention,
)
from tinker_opt.specs import FUSED_KERNEL_FLAGS

__all__ = [  # the ops' implementations, re-exported for the modules that build blocks with them
    "FUSED_SAVES",
    "REFERENCE",
    "Impl",
    "reference_rms_norm",
    "reference_rope",
    "reference_swiglu",
    "sdpa_attention",
]

OPS = ("attention", "rmsnorm", "swiglu", "rope", "mc2")
_MC2_FLAGS = tuple(s.flag for s in KNOBS["tp_comm_overlap"].spellings if s.since.get(MINDSPEED))
"""MindSpeed's MC2 switches (the tp_comm_overlap record, knobs.py), newest first."""
FLAG_OPS = {
    "--use-flash-attn": "attention",
    **FUSED_KERNEL_FLAGS,
    **dict.fromkeys(_MC2_FLAGS, "mc2"),
}
"""The launch-script flags that ask for a fused kernel, and the op each one fuses."""
OP_FLAGS = {
    "attention": "--use-flash-attn",
    "rmsnorm": "--use-fused-rmsnorm",
    "swiglu": "--use-fused-swiglu",
    "rope": "--use-fused-rotary-pos-emb",
    "mc2": _MC2_FLAGS[0],
}


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
        setattr(sub, "kernel", impl)  # noqa: B010 (an attribute torch's Module type does not declare)
        used[op] = impl.name
    if kernels is not None and "mc2" in kernels.requested and used:
        used["mc2"] = kernels.impls["mc2"].name
    return used
