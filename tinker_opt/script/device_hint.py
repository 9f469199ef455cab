"""The device a launch script runs on, as far as the script says: `inspect` names it.

A Megatron-LM launch is the same `pretrain_gpt.py` line on NVIDIA and AMD GPUs; what tells them
apart is the environment the script sets. AMD's Megatron-LM build for Instinct GPUs
(ROCm/Megatron-LM examples/llama/train_llama3.sh, commit 02b8aa76d2fc) exports ROCm runtime
variables (`HSA_NO_SCRATCH_RECLAIM`, `GPU_MAX_HW_QUEUES`), RCCL's own (`RCCL_MSCCL_ENABLE`) and
Transformer Engine's hipBLASLt tuning (`TE_HIPBLASLT_TUNING_*`), while `NCCL_*` and
`--use-flash-attn` are shared with NVIDIA scripts and prove nothing. MindSpeed-LLM scripts run on
Ascend NPUs (the reader's MindSpeed markers: `ASCEND`, `HCCL_`, `npu`, ...). A script that
names a model (`MI300X`, `gfx942`) narrows the descriptions to that one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

ROCM_MARKERS = re.compile(
    r"\b(HSA_[A-Z_]+|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|RCCL_[A-Z_]+|GPU_MAX_HW_QUEUES|"
    r"TE_HIPBLASLT_[A-Z_]+|HIPBLASLT_[A-Z_]+|PYTORCH_ROCM_ARCH|rocm-smi|amd-smi|/opt/rocm|"
    r"rocm/megatron-lm|rocm/pytorch)\b"
)
"""Names only ROCm environments set (HSA runtime, HIP, RCCL, hipBLASLt, ROCm tools / images)."""
ASCEND_MARKERS = re.compile(
    r"\b(ASCEND_[A-Z_]+|HCCL_[A-Z_]+|set_env\.sh|torch_npu|NPUS_PER_NODE)\b"
)
_AMD_MODELS = {
    "mi300x": re.compile(r"\bmi300x?\b|\bgfx942\b", re.I),
    "mi325x": re.compile(r"\bmi325x?\b", re.I),
    "mi355x": re.compile(r"\bmi35[05]x?\b|\bgfx950\b", re.I),
}
"""Shipped AMD descriptions and the names that pick one (gfx942 is MI300X and MI325X: the
first; gfx950 MI350X and MI355X)."""
AMD_DESCRIPTIONS = tuple(_AMD_MODELS)
ASCEND_DESCRIPTIONS = ("910b", "atlas-a3")


@dataclass(frozen=True)
class DeviceHint:
    """What the script says of its device: the family, the shipped descriptions that fit it, and
    the names that told."""

    family: str | None
    """`AMD Instinct (ROCm)`, `Huawei Ascend (CANN)`, or None when the script names none."""
    descriptions: tuple[str, ...] = ()
    """Shipped hardware descriptions (--hardware NAME) of that family, the named model first."""
    markers: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family or "not named by the script",
            "hardware": ", ".join(self.descriptions) or None,
            "markers": ", ".join(self.markers) or None,
        }


def _unique(found: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(found))[:6]


def _amd_descriptions(text: str) -> tuple[str, ...]:
    named = [name for name, pattern in _AMD_MODELS.items() if pattern.search(text)]
    return tuple(named[:1]) + tuple(n for n in AMD_DESCRIPTIONS if n not in named[:1])


def device_hint(text: str) -> DeviceHint:
    """The device family the script's environment names (see the module docstring)."""
    rocm = [match.group(1) for match in ROCM_MARKERS.finditer(text)]
    if rocm:
        return DeviceHint("AMD Instinct (ROCm)", _amd_descriptions(text), _unique(rocm))
    ascend = [match.group(1) for match in ASCEND_MARKERS.finditer(text)]
    if ascend:
        return DeviceHint("Huawei Ascend (CANN)", ASCEND_DESCRIPTIONS, _unique(ascend))
    return DeviceHint(None)
