"""Measuring one block: times, memory, selective recompute; the device layer."""

from __future__ import annotations

import torch

from tests.profile_support import gpt_model
from tinker_opt.profile.device import Device, detect_device
from tinker_opt.profile.measure import measure_block
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.subgraphs import build_block, saved_activation_bytes


def test_measure_block_fills_every_measure():
    """Times are positive, activations equal the saved bytes, weights and shapes are exact."""
    block = build_block(gpt_model(seq=64, hidden=64, heads=4), "layer", Shape(tp=2, sp=True, mbs=2))
    m = measure_block(block, detect_device("cpu"), warmup=0, repeats=5)
    assert m.fwd_us > 0 and m.bwd_us > 0 and m.selective_recompute_us > 0
    assert m.activation_bytes == saved_activation_bytes(block)
    assert m.selective_activation_bytes < m.activation_bytes
    assert (
        m.weight_bytes == block.weight_bytes and m.input_bytes == m.output_bytes == 32 * 2 * 64 * 2
    )
    assert m.transient_bytes >= 0


def test_head_output_is_the_scalar_loss():
    """The head's output is one fp32 loss; its input is the hidden shard."""
    block = build_block(gpt_model(seq=64, hidden=64, heads=4), "head", Shape(mbs=1))
    m = measure_block(block, detect_device("cpu"), warmup=0, repeats=5)
    assert m.output_bytes == 4 and m.selective_recompute_us == 0


def test_auto_detects_cpu_here():
    """Without npu or cuda, auto picks the CPU with gloo for communication."""
    device = detect_device("auto")
    assert device.kind == "cpu" and device.comm_backend == "gloo" and device.count == 1


def test_cpu_timer_measures_microseconds():
    """start_timer / stop_timer return elapsed microseconds."""
    device = detect_device("cpu")
    token = device.start_timer()
    torch.ones(1000).sum()
    assert 0 < device.stop_timer(token) < 1e7


def test_out_of_memory_errors_are_recognised():
    """Allocator messages and MemoryError count as out of memory; other errors do not."""
    assert Device.is_oom(
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
    )
    assert Device.is_oom(MemoryError())
    assert not Device.is_oom(ValueError("out of memory"))
    assert not Device.is_oom(RuntimeError("shape mismatch"))
