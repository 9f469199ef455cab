"""The analytic device: a profiled-data folder from a hardware description, without the hardware.

`analytic_profile(model, hardware, out_dir)` writes the same folder as a measured profile
(blocks.csv, comm.csv, meta.json, profile.log; README, "Output folders") in seconds for any model size:

* Memory is not modelled but counted: each block's reference sub-graph (subgraphs.build_block,
  the very code the measured profile runs) runs forward and backward on the meta device, which
  tracks shapes and dtypes but allocates nothing (as the CPU would run it: cpu_on_meta.py), with
  the measured profile's own accounting (measure.memory_pass: accounting.SavedTensorCounter /
  LiveBytesTracker). So activation, input, output and weight bytes equal those of a CPU profile
  of the same shapes, except for the ops the launch fuses (ModelSpec.fused_kernels), which save
  what the fused kernels save (kernels.FUSED_SAVES). One forward + backward gives both the bytes
  and the op trace.
* Time is modelled per aten op (op_trace.py): FLOPs from torch's FLOP-counter formulas, bytes moved
  from the op's tensor sizes, each op timed as max(compute time, memory time) under the size-
  dependent efficiency curves of the hardware description (op_timing.py, roofline), forward and
  backward separately. Selective recompute costs the extra backward time of the block with its
  core attention checkpointed (the recomputed forward of the core), as a device would measure it.
* comm.csv comes from the description's links with the ring / alpha-beta formulas
  (hardware.comm_table, comm_cost.collective_time_us).

meta.json names the device `analytic:<hardware name>` and embeds the hardware description, so a
profile always says which figures produced it. The points of the profile space are traced in
forked worker processes (`workers`, the profile's `--devices`; default every CPU), each timing
its own rows and sending back those rows.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import pandas as pd
import torch
from torch._subclasses import FakeTensorMode

import tinker_opt
from tinker_opt.hardware import COMM_MAX_GROUP, HardwareSpec, comm_table
from tinker_opt.io_utils import write_text_atomic
from tinker_opt.profile.cpu_on_meta import CpuOnMeta
from tinker_opt.profile.device import Device, detect_device
from tinker_opt.profile.fp8 import FP8_BLOCKS, fp8_ops, linear_module_names
from tinker_opt.profile.kernels import analytic_kernels
from tinker_opt.profile.measure import Measurement, memory_pass
from tinker_opt.profile.meta import ProfileMeta, write_meta
from tinker_opt.profile.op_timing import OpArrays, fused_kernels, total_time_us
from tinker_opt.profile.op_trace import PHASES, OpRecord, OpTrace, trace_ops
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.space import ProfilePoint, SpaceLimits, profile_space
from tinker_opt.profile.store import BLOCK_COLUMNS, LOG_FILE, write_blocks_csv, write_comm_csv
from tinker_opt.profile.subgraphs import Block, build_block, saved_activation_bytes
from tinker_opt.specs import ModelSpec

DEVICE_PREFIX = "analytic:"

T = TypeVar("T")
Progress = Callable[[int, int, str], None]
Log = Callable[[str], None]


@dataclass(frozen=True)
class BlockTrace:
    """A block at one shape, independent of the hardware: its ops and its measured-style bytes."""

    block: str
    shape: Shape
    fwd_ops: tuple[OpRecord, ...]
    bwd_ops: tuple[OpRecord, ...]
    core_ops: tuple[OpRecord, ...]
    """The core attention's forward, which selective recompute reruns in backward (layers only)."""
    memory: Measurement
    """The measured profile's own measurement of the block without data: its byte counts are
    exact; its times are zero (the op trace gives them)."""


@functools.cache
def _host() -> Device:
    """The host device object memory_pass expects (no allocator statistics: bytes are tracked)."""
    return detect_device("cpu")


def _core_ops(block: Block) -> OpTrace:
    """Ops of the core attention's forward alone (what selective recompute reruns)."""
    core = OpTrace()
    if block.attention is not None:
        layer = block.module
        with torch.no_grad():
            q, k, v = layer.attention.split_qkv(layer.norm1(block.make_inputs()[0]))
            with trace_ops(core):
                layer.attention.core_forward(q, k, v)
    return core


def _measured_pass(block: Block, passes: OpTrace) -> Measurement:
    """The measured profile's memory pass (measure.memory_pass) without data: exact bytes, and
    the ops of that forward + backward (as measure.time_block runs them) recorded into `passes`.

    The timed passes of measure_block are skipped (ops without data have no meaningful time; the
    op trace gives the times), so the Measurement's times are zero."""
    activation, transient, input_bytes, output_bytes = memory_pass(block, _host(), trace=passes)
    selective = (
        saved_activation_bytes(block, selective=True) if block.attention is not None else activation
    )
    return Measurement(
        fwd_us=0,
        bwd_us=0,
        fwd_us_spread=0,
        bwd_us_spread=0,
        param_count=block.param_count,
        expert_param_count=block.expert_param_count,
        weight_bytes=block.weight_bytes,
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        activation_bytes=activation,
        transient_bytes=transient,
        selective_activation_bytes=selective,
        selective_recompute_us=0,
    )


