"""The analytic device: a profiled-data folder from a hardware description, without the hardware.

`analytic_profile(model, hardware, out_dir)` writes the same folder as a measured profile
(blocks.csv, comm.csv, meta.json, profile.log; ARCHITECTURE.md) in seconds for any model size:

* Memory is not modelled but counted: each block's reference sub-graph (subgraphs.build_block,
  the very code the measured profile runs) runs forward and backward under
  `torch._subclasses.FakeTensorMode`, which tracks shapes and dtypes but allocates nothing, with
  the measured profile's own accounting (accounting.SavedTensorCounter / LiveBytesTracker). So
  activation, input, output and weight bytes equal those of a CPU profile of the same shapes.
* Time is modelled per aten op (op_trace.py): FLOPs from FlopCounterMode's formulas, bytes moved
  from the op's tensor sizes, each op timed as max(compute time, memory time) under the size-
  dependent efficiency curves of the hardware description (op_timing.py, roofline), forward and
  backward separately. Selective recompute costs the extra backward time of the block with its
  core attention checkpointed (the recomputed forward of the core), as a device would measure it.
* comm.csv comes from the description's links with the ring / alpha-beta formulas
  (hardware.comm_table, comm_cost.collective_time_us).

meta.json names the device `analytic:<hardware name>` and embeds the hardware description, so a
profile always says which figures produced it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
from torch._subclasses import FakeTensorMode

import tinker_opt
from tinker_opt.hardware import HardwareSpec, comm_table
from tinker_opt.io_utils import write_text_atomic
from tinker_opt.profile.accounting import LiveBytesTracker, SavedTensorCounter
from tinker_opt.profile.op_timing import OpArrays, total_time_us
from tinker_opt.profile.op_trace import OpRecord, OpTrace, trace_ops
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.store import BLOCK_COLUMNS, LOG_FILE, write_blocks_csv, write_comm_csv, write_meta
from tinker_opt.profile.subgraphs import Block, build_block, selective_recompute
from tinker_opt.specs import ModelSpec

DEVICE_PREFIX = "analytic:"
COMM_MAX_GROUP = 64
"""comm.csv group sizes from the description go up to this (the formulas hold for any size)."""

Progress = Callable[[int, int], None]
Log = Callable[[str], None]


@dataclass(frozen=True)
class BlockRun:
    """What one forward + backward of a block's sub-graph gives, independent of the hardware."""

    fwd_ops: tuple[OpRecord, ...]
    bwd_ops: tuple[OpRecord, ...]
    input_bytes: int
    output_bytes: int
    activation_bytes: int
    transient_bytes: int


@dataclass(frozen=True)
class BlockTrace:
    """A block at one shape: its plain run, its selective-recompute run (layers only), its weights."""

    block: str
    shape: Shape
    plain: BlockRun
    selective: BlockRun | None
    param_count: int
    expert_param_count: int
    weight_bytes: int


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _run_block(block: Block, *, selective: bool) -> BlockRun:
    """One forward and backward of the block under the op tracer and the memory accounting."""
    inputs = block.make_inputs()
    for param in block.module.parameters():
        param.grad = None  # a fresh step: no gradient accumulation kernels
    trace = OpTrace()
    with selective_recompute(block, selective):
        with SavedTensorCounter(exclude=block.constants()) as saved, LiveBytesTracker() as live:
            with trace_ops(trace) as tracer:
                out = block.module(*inputs)
                with tracer.phase("bwd"):
                    out.backward(torch.ones_like(out))
    return BlockRun(fwd_ops=tuple(trace.of_phase("fwd")), bwd_ops=tuple(trace.of_phase("bwd")),
                    input_bytes=_tensor_bytes(inputs), output_bytes=_tensor_bytes([out]),
                    activation_bytes=saved.saved_bytes, transient_bytes=max(0, live.peak_bytes - saved.saved_bytes))


