"""The analytic device's time of a traced op sequence (numpy only, no torch).

Roofline per op (Williams, Waterman & Patterson, "Roofline", CACM 2009), with size-dependent
efficiencies as Calculon applies them (Isaev et al., "Calculon", SC 2023, section 3):

    t_op = max( flops / (peak_flops[precision] * eff_matmul(flops)),
                bytes / (peak_bandwidth * eff_memory(bytes)) )

Ops run one after another on the device (one stream, no overlap between kernels), so a block's
time is the sum of its kernels' times, forward and backward separately.

Kernel fusion (`fused_kernels`): Megatron-LM and MindSpeed-LLM run fused kernels between the
matrix multiplications (fused scale-mask-softmax, bias-GeLU, bias-dropout-add, fused norms, jit-
fused elementwise chains), while the reference sub-graphs spell them out as eager aten ops. With
fusion on (the hardware description's `fuse_elementwise`), each maximal run of consecutive
memory-bound ops between two matrix ops is one kernel: it reads each outside tensor once and
writes each tensor that is used outside the run once; tensors produced and consumed only inside
the run never touch memory. That is what a fused kernel saves (Dao et al., "FlashAttention",
2022, section 2; Megatron's fused softmax), and it pays one launch overhead instead of many.
An op the trace marks `unfused` (a framework's eager fallback, op_trace.unfused_kernels: the
unfused softmax where the fused kernel's shape conditions fail, profile/softmax.py) is its own
kernel, as a matrix op is: the framework issues it alone.

The fused attention kernel (flash / cuDNN fused attention, which the analytic trace records as
the CPU flash kernel, `ATTENTION_KERNELS`) is timed under the description's attention curves
(`efficiency.attention_fwd` / `attention_bwd`) instead of the GEMM curve: published kernel
benchmarks measure it below the GEMM rate, the backward lower still (the hardware descriptions'
notes cite them). This module is the one place that choice is made.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tinker_opt.hardware import HardwareSpec

ATTENTION_KERNELS = {
    "_scaled_dot_product_flash_attention_for_cpu": "fwd",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "bwd",
}
"""The traced ops that stand for the device's fused attention kernel, and which of its curves
each runs under (by op, not phase: a recomputed forward inside backward is a forward kernel)."""


def attention_direction(op: object) -> str:
    """`fwd` / `bwd` if the op (a Kernel or a traced op) is the fused attention kernel, else ''."""
    return getattr(op, "attention", "") or ATTENTION_KERNELS.get(getattr(op, "name", ""), "")


class OpLike(Protocol):
    flops: int
    bytes_moved: int
    precision: str


class TracedOp(OpLike, Protocol):
    name: str
    phase: str
    reads: tuple[tuple[int, int], ...]
    writes: tuple[tuple[int, int], ...]
    unfused: bool


@dataclass(frozen=True)
class Kernel:
    """One device kernel: a matrix op, or a fused run of memory-bound ops."""

    phase: str
    flops: int
    bytes_moved: int
    precision: str
    num_ops: int = 1
    attention: str = ""
    """`fwd` / `bwd` for the fused attention kernel's directions (ATTENTION_KERNELS), else ''."""

    @classmethod
    def of_op(cls, op: TracedOp) -> Kernel:
        """The kernel of one op run alone."""
        return cls(
            op.phase,
            op.flops,
            op.bytes_moved,
            op.precision,
            attention=attention_direction(op),
        )


def _runs(ops: Sequence[TracedOp]) -> list[list[int]]:
    """Indices of ops grouped into kernels: each matrix op and each `unfused` op alone,
    memory-bound neighbours together."""
    runs: list[list[int]] = []
    current: list[int] = []
    for index, op in enumerate(ops):
        if op.flops == 0 and op.bytes_moved == 0:
            continue  # views and metadata: no kernel, no break
        alone = op.flops > 0 or op.unfused
        if alone or (current and ops[current[-1]].phase != op.phase):
            runs += [current] if current else []
            current = []
            if alone:
                runs.append([index])
                continue
        current.append(index)
    return runs + ([current] if current else [])


def _fused_bytes(
    ops: Sequence[TracedOp],
    run: list[int],
    readers: dict[int, set[int]],
    first_writer: dict[int, int],
) -> int:
    """Bytes of one fused run: outside inputs once, outputs used outside once, inner tensors never."""
    members = set(run)
    read_bytes: dict[int, int] = {}
    write_bytes: dict[int, int] = {}
    for index in run:
        for sid, nbytes in ops[index].reads:
            read_bytes[sid] = max(read_bytes.get(sid, 0), nbytes)
        for sid, nbytes in ops[index].writes:
            write_bytes[sid] = max(write_bytes.get(sid, 0), nbytes)
    # A tensor written in the run that no later op reads never leaves the kernel: one made in the
    # run and read only there, or one updated in place and read after it only there (the fused
    # softmax's scores buffer). A tensor nobody reads at all is the block's output: written.
    inner = {
        sid
        for sid in write_bytes
        if readers.get(sid) and all(r in members or r < run[0] for r in readers[sid])
    }
    # A tensor made inside the run is read from registers; one made before is read from memory.
    outside_reads = sum(b for sid, b in read_bytes.items() if first_writer.get(sid) not in members)
    return outside_reads + sum(b for sid, b in write_bytes.items() if sid not in inner)


