"""The fused attention kernel priced under the description's attention curves (op_timing.py),
forward and backward, with the hardware file's published kernel figures (h100-80gb.json)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses import FakeTensorMode

from tinker_opt.hardware import load_hardware
from tinker_opt.hardware.efficiency import DeviceEfficiency
from tinker_opt.profile.op_timing import OpArrays, fused_kernels, op_times_us
from tinker_opt.profile.op_trace import OpRecord, OpTrace, trace_ops

FWD_4K = 4 * 16384 * 2048 * 4096 // 2
"""Causal forward FLOPs of the FlashAttention-3 paper's 4k point (b s = 16k tokens, h d = 2048)."""


def _flash(name: str, flops: int, phase: str = "fwd") -> OpRecord:
    return OpRecord(name, phase, flops=flops, bytes_moved=1, precision="bf16")


def test_h100_prices_the_attention_kernel_at_the_published_cudnn_rate() -> None:
    """The 4k causal forward point: 518 TFLOP/s of 989 (0.5238); its backward (2.5x the FLOPs,
    the non-causal 2k point of the backward figure) 465 TFLOP/s (0.4702), hand-computed."""
    h100 = load_hardware("h100-80gb")
    fwd = _flash("_scaled_dot_product_flash_attention_for_cpu", FWD_4K)
    bwd = _flash("_scaled_dot_product_flash_attention_for_cpu_backward", 5 * FWD_4K // 2, "bwd")
    mm = OpRecord("mm", "fwd", flops=FWD_4K, bytes_moved=1, precision="bf16")
    fwd_us, bwd_us, mm_us = op_times_us(
        OpArrays.from_ops(fused_kernels([fwd, bwd, mm]), h100), h100
    )
    assert fwd_us == pytest.approx(274877906944 / (989e6 * 0.5238))  # 530.6 us
    assert bwd_us == pytest.approx(687194767360 / (989e6 * 0.4702))  # 1477.7 us
    # the GEMM curve (0.63, half size 3e9) of the same FLOPs is faster than the attention kernel
    assert mm_us == pytest.approx((274877906944 + 3e9) / (989e6 * 0.63))  # 446.0 us
    assert mm_us < fwd_us


def test_a_description_without_attention_curves_prices_it_as_a_gemm() -> None:
    """a100-80gb.json states no attention curve: the flash op runs under the matmul curve."""
    a100 = load_hardware("a100-80gb")
    assert a100.efficiency.attention_fwd is None
    fwd = _flash("_scaled_dot_product_flash_attention_for_cpu", FWD_4K)
    mm = OpRecord("mm", "fwd", flops=FWD_4K, bytes_moved=1, precision="bf16")
    fwd_us, mm_us = op_times_us(OpArrays.from_ops([fwd, mm], a100), a100)
    assert fwd_us == mm_us


def test_a_traced_causal_attention_is_the_attention_kernel_both_ways() -> None:
    """A causal SDPA on fake CPU tensors traces the flash kernel and its backward; their kernels
    carry the directions, and their FLOPs are the kernel's count (4 b s^2 h d / 2, bwd 2.5x)."""
    b, h, s, d = 1, 4, 256, 64
    trace = OpTrace()
    with FakeTensorMode():
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
        with trace_ops(trace) as tracer:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            with tracer.phase("bwd"):
                out.backward(torch.ones_like(out))
    kernels = [k for k in fused_kernels(trace.records) if k.attention]
    assert [(k.attention, k.flops) for k in kernels] == [
        ("fwd", 4 * b * s * s * h * d // 2),
        ("bwd", 5 * 4 * b * s * s * h * d // 4),
    ]


def test_attention_curves_round_trip_and_are_checked() -> None:
    """to_dict / from_dict keep the curves; a misspelt key is refused with the expected names."""
    eff = load_hardware("h100-80gb").efficiency
    again = DeviceEfficiency.from_dict(eff.to_dict())
    assert again.attention_fwd == eff.attention_fwd and again.attention_bwd == eff.attention_bwd
    assert dataclasses.replace(eff, attention_bwd=None).attention("bwd") == eff.matmul
    with pytest.raises(Exception, match="attention_fwd, attention_bwd"):
        DeviceEfficiency.from_dict({"attention_forward": {"max_efficiency": 0.5}})
