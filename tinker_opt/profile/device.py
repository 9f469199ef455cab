"""The device layer: npu (torch_npu), cuda or cpu behind one small interface.

Synchronise, time a region (device events on npu / cuda, `perf_counter` after synchronising on
cpu), allocator statistics where the device has them, recognise out-of-memory errors. torch_npu
is imported here only, and only when it is installed and a device is present.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from tinker_opt.errors import ConfigError

DEVICE_KINDS = ("auto", "npu", "cuda", "cpu")
_OOM_MARKERS = ("out of memory", "can't allocate memory", "not enough memory", "allocation failed")


def _npu_module() -> ModuleType | None:
    """torch.npu when torch_npu imports and sees a device, else None."""
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
    except Exception:  # not installed, or a broken CANN install: no npu
        return None
    module = getattr(torch, "npu", None)
    try:
        return (
            module
            if module is not None and module.is_available() and module.device_count() > 0
            else None
        )
    except Exception:
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def available_memory_bytes() -> int:
    """Host memory available now (MemAvailable), for the CPU's memory budget."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


@dataclass(frozen=True)
class Device:
    """One compute device and the operations the measurements need."""

    kind: str
    """npu | cuda | cpu"""
    torch_device: torch.device
    name: str
    count: int
    """Devices of this kind on the node (the CPU counts as one)."""

    @property
    def api(self) -> ModuleType | None:
        """torch.cuda / torch.npu, None on cpu."""
        return None if self.kind == "cpu" else getattr(torch, self.kind)

    @property
    def has_allocator_stats(self) -> bool:
        return self.api is not None

    @property
    def comm_backend(self) -> str:
        return {"npu": "hccl", "cuda": "nccl"}.get(self.kind, "gloo")

    def synchronize(self) -> None:
        if self.api is not None:
            self.api.synchronize(self.torch_device)

    def start_timer(self):
        """Begin a timed region; pass the token to `stop_timer`."""
        if self.api is None:
            return time.perf_counter()
        start, end = self.api.Event(enable_timing=True), self.api.Event(enable_timing=True)
        start.record()
        return start, end

    def stop_timer(self, token) -> float:
        """Microseconds since `start_timer` (waits for the device)."""
        if self.api is None:
            return (time.perf_counter() - token) * 1e6
        start, end = token
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3

    def reset_peak_memory(self) -> None:
        if self.api is not None:
            self.api.reset_peak_memory_stats(self.torch_device)

    def allocated_bytes(self) -> int:
        return int(self.api.memory_allocated(self.torch_device)) if self.api is not None else 0

    def peak_allocated_bytes(self) -> int:
        return int(self.api.max_memory_allocated(self.torch_device)) if self.api is not None else 0

    def total_memory_bytes(self) -> int:
        """Device memory (npu / cuda), or the host memory available now (cpu)."""
        if self.api is None:
            return available_memory_bytes()
        return int(self.api.get_device_properties(self.torch_device).total_memory)

    def empty_cache(self) -> None:
        if self.api is not None:
            self.api.empty_cache()

    @staticmethod
    def is_oom(error: BaseException) -> bool:
        """Out-of-memory on any device (torch.OutOfMemoryError, MemoryError or the allocator's message)."""
        if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
            return True
        return isinstance(error, RuntimeError) and any(
            m in str(error).lower() for m in _OOM_MARKERS
        )


def _accelerator(kind: str, api: ModuleType) -> Device:
    index = api.current_device()
    return Device(
        kind=kind,
        torch_device=torch.device(kind, index),
        name=str(api.get_device_name(index)),
        count=int(api.device_count()),
    )


def detect_device(requested: str = "auto") -> Device:
    """The device to profile on: `auto` prefers npu, then cuda, then cpu."""
    if requested not in DEVICE_KINDS:
        raise ConfigError(f"device must be one of {DEVICE_KINDS}, got {requested!r}")
    if requested in ("auto", "npu"):
        npu = _npu_module()
        if npu is not None:
            return _accelerator("npu", npu)
        if requested == "npu":
            raise ConfigError(
                "--device npu: torch_npu is not installed or sees no NPU; install torch_npu or use --device cpu"
            )
    if requested in ("auto", "cuda"):
        if torch.cuda.is_available():
            return _accelerator("cuda", torch.cuda)
        if requested == "cuda":
            raise ConfigError(
                "--device cuda: torch sees no CUDA device; use --device cpu or install a CUDA build of torch"
            )
    return Device(kind="cpu", torch_device=torch.device("cpu"), name=_cpu_name(), count=1)