def trace_block(model: ModelSpec, block: str, shape: Shape) -> BlockTrace:
    """Run the block's reference sub-graph at `shape` on fake tensors and record ops and bytes."""
    with FakeTensorMode():
        sub_graph = build_block(model, block, shape, device="cpu")
        plain = _run_block(sub_graph, selective=False)
        selective = _run_block(sub_graph, selective=True) if sub_graph.attention is not None else None
        return BlockTrace(block=block, shape=shape, plain=plain, selective=selective,
                          param_count=sub_graph.param_count, expert_param_count=sub_graph.expert_param_count,
                          weight_bytes=sub_graph.weight_bytes)


def _time_us(ops: tuple[OpRecord, ...], hardware: HardwareSpec) -> float:
    return total_time_us(OpArrays.from_ops(ops, hardware), hardware)


def block_row(trace: BlockTrace, hardware: HardwareSpec) -> dict:
    """One blocks.csv row: the trace's bytes and its op times on `hardware` (integers, as measured rows)."""
    plain, sel = trace.plain, trace.selective or trace.plain
    fwd_us, bwd_us = _time_us(plain.fwd_ops, hardware), _time_us(plain.bwd_ops, hardware)
    # Selective recompute reruns the core attention forward inside backward: the extra backward time.
    recompute_us = max(0.0, _time_us(sel.bwd_ops, hardware) - bwd_us) if trace.selective else 0.0
    row = dict(zip(("block", "tp", "sp", "cp", "ep", "etp", "mbs"), trace.shape.key(trace.block)))
    row.update(
        fwd_us=round(fwd_us), bwd_us=round(bwd_us), fwd_us_spread=0, bwd_us_spread=0,
        param_count=trace.param_count, expert_param_count=trace.expert_param_count,
        weight_bytes=trace.weight_bytes, input_bytes=plain.input_bytes, output_bytes=plain.output_bytes,
        activation_bytes=plain.activation_bytes, transient_bytes=plain.transient_bytes,
        selective_activation_bytes=sel.activation_bytes, selective_recompute_us=round(recompute_us),
        status="ok")
    return row


def blocks_frame(traces: list[BlockTrace], hardware: HardwareSpec) -> pd.DataFrame:
    """blocks.csv of the traces on `hardware`; re-timing cached traces costs milliseconds."""
    return pd.DataFrame([block_row(t, hardware) for t in traces], columns=list(BLOCK_COLUMNS))


def trace_space(model: ModelSpec, space: list[tuple[str, Shape]], *, progress: Progress | None = None,
                log: Log | None = None) -> list[BlockTrace]:
    """Trace every (block, shape) of the profile space (the slow, hardware-independent part)."""
    traces = []
    for index, (block, shape) in enumerate(space, start=1):
        started = time.perf_counter()
        traces.append(trace_block(model, block, shape))
        if log:
            log(f"traced {block} {shape} in {time.perf_counter() - started:.3f} s")
        if progress:
            progress(index, len(space))
    return traces


def analytic_meta(model: ModelSpec, hardware: HardwareSpec, settings: dict, elapsed_s: float) -> dict:
    """meta.json of an analytic profile: the model, the device and the description that timed it."""
    return {
        "model": model.to_dict(),
        "device": DEVICE_PREFIX + hardware.name,
        "hardware": hardware.to_dict(),
        "versions": {"torch": torch.__version__, "tinker_opt": getattr(tinker_opt, "__version__", "unknown")},
        "settings": settings,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed_s, 3),
    }


def write_analytic_folder(out_dir: Path, blocks: pd.DataFrame, hardware: HardwareSpec, meta: dict,
                          log_lines: list[str]) -> Path:
    """Write blocks.csv, comm.csv (from the description), meta.json and profile.log into out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_blocks_csv(out_dir, blocks)
    write_comm_csv(out_dir, comm_table(hardware, max_group_size=COMM_MAX_GROUP))
    write_meta(out_dir, meta)
    write_text_atomic(out_dir / LOG_FILE, "".join(line + "\n" for line in log_lines))
    return out_dir
