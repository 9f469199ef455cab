"""Op tracing (FLOPs, bytes, storages) and kernel timing with fusion, on fake tensors."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._subclasses import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from tinker_opt.hardware import load_hardware
from tinker_opt.profile.op_timing import (
    OpArrays,
    fused_kernels,
    kernel_runs,
    op_times_us,
    total_time_us,
)
from tinker_opt.profile.op_trace import EXTRA_FLOP_FORMULAS, OpRecord, OpTrace, trace_ops


def _trace(fn, *shapes, dtype=torch.bfloat16, backward=False, counter=None) -> OpTrace:
    trace = OpTrace()
    with FakeTensorMode(), counter or contextlib.nullcontext():
        inputs = [torch.randn(*s, dtype=dtype, requires_grad=backward) for s in shapes]
        with trace_ops(trace) as tracer:
            out = fn(*inputs)
            if backward:
                with tracer.phase("bwd"):
                    out.backward(torch.ones_like(out))
    return trace


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64))
def test_matmul_flops_are_two_per_multiply_add(m: int, k: int, n: int) -> None:
    """mm of (m, k) by (k, n) counts 2 m k n FLOPs and moves its inputs and output once."""
    trace = _trace(torch.mm, (m, k), (k, n))
    (op,) = [r for r in trace.records if r.name == "mm"]
    assert op.flops == 2 * m * k * n
    assert op.bytes_moved == 2 * (m * k + k * n + m * n)


def test_per_op_flops_add_up_to_flop_counter_total() -> None:
    """The recorded per-op FLOPs sum to FlopCounterMode's own total, forward and backward."""
    layer = lambda x, w: F.gelu(x @ w).sum()
    counter = FlopCounterMode(display=False, custom_mapping=EXTRA_FLOP_FORMULAS)
    trace = _trace(layer, (64, 32), (32, 48), backward=True, counter=counter)
    assert trace.total_flops() == counter.get_total_flops() > 0
    assert trace.total_flops("bwd") == 2 * trace.total_flops("fwd")


def test_views_move_no_bytes() -> None:
    """A transpose or view is metadata only; the copy a reshape needs is counted once."""
    trace = _trace(lambda x: x.t().reshape(-1), (8, 4))
    moved = {r.name: r.bytes_moved for r in trace.records}
    assert moved == {"t": 0, "clone": 2 * 2 * 32, "_unsafe_view": 0}


def test_cpu_attention_kernel_has_a_formula() -> None:
    """The CPU flash-attention kernel gets FLOPs; a causal mask halves them."""
    attend = lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    shape = (1, 2, 16, 8)
    full = _trace(lambda q, k, v: attend(q, k, v, False), shape, shape, shape).total_flops()
    causal = _trace(lambda q, k, v: attend(q, k, v, True), shape, shape, shape).total_flops()
    assert full == 4 * 1 * 2 * 16 * 16 * 8 and causal == full // 2


def test_precision_follows_the_input_dtype() -> None:
    """An fp32 matmul is timed against the fp32 peak, a bf16 one against the bf16 peak."""
    assert _trace(torch.mm, (4, 4), (4, 4), dtype=torch.float32).records[-1].precision == "fp32"
    assert _trace(torch.mm, (4, 4), (4, 4)).records[-1].precision == "bf16"


def _op(flops, reads, writes, phase="fwd") -> OpRecord:
    return OpRecord(
        name="x",
        phase=phase,
        flops=flops,
        precision="bf16",
        bytes_moved=sum(b for _, b in reads + writes),
        reads=tuple(reads),
        writes=tuple(writes),
    )


def test_fused_chain_reads_inputs_and_writes_outputs_once() -> None:
    """a -> b -> c between two matmuls: the fused kernel moves a and c, not b."""
    ops = [
        _op(10, [(0, 100)], [(1, 100)]),  # matmul writes a (1)
        _op(0, [(1, 100)], [(2, 100)]),  # b = f(a)
        _op(0, [(2, 100)], [(3, 100)]),  # c = g(b)
        _op(10, [(3, 100)], [(4, 100)]),
    ]  # matmul reads c
    kernels = fused_kernels(ops)
    assert [k.num_ops for k in kernels] == [1, 2, 1]
    assert kernels[1].bytes_moved == 200
    assert kernel_runs(ops) == [[0], [1, 2], [3]]
    assert kernel_runs(ops, fuse=False) == [[0], [1], [2], [3]]


def test_tensor_used_later_is_written_by_the_fused_kernel() -> None:
    """An intermediate read after the chain (saved for backward) is written once."""
    ops = [
        _op(0, [(0, 100)], [(1, 100)]),
        _op(0, [(1, 100)], [(2, 100)]),
        _op(10, [(2, 100)], [(3, 100)]),
        _op(0, [(1, 100)], [(4, 100)], phase="bwd"),
    ]
    assert fused_kernels(ops)[0].bytes_moved == 100 + 100 + 100


def test_fusion_off_keeps_one_kernel_per_op() -> None:
    """Without fusion every data-moving op is its own kernel with its own bytes."""
    ops = [_op(0, [(0, 100)], [(1, 100)]), _op(0, [(1, 100)], [(2, 100)])]
    kernels = fused_kernels(ops, fuse=False)
    assert [k.bytes_moved for k in kernels] == [200, 200]


def test_fusion_never_adds_time() -> None:
    """A real layer's fused kernels take no longer than its ops one by one."""
    layer = lambda x, w: F.dropout(F.gelu(x @ w) * 2.0 + 1.0, 0.1).sum()
    trace = _trace(layer, (256, 128), (128, 512), backward=True)
    hardware = load_hardware("a100-80gb")
    fused = total_time_us(OpArrays.from_ops(fused_kernels(trace.records), hardware), hardware)
    eager = total_time_us(
        OpArrays.from_ops(fused_kernels(trace.records, fuse=False), hardware), hardware
    )
    assert 0 < fused < eager


def test_op_time_is_the_larger_roof() -> None:
    """A big matmul is compute-bound, a big copy memory-bound (roofline)."""
    hardware = load_hardware("a100-80gb")
    big_mm = OpRecord("mm", "fwd", flops=2 * 8192**3, bytes_moved=3 * 2 * 8192**2, precision="bf16")
    copy = OpRecord("copy", "fwd", flops=0, bytes_moved=2 * 2**30, precision="bf16")
    mm_us, copy_us = op_times_us(OpArrays.from_ops([big_mm, copy], hardware), hardware)
    assert mm_us == pytest.approx(
        2 * 8192**3 / (312e6 * hardware.efficiency.matmul.efficiency(2 * 8192**3))
    )
    assert copy_us == pytest.approx(
        2 * 2**30 / (2039e3 * hardware.efficiency.memory.efficiency(2 * 2**30))
    )
