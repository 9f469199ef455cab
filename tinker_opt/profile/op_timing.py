"""The analytic device's time of a traced op sequence (numpy only, no torch).

Roofline per op (Williams, Waterman & Patterson, "Roofline", CACM 2009), with size-dependent
efficiencies as Calculon applies them (Isaev et al., "Calculon", SC 2023, section 3):

    t_op = max( flops / (peak_flops[precision] * eff_matmul(flops)),
                bytes / (peak_bandwidth * eff_memory(bytes)) )

Ops run one after another on the device (one stream, no overlap between kernels), so a block's
time is the sum of its ops' times, forward and backward separately.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

import numpy as np

from tinker_opt.hardware import HardwareSpec


class OpLike(Protocol):
    flops: int
    bytes_moved: int
    precision: str


@dataclass(frozen=True)
class OpArrays:
    """The ops of one block and phase as arrays, ready to be timed under any efficiency curves."""

    flops: np.ndarray
    bytes_moved: np.ndarray
    peak_flops_per_us: np.ndarray
    """Peak matrix rate of each op's precision on the target device."""

    @classmethod
    def from_ops(cls, ops: Iterable[OpLike], hardware: HardwareSpec) -> "OpArrays":
        ops = [op for op in ops if op.flops > 0 or op.bytes_moved > 0]  # views run no kernel
        return cls(flops=np.array([op.flops for op in ops], dtype=float),
                   bytes_moved=np.array([op.bytes_moved for op in ops], dtype=float),
                   peak_flops_per_us=np.array([hardware.peak_flops_per_us(op.precision) for op in ops],
                                              dtype=float))

    def __len__(self) -> int:
        return len(self.flops)


def compute_times_us(ops: OpArrays, hardware: HardwareSpec) -> np.ndarray:
    """Each op's time if it were compute-bound (zero for ops without FLOPs)."""
    return hardware.efficiency.matmul.time_us(ops.flops, ops.peak_flops_per_us)


def memory_times_us(ops: OpArrays, hardware: HardwareSpec) -> np.ndarray:
    """Each op's time if it were bound by memory bandwidth."""
    return hardware.efficiency.memory.time_us(ops.bytes_moved, hardware.memory_bytes_per_us)


def op_times_us(ops: OpArrays, hardware: HardwareSpec) -> np.ndarray:
    """Roofline time of each op: the larger of its compute and memory time."""
    return np.maximum(compute_times_us(ops, hardware), memory_times_us(ops, hardware))


def total_time_us(ops: OpArrays, hardware: HardwareSpec) -> float:
    """Time of the op sequence run back to back."""
    return float(op_times_us(ops, hardware).sum()) if len(ops) else 0.0
