"""`MeasureSettings`: how the measuring profiler runs (profile/runner.py, rows.py, workers.py).

The `profile` verb's settings (config.ProfileSettings, whose defaults are the only ones) plus the
knobs the command line does not expose and the script's fused-kernel flags. A worker process
(workers.py) gets them back from `dataclasses.asdict` through `from_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tinker_opt.config import ProfileSettings
from tinker_opt.errors import ConfigError
from tinker_opt.profile.device import Device
from tinker_opt.profile.kernels import FLAG_OPS
from tinker_opt.profile.space import SpaceLimits
from tinker_opt.specs import DEFAULT_DEVICES_PER_NODE, TrainSpec

BLOCK_SOURCES = ("reference", "megatron-core")
CPU_MEMORY_FRACTION = 0.5
"""On the CPU, rows predicted to need more than this share of the available memory count as `oom`."""
MIB = 2**20


@dataclass(frozen=True, kw_only=True)
class MeasureSettings:
    """How to measure: the `profile` settings plus the knobs the command line does not expose,
    which default here."""

    device: str
    """auto | npu | cuda | cpu"""
    max_npu: int
    """Largest tensor-parallel size to profile (devices per node); the script's own tp and prof_tp
    multiples of it are profiled too (tensor parallelism across nodes)."""
    max_mbs: int
    """Largest micro-batch size; 1, 2, 4, ... up to it (and the script's own) are profiled."""
    warmup: int
    """Untimed passes before the timed ones (the memory pass counts as the first)."""
    repeats: int
    """Timed forward + backward passes per row (the median is kept); at least 5."""
    prof_tp: tuple[int, ...] | None = None
    prof_sp: tuple[int, ...] | None = None
    tp_nodes: int = 1
    """Largest number of nodes one tensor-parallel group may span: tp = max_npu x 2, 4, ... up
    to it are profiled (and so searched) where the model allows them; 1 keeps tp within a node."""
    max_ep: int | None = None
    """Largest expert-parallel size to profile (None: num_experts; the script's own ep is always profiled)."""
    hardware: str | None = None
    """A hardware description (shipped name or JSON file): comm.csv is computed from it."""
    prof_cp: tuple[int, ...] | None = None
    """Context-parallel sizes beyond 1 (default: the script's cp when > 1)."""
    prof_ep: tuple[int, ...] | None = None
    """Expert-parallel sizes to profile (default: every divisor of num_experts up to max_ep, and the script's)."""
    prof_etp: tuple[int, ...] | None = None
    """Expert tensor-parallel sizes beyond 1 and tp (always profiled; tp is Megatron's default) and the script's."""
    selective: bool = True
    """Also measure selective (core attention) recompute of the layers."""
    comm: str = "measure"
    """measure | skip: the communication profile (ignored when `hardware` is given)."""
    comm_procs: int | None = None
    """Processes of the communication profile; None: the workers (several), 2 on cpu, else 1."""
    comm_max_bytes: int | None = None
    """Largest buffer; None: 256 MiB on npu / cuda, 16 MiB on cpu."""
    comm_repeats: int = 5
    memory_limit_mb: float | None = None
    """Rows predicted to need more are `oom`; None: the device memory (cpu: half of what is free)."""
    kernel_flags: tuple[str, ...] = ()
    """The script's fused-kernel flags (kernels.FLAG_OPS): each op runs the device's fused kernel."""
    devices: int | None = None
    """Worker processes, one per local device (None: every device; 1 on the CPU)."""
    blocks: str = "reference"
    """Where the decoder layers come from: `reference` (subgraphs.py) or `megatron-core` (mcore_blocks.py)."""

    def __post_init__(self) -> None:
        unknown = [f for f in self.kernel_flags if f not in FLAG_OPS]
        if unknown:
            raise ConfigError(f"unknown fused-kernel flag(s) {unknown}; known: {sorted(FLAG_OPS)}")
        if self.devices is not None and self.devices < 1:
            raise ConfigError(f"devices must be >= 1, got {self.devices}")
        if self.blocks not in BLOCK_SOURCES:
            raise ConfigError(f"blocks must be one of {list(BLOCK_SOURCES)}, got {self.blocks!r}")
        if self.repeats < 5:
            raise ConfigError(
                f"repeats must be at least 5 (a median of fewer is noise), got {self.repeats}"
            )
        if self.max_ep is not None and self.max_ep < 1:
            raise ConfigError(
                f"max_ep must be >= 1 (or unset for every divisor of num_experts), got {self.max_ep}"
            )
        if self.warmup < 0 or self.max_npu < 1 or self.max_mbs < 1:
            raise ConfigError(
                f"warmup >= 0, max_npu >= 1 and max_mbs >= 1 are needed, got {self.warmup}, "
                f"{self.max_npu}, {self.max_mbs}"
            )
        if self.comm not in ("measure", "skip"):
            raise ConfigError(f"comm must be 'measure' or 'skip', got {self.comm!r}")
        if self.comm_procs is not None and self.comm_procs < 1:
            raise ConfigError(f"comm_procs must be >= 1, got {self.comm_procs}")

    @classmethod
    def from_settings(cls, settings: ProfileSettings, **extra: Any) -> MeasureSettings:
        """The measuring part of the `profile` settings; `extra` sets the knobs not on the command
        line (the `profile` verb passes the script's `kernel_flags`)."""
        return cls(
            device=settings.device,
            max_npu=settings.max_npu or DEFAULT_DEVICES_PER_NODE,
            max_mbs=settings.max_mbs,
            warmup=settings.warmup,
            repeats=settings.repeats,
            prof_tp=settings.prof_tp,
            prof_sp=settings.prof_sp,
            tp_nodes=settings.tp_nodes,
            max_ep=settings.max_ep,
            hardware=settings.hardware,
            devices=settings.devices,
            blocks=settings.blocks,
            **extra,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MeasureSettings:
        """MeasureSettings back from `dataclasses.asdict` (JSON lists become tuples)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})

    def memory_budget_bytes(self, device: Device) -> float:
        """Rows predicted to need more than this are `oom`."""
        if self.memory_limit_mb is not None:
            return self.memory_limit_mb * MIB
        total = device.total_memory_bytes()
        return total * CPU_MEMORY_FRACTION if device.kind == "cpu" else total

    def num_workers(self, device: Device) -> int:
        """Processes that profile at once: `devices`, checked against the device count (cpu: any)."""
        wanted = self.devices if self.devices is not None else device.count
        if device.kind != "cpu" and wanted > device.count:
            raise ConfigError(
                f"--devices {wanted}, but this node has {device.count} {device.kind} device(s); "
                f"pass --devices {device.count} or fewer"
            )
        return wanted

    def _tp_across(self) -> tuple[int, ...]:
        """Tensor-parallel sizes over 2, 4, ... whole nodes, up to tp_nodes (across nodes)."""
        return tuple(self.max_npu * 2**i for i in range(1, 12) if 2**i <= self.tp_nodes)

    def limits(self, train: TrainSpec | None) -> SpaceLimits:
        """The profile space these settings (and the script's own strategy) ask for."""
        strategy = train.strategy if train is not None else None
        # The script's cp and its power-of-two divisors: a long-context script written for more
        # nodes (cp 32 on 4 nodes) can then be searched with a smaller cp on fewer.
        cp = set(self.prof_cp or ()) | (
            {c for c in (2**i for i in range(1, 12)) if strategy.cp % c == 0} | {strategy.cp}
            if strategy and strategy.cp > 1
            else set()
        )
        etp = set(self.prof_etp or ()) | ({strategy.etp} if strategy and strategy.etp else set())
        return SpaceLimits(
            max_npu=self.max_npu,
            max_mbs=self.max_mbs,
            prof_tp=self.prof_tp,
            prof_sp=self.prof_sp,
            extra_tp=((strategy.tp,) if strategy and strategy.tp > 1 else ()) + self._tp_across(),
            prof_cp=tuple(sorted(cp)) or None,
            prof_ep=self.prof_ep,
            max_ep=self.max_ep,
            extra_ep=(strategy.ep,) if strategy and strategy.ep > 1 else (),
            prof_etp=tuple(sorted(etp)) or None,
            extra_mbs=(train.micro_batch_size,) if train is not None else (),
        )