def kernel_runs(ops: Sequence[TracedOp], fuse: bool = True) -> list[list[int]]:
    """Indices of the traced ops behind each kernel `fused_kernels` returns, in the same order
    (one op a kernel when `fuse` is off; views and metadata belong to none)."""
    if fuse:
        return _runs(ops)
    return [[i] for i, op in enumerate(ops) if op.flops > 0 or op.bytes_moved > 0]


def fused_kernels(ops: Sequence[TracedOp], fuse: bool = True) -> list[Kernel]:
    """The kernels a device runs for the traced ops (one per op when `fuse` is off)."""
    if not fuse:
        return [Kernel.of_op(op) for op in ops if op.flops > 0 or op.bytes_moved > 0]
    readers: dict[int, set[int]] = {}
    first_writer: dict[int, int] = {}
    for index, op in enumerate(ops):
        for sid, _ in op.reads:
            readers.setdefault(sid, set()).add(index)
        for sid, _ in op.writes:
            first_writer.setdefault(sid, index)
    kernels = []
    for run in _runs(ops):
        first = ops[run[0]]
        if len(run) == 1:
            kernels.append(Kernel.of_op(first))
        else:
            kernels.append(
                Kernel(
                    first.phase,
                    0,
                    _fused_bytes(ops, run, readers, first_writer),
                    first.precision,
                    len(run),
                )
            )
    return kernels


@dataclass(frozen=True)
class OpArrays:
    """The ops of one block and phase as arrays, ready to be timed under any efficiency curves."""

    flops: np.ndarray
    bytes_moved: np.ndarray
    peak_flops_per_us: np.ndarray
    """Peak matrix rate of each op's precision on the target device."""
    fp8: np.ndarray | None = None
    """Which ops run in FP8 (timed under the FP8 matmul curve); None: none."""
    attention: np.ndarray | None = None
    """Each op's fused-attention direction (`fwd`, `bwd`, or '' for none; Kernel.attention);
    None: no attention kernel."""

    @classmethod
    def from_ops(cls, ops: Iterable[OpLike], hardware: HardwareSpec) -> OpArrays:
        ops = [op for op in ops if op.flops > 0 or op.bytes_moved > 0]  # views run no kernel
        return cls(
            flops=np.array([op.flops for op in ops], dtype=float),
            bytes_moved=np.array([op.bytes_moved for op in ops], dtype=float),
            peak_flops_per_us=np.array(
                [hardware.peak_flops_per_us(op.precision) for op in ops], dtype=float
            ),
            fp8=np.array([op.precision == "fp8" for op in ops], dtype=bool),
            attention=np.array([attention_direction(op) for op in ops], dtype=object),
        )

    def __len__(self) -> int:
        return len(self.flops)


def compute_times_us(ops: OpArrays, hardware: HardwareSpec) -> np.ndarray:
    """Each op's time if it were compute-bound (zero for ops without FLOPs); FP8 ops under the
    FP8 matmul curve (profile/fp8.py), the fused attention kernel under its direction's curve."""
    eff = hardware.efficiency
    times = eff.matmul.time_us(ops.flops, ops.peak_flops_per_us)
    if ops.fp8 is not None and ops.fp8.any():
        times = np.where(ops.fp8, eff.fp8_matmul.time_us(ops.flops, ops.peak_flops_per_us), times)
    if ops.attention is not None:
        for direction in ("fwd", "bwd"):
            mask = ops.attention == direction
            if mask.any():
                curve = eff.attention(direction)
                times = np.where(mask, curve.time_us(ops.flops, ops.peak_flops_per_us), times)
    return times


def memory_times_us(ops: OpArrays, hardware: HardwareSpec) -> np.ndarray:
    """Each op's time if it were bound by memory bandwidth."""
    return hardware.efficiency.memory.time_us(ops.bytes_moved, hardware.memory_bytes_per_us)


def op_times_us(ops: OpArrays, hardware: HardwareSpec) -> np.ndarray:
    """Roofline time of each op: the larger of its compute and memory time."""
    return np.maximum(compute_times_us(ops, hardware), memory_times_us(ops, hardware))


def total_time_us(ops: OpArrays, hardware: HardwareSpec) -> float:
    """Time of the op sequence run back to back."""
    return float(op_times_us(ops, hardware).sum()) if len(ops) else 0.0
