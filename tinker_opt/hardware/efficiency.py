"""Efficiency curves of the analytic device: what fraction of a peak rate an op of a given size gets.

Two curves per device, both data in the hardware description:

* `matmul`: fraction of the peak tensor-core FLOP/s reached by one matrix op, as a function of
  the op's FLOPs. Small GEMMs cannot fill the device (too few output tiles per multiprocessor,
  wave quantisation, launch overhead); large ones saturate below the peak (clock throttling under
  power limits, memory stalls). Calculon models the same as a table of efficiency versus op size
  (calculon-ai/calculon systems/a100_80g.json, "gflops_efficiency").
* `memory`: fraction of the peak HBM bandwidth reached by one memory-bound op, as a function of
  the bytes it moves (small kernels are dominated by launch latency and tail effects; Calculon's
  "MB_efficiency" table).

A curve is either the saturating form `eff(x) = max_efficiency * x / (x + half_size)` (two
parameters with physical meaning: the asymptotic efficiency and the op size that reaches half of
it), or a table of `(size, efficiency)` points interpolated linearly in log10(size) and held
constant beyond its ends. With the saturating form the op time is affine in the op size,
`t = (x + half_size) / (max_efficiency * peak)`: a fixed per-op overhead plus a throughput term,
which is what makes calibration a linear least-squares problem (`tinker_opt.profile.calibrate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinker_opt.errors import ConfigError


@dataclass(frozen=True)
class EfficiencyCurve:
    """Fraction of a peak rate reached by one op, as a function of the op's size (FLOPs or bytes)."""

    max_efficiency: float = 1.0
    """Asymptotic efficiency of very large ops, in (0, 1]."""
    half_size: float = 0.0
    """Op size (FLOPs or bytes) at which half of max_efficiency is reached; 0 means no size effect."""
    points: tuple[tuple[float, float], ...] = ()
    """Optional table of (size, efficiency); when given it replaces the saturating form."""

    def __post_init__(self) -> None:
        if not 0 < self.max_efficiency <= 1 or self.half_size < 0:
            raise ConfigError(
                f"efficiency curve needs 0 < max_efficiency <= 1 and half_size >= 0, got "
                f"{self.max_efficiency}, {self.half_size}"
            )
        for size, eff in self.points:
            if size <= 0 or not 0 < eff <= 1:
                raise ConfigError(
                    f"efficiency point ({size}, {eff}) needs size > 0 and 0 < efficiency <= 1"
                )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EfficiencyCurve:
        points = tuple(sorted((float(s), float(e)) for s, e in data.get("points", ())))
        return cls(
            max_efficiency=float(data.get("max_efficiency", 1.0)),
            half_size=float(data.get("half_size", 0.0)),
            points=points,
        )

    def to_dict(self) -> dict[str, Any]:
        if self.points:
            return {"points": [list(p) for p in self.points]}
        return {"max_efficiency": self.max_efficiency, "half_size": self.half_size}

    def efficiency(self, size: np.ndarray | float) -> np.ndarray:
        """Efficiency at the given op size(s); sizes <= 0 get the smallest efficiency of the curve."""
        x = np.maximum(np.asarray(size, dtype=float), 1e-30)
        if self.points:
            sizes, effs = zip(*self.points, strict=True)
            return np.interp(np.log10(x), np.log10(sizes), effs)
        # max * x / (x + half), written so that each rounded step is monotone in x
        return self.max_efficiency / (1.0 + self.half_size / x)

    def time_us(self, amount: np.ndarray | float, peak_per_us: float) -> np.ndarray:
        """Time of ops of the given size at this curve's efficiency; zero-size ops take no time."""
        x = np.asarray(amount, dtype=float)
        if self.points:
            return np.where(x > 0, x / (peak_per_us * self.efficiency(x)), 0.0)
        # t = x / (peak * e * x / (x + h)) = (x + h) / (e * peak): overhead plus throughput.
        return np.where(x > 0, (x + self.half_size) / (self.max_efficiency * peak_per_us), 0.0)


def _default_matmul() -> EfficiencyCurve:
    return EfficiencyCurve(max_efficiency=0.8, half_size=1e9)


def _default_memory() -> EfficiencyCurve:
    return EfficiencyCurve(max_efficiency=0.8, half_size=1e6)


