"""Measuring one block at one shape: forward / backward time and memory.

* Time: median of `repeats` timed forward and backward passes after `warmup` untimed ones, with
  the spread (max - min) of the timed passes.
* Memory, from one separate pass: activation bytes saved for backward (`SavedTensorCounter`), and
  the transient peak above them (allocator statistics on npu / cuda, `LiveBytesTracker` on cpu).
  Parameter gradients are dropped as soon as they are accumulated: Megatron accumulates them into
  a preallocated fp32 buffer that the cost model counts with the parameters, not in the peak.
* Selective recompute (layers): activation bytes with the core attention recomputed, and the
  forward time of the core attention (the extra work that recompute adds to the backward pass).
"""

from __future__ import annotations

import statistics
from contextlib import ExitStack, nullcontext
from dataclasses import asdict, dataclass

import torch

from tinker_opt.profile.accounting import LiveBytesTracker, SavedTensorCounter
from tinker_opt.profile.device import Device
from tinker_opt.profile.op_trace import OpTrace, trace_ops
from tinker_opt.profile.subgraphs import Block, saved_activation_bytes


@dataclass(frozen=True)
class Measurement:
    """The BLOCK_MEASURES of one blocks.csv row (integers: microseconds and bytes)."""

    fwd_us: int
    bwd_us: int
    fwd_us_spread: int
    bwd_us_spread: int
    param_count: int
    expert_param_count: int
    weight_bytes: int
    input_bytes: int
    output_bytes: int
    activation_bytes: int
    transient_bytes: int
    selective_activation_bytes: int
    selective_recompute_us: int
    fwd_host_ops: int = 0
    """Operators the host issues per pass (the analytic trace counts them; 0: not counted)."""
    bwd_host_ops: int = 0

    def as_row(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class Timings:
    fwd_us: list[float]
    bwd_us: list[float]

    @staticmethod
    def summary(values: list[float]) -> tuple[int, int]:
        """(median, max - min), rounded to whole microseconds."""
        return round(statistics.median(values)), round(max(values) - min(values))


def _drop_param_grads(module: torch.nn.Module) -> list:
    """Free each parameter gradient right after accumulation (see the module docstring)."""

    def drop(param: torch.Tensor) -> None:
        param.grad = None

    return [
        p.register_post_accumulate_grad_hook(drop) for p in module.parameters() if p.requires_grad
    ]


def _backward(output: torch.Tensor, grad: torch.Tensor | None) -> None:
    output.backward(grad)


def _grad_for(output: torch.Tensor) -> torch.Tensor | None:
    return None if output.dim() == 0 else torch.ones_like(output)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def time_block(block: Block, device: Device, *, warmup: int, repeats: int) -> Timings:
    """Forward and backward times of `repeats` passes after `warmup` passes."""
    inputs = block.make_inputs()
    fwd, bwd = [], []
    for step in range(warmup + repeats):
        device.synchronize()
        token = device.start_timer()
        output = block.module(*inputs)
        fwd_us = device.stop_timer(token)
        grad = _grad_for(output)
        device.synchronize()
        token = device.start_timer()
        _backward(output, grad)
        bwd_us = device.stop_timer(token)
        for tensor in inputs:
            tensor.grad = None
        del output, grad
        if step >= warmup:
            fwd.append(fwd_us)
            bwd.append(bwd_us)
    return Timings(fwd, bwd)


def memory_pass(
    block: Block, device: Device, *, trace: OpTrace | None = None
) -> tuple[int, int, int, int]:
    """(activation, transient, input, output) bytes of one forward + backward; with `trace`, the
    same pass also records its ops there (op_trace.trace_ops, the analytic device's one pass)."""
    inputs = block.make_inputs()
    device.synchronize()
    device.reset_peak_memory()
    base = device.allocated_bytes()
    with ExitStack() as stack:
        tracer = stack.enter_context(trace_ops(trace)) if trace is not None else None
        tracker = None if device.has_allocator_stats else stack.enter_context(LiveBytesTracker())
        with SavedTensorCounter(exclude=block.constants()) as counter:
            output = block.module(*inputs)
        output_bytes = _nbytes([output])
        with tracer.phase("bwd") if tracer is not None else nullcontext():
            _backward(output, _grad_for(output))
        device.synchronize()
        peak = tracker.peak_bytes if tracker is not None else device.peak_allocated_bytes() - base
    transient = max(0, peak - counter.saved_bytes)
    return counter.saved_bytes, transient, _nbytes(inputs), output_bytes


def core_attention_us(block: Block, device: Device, *, repeats: int) -> int:
    """Median forward time of the core attention: what selective recompute adds to backward."""
    layer = block.module
    with torch.no_grad():
        (x,) = block.make_inputs()
        q, k, v = layer.attention.split_qkv(layer.norm1(x))
        times = []
        for _ in range(repeats + 1):
            device.synchronize()
            token = device.start_timer()
            layer.attention.core_forward(q, k, v)
            times.append(device.stop_timer(token))
    return round(statistics.median(times[1:]))


def measure_block(
    block: Block, device: Device, *, warmup: int, repeats: int, selective: bool = True
) -> Measurement:
    """All measures of one block at its shape."""
    hooks = _drop_param_grads(block.module)
    try:
        activation, transient, input_bytes, output_bytes = memory_pass(block, device)
        timings = time_block(block, device, warmup=warmup, repeats=repeats)
        has_core = selective and block.attention is not None
        selective_bytes = saved_activation_bytes(block, selective=True) if has_core else activation
        recompute_us = core_attention_us(block, device, repeats=repeats) if has_core else 0
    finally:
        for hook in hooks:
            hook.remove()
    fwd_us, fwd_spread = Timings.summary(timings.fwd_us)
    bwd_us, bwd_spread = Timings.summary(timings.bwd_us)
    return Measurement(
        fwd_us=fwd_us,
        bwd_us=bwd_us,
        fwd_us_spread=fwd_spread,
        bwd_us_spread=bwd_spread,
        param_count=block.param_count,
        expert_param_count=block.expert_param_count,
        weight_bytes=block.weight_bytes,
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        activation_bytes=activation,
        transient_bytes=transient,
        selective_activation_bytes=selective_bytes,
        selective_recompute_us=recompute_us,
    )