def trace_block(model: ModelSpec, block: str, shape: Shape, *, device: str = "meta") -> BlockTrace:
    """Run the block's reference sub-graph at `shape` without data: ops, and bytes as measured.

    On the meta device (shapes, strides and dtypes only, run by torch's meta kernels) by default;
    `device="fake-cpu"` runs it under FakeTensorMode as fake CPU tensors instead, the way this
    device traced first (about four times slower: FakeTensorMode dispatches every op in Python).
    Both give the same ops and bytes (tests/test_analytic_meta.py): where the meta kernels differ
    from the CPU's (the attention backend, the layer-norm statistics), cpu_on_meta.py follows
    the CPU."""
    with FakeTensorMode() if device == "fake-cpu" else CpuOnMeta():
        sub_graph = build_block(
            model,
            block,
            shape,
            device="cpu" if device == "fake-cpu" else device,
            kernels=analytic_kernels(model.fused_kernels),
        )
        # Gradients are dropped after accumulation, as measure.py does (Megatron's own fp32 buffer).
        hooks = [
            p.register_post_accumulate_grad_hook(_drop_grad) for p in sub_graph.module.parameters()
        ]
        passes = OpTrace()
        param_ids = passes.reserve(sub_graph.module.parameters())
        try:
            memory = _measured_pass(sub_graph, passes)
            core = _core_ops(sub_graph)
        finally:
            for hook in hooks:
                hook.remove()
        ops = tuple(passes.records)
        if model.is_fp8 and block in FP8_BLOCKS:
            linears = linear_module_names(sub_graph.module)
            ops = fp8_ops(ops, linears, param_ids, model.fp8_recipe)
    return BlockTrace(
        block=block,
        shape=shape,
        fwd_ops=tuple(op for op in ops if op.phase == "fwd"),
        bwd_ops=tuple(op for op in ops if op.phase == "bwd"),
        core_ops=tuple(core.records),
        memory=memory,
    )


def _drop_grad(param: torch.Tensor) -> None:
    param.grad = None  # as measure.py: Megatron accumulates into its own fp32 buffer


def phase_times_us(ops: tuple[OpRecord, ...], hardware: HardwareSpec) -> dict[str, float]:
    """Time of each phase of a traced pass on `hardware`, kernels fused as the device runs them."""
    kernels = fused_kernels(ops, hardware.efficiency.fuse_elementwise)
    return {
        phase: total_time_us(
            OpArrays.from_ops([k for k in kernels if k.phase == phase], hardware), hardware
        )
        for phase in PHASES
    }


def block_row(trace: BlockTrace, hardware: HardwareSpec) -> dict:
    """One blocks.csv row: the measured-style bytes and the op times on `hardware` (integers)."""
    row = dict(
        zip(
            ("block", "tp", "sp", "cp", "ep", "etp", "mbs"),
            trace.shape.key(trace.block),
            strict=True,
        )
    )
    row.update(trace.memory.as_row())
    passes = phase_times_us(trace.fwd_ops + trace.bwd_ops, hardware)
    row.update(
        fwd_us=round(passes["fwd"]),
        bwd_us=round(passes["bwd"]),
        fwd_us_spread=0,
        bwd_us_spread=0,
        # Selective recompute reruns the core attention forward inside backward.
        selective_recompute_us=round(phase_times_us(trace.core_ops, hardware)["fwd"]),
        # Every traced aten op is one the host issues (costs/fixed_costs.py).
        fwd_host_ops=len(trace.fwd_ops),
        bwd_host_ops=len(trace.bwd_ops),
        status="ok",
    )
    return row


def blocks_frame(traces: list[BlockTrace], hardware: HardwareSpec) -> pd.DataFrame:
    """blocks.csv of the traces on `hardware`; re-timing cached traces costs milliseconds."""
    return pd.DataFrame([block_row(t, hardware) for t in traces], columns=list(BLOCK_COLUMNS))


def trace_space(
    model: ModelSpec,
    points: list[ProfilePoint],
    *,
    workers: int = 1,
    progress: Progress | None = None,
    log: Log | None = None,
) -> list[BlockTrace]:
    """Trace every point of the profile space (the hardware-independent part, about 0.05 s a row),
    in `workers` processes when there are enough points (`MIN_POINTS_PER_WORKER` each)."""
    work = functools.partial(_timed_trace, model)
    return _logged(points, _each_point(work, points, workers), progress, log)