OPTIONAL_CURVES = ("matmul_fp8", "attention_fwd", "attention_bwd")
"""Curves a description may state; one it leaves out falls back to `matmul`."""


@dataclass(frozen=True)
class DeviceEfficiency:
    """The two curves of one device, plus what the fit that produced them says about itself."""

    matmul: EfficiencyCurve = field(default_factory=_default_matmul)
    """Size is the op's FLOPs (FlopCounterMode's count: 2 per multiply-add)."""
    memory: EfficiencyCurve = field(default_factory=_default_memory)
    """Size is the bytes the op reads and writes."""
    matmul_fp8: EfficiencyCurve | None = None
    """Matrix ops in FP8 (size: FLOPs), relative to the FP8 peak; None: the `matmul` curve
    (an assumption, until a fit on FP8 runs gives it)."""
    attention_fwd: EfficiencyCurve | None = None
    """The fused attention kernel's forward (flash / cuDNN fused attention; size: its FLOPs as
    op_trace counts them, QK^T and PV, causal halved), of the peak of its precision; None: the
    `matmul` curve. Published kernel benchmarks put it below the GEMM rate (see the hardware
    descriptions' notes), so it is data of the description, not a fraction of `matmul`."""
    attention_bwd: EfficiencyCurve | None = None
    """The fused attention kernel's backward (size: its FLOPs, 2.5x the forward's: the scores
    recomputed, dV, dP, dQ, dK); None: the `matmul` curve."""
    fuse_elementwise: bool = True
    """Time each run of memory-bound ops between two matrix ops as one fused kernel, as the fused
    kernels of Megatron-LM / MindSpeed-LLM run them (op_timing.fused_kernels); false for eager
    execution (a CPU profile)."""
    notes: tuple[str, ...] = ()
    """Where the parameters come from (fit data, residuals) or that they are assumed."""

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "hardware file") -> DeviceEfficiency:
        unknown = sorted(
            set(data) - {"matmul", "memory", *OPTIONAL_CURVES, "fuse_elementwise", "notes"}
        )
        if unknown:
            raise ConfigError(
                f"{origin}: unknown efficiency key(s) {unknown}; expected matmul, memory, "
                f"{', '.join(OPTIONAL_CURVES)}, fuse_elementwise, notes"
            )
        defaults = cls()
        return cls(
            matmul=EfficiencyCurve.from_dict(data["matmul"])
            if "matmul" in data
            else defaults.matmul,
            memory=EfficiencyCurve.from_dict(data["memory"])
            if "memory" in data
            else defaults.memory,
            **{
                name: EfficiencyCurve.from_dict(data[name]) if name in data else None
                for name in OPTIONAL_CURVES
            },
            fuse_elementwise=bool(data.get("fuse_elementwise", defaults.fuse_elementwise)),
            notes=tuple(str(n) for n in data.get("notes", ())),
        )

    @property
    def fp8_matmul(self) -> EfficiencyCurve:
        """The curve FP8 matrix ops run under."""
        return self.matmul_fp8 or self.matmul

    def attention(self, direction: str) -> EfficiencyCurve:
        """The curve the fused attention kernel runs under in `direction` (`fwd` or `bwd`)."""
        curve = self.attention_fwd if direction == "fwd" else self.attention_bwd
        return curve or self.matmul

    def to_dict(self) -> dict[str, Any]:
        out = {"matmul": self.matmul.to_dict(), "memory": self.memory.to_dict()}
        for name in OPTIONAL_CURVES:
            curve = getattr(self, name)
            if curve is not None:
                out[name] = curve.to_dict()
        return out | {"fuse_elementwise": self.fuse_elementwise, "notes": list(self.notes)}


def slowed(curve: EfficiencyCurve, factor: float) -> tuple[EfficiencyCurve, bool]:
    """The curve with every op `factor` times slower (efficiency / factor, half size kept, so
    each op's time (x + half) / (e * peak) scales by exactly `factor`); capped at efficiency 1.
    The flag says whether the cap was hit (the device would have to beat its peak)."""
    if curve.points:
        points = tuple((size, min(1.0, eff / factor)) for size, eff in curve.points)
        capped = any(eff / factor > 1 for _, eff in curve.points)
        return EfficiencyCurve(points=points), capped
    efficiency = curve.max_efficiency / factor
    return EfficiencyCurve(max_efficiency=min(1.0, efficiency), half_size=curve.half_size), (
        efficiency > 1
    )
