"""Megatron's fused causal softmax only where its shape conditions hold; elsewhere the unfused
fp32 path, traced as separate kernels (profile/softmax.py, op_trace.unfused_kernels)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch._subclasses import FakeTensorMode

from tinker_opt.hardware import load_hardware
from tinker_opt.profile.layers import materialised_attention
from tinker_opt.profile.op_timing import fused_kernels
from tinker_opt.profile.op_trace import OpTrace, trace_ops
from tinker_opt.profile.softmax import batch_per_block, fused_softmax_available


@pytest.mark.parametrize(
    ("batches", "sq", "sk", "dtype", "causal", "fused"),
    [
        (2, 1024, 1024, torch.float16, True, False),  # 16 heads / tp 8 x mbs 1 (vTrain)
        (4, 1024, 1024, torch.float16, True, True),  # mbs 2
        (16, 1024, 1024, torch.bfloat16, True, True),
        (16, 1024, 1024, torch.float32, True, False),  # 16-bit input only
        (16, 8192, 8192, torch.bfloat16, True, False),  # sk above 4096
        (16, 16, 16, torch.bfloat16, True, False),  # sk must exceed 16
        (16, 1022, 1022, torch.bfloat16, True, False),  # sq, sk multiples of 4
        (4, 128, 128, torch.bfloat16, True, False),  # 8 rows a block up to sk 128
        (8, 128, 128, torch.bfloat16, True, True),
        (4, 128, 128, torch.bfloat16, False, True),  # not causal: sq a multiple of 8
    ],
)
def test_fused_kernel_conditions(batches, sq, sk, dtype, causal, fused) -> None:
    """Megatron-Core's is_kernel_available on the shapes that decide it."""
    assert fused_softmax_available(batches, sq, sk, dtype, causal) is fused


def test_batch_per_block_follows_the_kernel() -> None:
    """128 threads a block, a warp of min(next power of two, 32) threads a row, 2 rows a warp up
    to sk 128 (scaled_masked_softmax.h get_batch_per_block)."""
    assert [batch_per_block(sk) for sk in (8, 32, 100, 128, 129, 1024, 4096)] == [
        32,
        8,
        8,
        8,
        4,
        4,
        4,
    ]


def _attention_trace(batches: int, seq: int = 64, dim: int = 16) -> tuple[OpTrace, torch.Tensor]:
    trace = OpTrace()
    with FakeTensorMode():
        q, k, v = (
            torch.randn(seq, batches, dim, dtype=torch.float16, requires_grad=True)
            for _ in range(3)
        )
        with trace_ops(trace) as tracer:
            out = materialised_attention(q, k, v, scale=0.25, causal=True, p=0.0)
            with tracer.phase("bwd"):
                out.backward(torch.ones_like(out))
    return trace, out


def test_fallback_runs_fp32_ops_as_separate_kernels() -> None:
    """2 attention batches take the unfused path: fp32 casts, softmax and its backward marked
    unfused, each its own kernel on a description that fuses elementwise runs; 8 batches run
    the fused emulation, none unfused, fewer kernels."""
    slow, _ = _attention_trace(batches=2)
    fast, _ = _attention_trace(batches=8)
    unfused = [r for r in slow.records if r.unfused]
    assert {"_to_copy", "_softmax", "_softmax_backward_data"} <= {r.name for r in unfused}
    assert {r.phase for r in unfused} == {"fwd", "bwd"}
    assert not any(r.unfused for r in fast.records)
    assert any(r.precision == "fp32" and r.name == "_softmax" for r in unfused)
    assert load_hardware("a100-40gb").efficiency.fuse_elementwise
    memory_kernels = lambda t: [k for k in fused_kernels(t.records) if k.flops == 0]
    assert len(memory_kernels(slow)) >= len(memory_kernels(fast)) + 6


def test_host_ops_follow_the_micro_batch_row() -> None:
    """Operator counts come from the row of the micro-batch size (the fallback at mbs 1 issues
    more), the nearest profiled one where it was not profiled: never mbs 1's for all."""
    from tinker_opt.costs.profile_table import BlockTable
    from tinker_opt.profile.store import BLOCK_COLUMNS

    rows = [
        {"block": "layer", "tp": 8, "sp": 0, "cp": 1, "ep": 1, "etp": 1, "mbs": mbs, "fwd_us": us,
         "bwd_us": 2 * us, "fwd_host_ops": fwd, "bwd_host_ops": fwd + 58, "status": "ok"}
        for mbs, us, fwd in ((1, 170, 51), (2, 142, 49), (4, 243, 49))
    ]  # fmt: skip
    table = BlockTable(pd.DataFrame(rows).reindex(columns=list(BLOCK_COLUMNS), fill_value=0))
    ops = lambda mbs: (lambda c: (c.fwd_host_ops, c.bwd_host_ops))(
        table.cost("layer", tp=8, sp=False, cp=1, mbs=mbs)
    )
    assert [ops(m) for m in (1, 2, 4, 8)] == [(51, 109), (49, 107), (49, 107), (49, 107)]