def space_rows(
    model: ModelSpec,
    points: list[ProfilePoint],
    hardware: HardwareSpec,
    *,
    workers: int = 1,
    progress: Progress | None = None,
    log: Log | None = None,
) -> pd.DataFrame:
    """blocks.csv of the points on `hardware`: `blocks_frame(trace_space(...))`, each row timed
    where it is traced, so that a worker sends back its row rather than its ops (pickling the
    traces of DeepSeek-V3's 316 rows, 8 MB, cost more CPU than timing them)."""
    work = functools.partial(_timed_row, model, hardware)
    rows = _logged(points, _each_point(work, points, workers), progress, log)
    return pd.DataFrame(rows, columns=list(BLOCK_COLUMNS))


def _logged(
    points: list[ProfilePoint], results: Iterator[tuple[T, float]], progress, log
) -> list[T]:
    """The results in order, each point's tracing time logged and its progress reported."""
    values = []
    for index, (point, (value, seconds)) in enumerate(zip(points, results, strict=True), start=1):
        values.append(value)
        if log:
            log(f"traced {point.label} in {seconds:.3f} s")
        if progress:
            progress(index, len(points), point.label)
    return values


MIN_POINTS_PER_WORKER = 16
"""A worker process pays for its fork and fills its own memo of meta kernels (cpu_on_meta.py):
fewer workers below this many points each."""


def _timed_trace(model: ModelSpec, point: ProfilePoint) -> tuple[BlockTrace, float]:
    started = time.perf_counter()
    return trace_block(model, point.block, point.shape), time.perf_counter() - started


def _timed_row(model: ModelSpec, hardware: HardwareSpec, point: ProfilePoint) -> tuple[dict, float]:
    trace, seconds = _timed_trace(model, point)
    return block_row(trace, hardware), seconds


def _each_point(
    work: Callable[[ProfilePoint], T], points: list[ProfilePoint], workers: int
) -> Iterator[T]:
    """`work` of each point in order: here, or in forked worker processes. The first point runs
    here before the fork, so the workers inherit what a first trace loads once (torch._dynamo,
    which torch's meta kernels import on first use, about a second) and its memoised meta kernels;
    a worker takes neighbouring points, which share most ops' shapes."""
    workers = min(workers, len(points) // MIN_POINTS_PER_WORKER)
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield from map(work, points)
        return
    yield work(points[0])
    chunk = max(1, (len(points) - 1) // (4 * workers))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        yield from pool.imap(work, points[1:], chunksize=chunk)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS tells it)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def analytic_meta(
    model: ModelSpec,
    hardware: HardwareSpec,
    limits: SpaceLimits,
    num_rows: int,
    started: str,
    seconds: float,
) -> ProfileMeta:
    """meta.json of an analytic profile (the measured profile's fields), with the description used."""
    return ProfileMeta(
        tool="tinker-opt",
        format_version=1,
        model=model.to_dict(),
        device={"kind": "analytic", "name": DEVICE_PREFIX + hardware.name, "count": limits.max_npu},
        hardware=hardware.to_dict(),
        versions={
            "tinker_opt": tinker_opt.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        settings=dataclasses.asdict(limits),
        comm_source=f"hardware description {hardware.name}",
        started=started,
        finished=datetime.now().isoformat(timespec="seconds"),
        profile_seconds=round(seconds, 1),
        rows={"total": num_rows, "ok": num_rows, "oom": 0, "failed": 0},
    )


def write_analytic_folder(
    out_dir: Path,
    blocks: pd.DataFrame,
    hardware: HardwareSpec,
    meta: ProfileMeta,
    log_lines: list[str],
) -> Path:
    """Write blocks.csv, comm.csv (from the description), meta.json and profile.log into out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_blocks_csv(out_dir, blocks)
    write_comm_csv(out_dir, comm_table(hardware, max_group_size=COMM_MAX_GROUP))
    write_meta(out_dir, meta)
    write_text_atomic(out_dir / LOG_FILE, "".join(line + "\n" for line in log_lines))
    return out_dir


def analytic_profile(
    model: ModelSpec,
    hardware: HardwareSpec,
    out_dir: Path,
    *,
    limits: SpaceLimits,
    workers: int = 1,
    progress: Progress | None = None,
    log: Log | None = None,
) -> Path:
    """Write a profiled-data folder for `model` on `hardware` without the hardware (seconds, any size).

    The profile space is the measured profile's (space.profile_space over `limits`), traced in
    up to `workers` processes."""
    started, clock = datetime.now().isoformat(timespec="seconds"), time.perf_counter()
    lines: list[str] = []

    def record(line: str) -> None:
        lines.append(line)
        if log:
            log(line)

    record(
        f"analytic profile of {model.num_layers} layers on {DEVICE_PREFIX}{hardware.name} into {out_dir}"
    )
    points = profile_space(model, limits)
    blocks = space_rows(model, points, hardware, workers=workers, progress=progress, log=record)
    seconds = time.perf_counter() - clock
    record(f"done in {seconds:.1f} s: {len(blocks)} rows")
    meta = analytic_meta(model, hardware, limits, len(blocks), started, seconds)
    return write_analytic_folder(Path(out_dir), blocks, hardware, meta, lines)
