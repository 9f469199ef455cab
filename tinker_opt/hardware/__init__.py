"""Hardware descriptions: device compute and memory, intra-node link and inter-node network.

Shipped descriptions live beside this file as `<name>.json`; a user may pass their own file.
Schema (every figure carries its source in `sources`, or is listed in `assumptions`):

    {"name": str, "devices_per_node": int, "memory_gb": float,
     "peak_tflops": {"bf16": float, "fp16": float, "fp32": float,
                     "fp8": float},                                 # fp8 only where the device has it
     "memory_bandwidth_gbs": float,
     "host_link_gbs": float,                                        # optional, device<->host copy
     "intra_node": {"bandwidth_gbs": float, "latency_us": float},   # per device, one direction,
     "inter_node": {"bandwidth_gbs": float, "latency_us": float},   # achievable (efficiency applied)
     "efficiency": {"matmul": CURVE, "memory": CURVE, "notes": [...],
                    "matmul_fp8": CURVE},                           # optional: FP8 GEMMs (of fp8 peak)
     "sources": [...], "assumptions": [...]}

    CURVE = {"max_efficiency": float, "half_size": float}      # eff(x) = max * x / (x + half)
          | {"points": [[size, efficiency], ...]}              # log-linear table

The efficiency curves (tinker_opt/hardware/efficiency.py) drive the analytic device: matmul
efficiency versus the op's FLOPs, memory-bandwidth efficiency versus the bytes an op moves. A
missing `efficiency` entry takes the defaults of `DeviceEfficiency` (an assumption).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tinker_opt.comm_cost import COMM_OPS, collective_time_us
from tinker_opt.errors import ConfigError
from tinker_opt.hardware.efficiency import DeviceEfficiency, EfficiencyCurve

__all__ = [
    "DeviceEfficiency",
    "EfficiencyCurve",
    "HardwareSpec",
    "LinkSpec",
    "comm_table",
    "load_hardware",
    "shipped_hardware",
]

HARDWARE_DIR = Path(__file__).parent
DEFAULT_HOST_LINK_GBS = 25.0
"""Device<->host copy bandwidth per device and direction when a hardware file gives none.
ASSUMPTION: a PCIe 4.0/5.0 x16 class link (32/64 GB/s peak) shared by the devices on its switch,
about 25 GB/s achieved per device; used only for `--swap-optimizer` traffic."""
DEFAULT_COMM_SIZES = tuple(64 * 1024 * 4**i for i in range(7))
"""64 KiB ... 256 MiB, the sizes the measured communication profile uses too."""


@dataclass(frozen=True)
class LinkSpec:
    """One level of the network, per device and direction, as achieved (not the datasheet peak)."""

    bandwidth_gbs: float
    latency_us: float

    def __post_init__(self) -> None:
        if self.bandwidth_gbs <= 0 or self.latency_us < 0:
            raise ConfigError(
                f"link bandwidth must be > 0 and latency >= 0, got {self.bandwidth_gbs}, {self.latency_us}"
            )


@dataclass(frozen=True)
class HardwareSpec:
    """A device and its cluster network."""

    name: str
    devices_per_node: int
    memory_gb: float
    peak_tflops: dict[str, float]
    memory_bandwidth_gbs: float
    intra_node: LinkSpec
    inter_node: LinkSpec
    efficiency: DeviceEfficiency = field(default_factory=DeviceEfficiency)
    host_link_gbs: float = DEFAULT_HOST_LINK_GBS
    """Achieved device<->host copy bandwidth per device and direction (swap-optimizer traffic)."""
    sources: list[Any] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.efficiency, dict):  # accept the JSON form as well
            object.__setattr__(self, "efficiency", DeviceEfficiency.from_dict(self.efficiency))
        if (
            self.memory_bandwidth_gbs <= 0
            or not self.peak_tflops
            or min(self.peak_tflops.values()) <= 0
        ):
            raise ConfigError(
                f"hardware '{self.name}' needs memory_bandwidth_gbs > 0 and positive peak_tflops, got "
                f"{self.memory_bandwidth_gbs} and {self.peak_tflops}"
            )
        if self.host_link_gbs <= 0:
            raise ConfigError(
                f"hardware '{self.name}' needs host_link_gbs > 0, got {self.host_link_gbs}"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "hardware file") -> HardwareSpec:
        required = (
            "name",
            "devices_per_node",
            "memory_gb",
            "peak_tflops",
            "memory_bandwidth_gbs",
            "intra_node",
            "inter_node",
        )
        missing = [key for key in required if key not in data]
        if missing:
            raise ConfigError(
                f"{origin} lacks key(s) {missing}; see the schema in tinker_opt/hardware/__init__.py"
            )
        try:
            return cls(
                name=str(data["name"]),
                devices_per_node=int(data["devices_per_node"]),
                memory_gb=float(data["memory_gb"]),
                peak_tflops={k: float(v) for k, v in data["peak_tflops"].items()},
                memory_bandwidth_gbs=float(data["memory_bandwidth_gbs"]),
                intra_node=LinkSpec(**data["intra_node"]),
                inter_node=LinkSpec(**data["inter_node"]),
                efficiency=DeviceEfficiency.from_dict(data.get("efficiency", {}), origin),
                host_link_gbs=float(data.get("host_link_gbs", DEFAULT_HOST_LINK_GBS)),
                sources=list(data.get("sources", [])),
                assumptions=list(data.get("assumptions", [])),
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(
                f"{origin} has a malformed entry ({exc}); see the schema in tinker_opt/hardware/__init__.py"
            ) from None

    def link(self, scope: str) -> LinkSpec:
        return self.intra_node if scope == "intra_node" else self.inter_node

    def peak_flops_per_us(self, precision: str) -> float:
        """Peak matrix FLOPs per microsecond in a precision (`bf16`, `fp16`, `fp32`); 1 TFLOP/s = 1e6 /us.

        A precision the file does not list takes the slowest listed figure for fp32 and the
        fastest for the 16-bit formats; FP8 only where the file gives its rate (`check_fp8`)."""
        if precision in self.peak_tflops:
            return self.peak_tflops[precision] * 1e6
        if precision == "fp8":
            self.check_fp8()
        pick = min if precision == "fp32" else max
        return pick(self.peak_tflops.values()) * 1e6

    @property
    def has_fp8(self) -> bool:
        """The device has FP8 tensor cores: the description lists `peak_tflops.fp8`."""
        return "fp8" in self.peak_tflops

    def check_fp8(self) -> None:
        """ConfigError (one line) when FP8 training is asked of a device without an FP8 rate."""
        if not self.has_fp8:
            raise ConfigError(
                f"hardware '{self.name}' has no FP8 rate (peak_tflops.fp8 in its description): "
                "FP8 training (--fp8-format) needs a device with FP8 tensor cores (H100 and later)"
            )

    @property
    def memory_bytes_per_us(self) -> float:
        """Peak memory bandwidth in bytes per microsecond (1 GB/s = 1e3 B/us)."""
        return self.memory_bandwidth_gbs * 1e3

    def to_dict(self) -> dict[str, Any]:
        """The JSON form `load_hardware` reads back."""
        return {
            "name": self.name,
            "devices_per_node": self.devices_per_node,
            "memory_gb": self.memory_gb,
            "peak_tflops": dict(self.peak_tflops),
            "memory_bandwidth_gbs": self.memory_bandwidth_gbs,
            "host_link_gbs": self.host_link_gbs,
            "intra_node": dataclasses.asdict(self.intra_node),
            "inter_node": dataclasses.asdict(self.inter_node),
            "efficiency": self.efficiency.to_dict(),
            "sources": list(self.sources),
            "assumptions": list(self.assumptions),
        }


def shipped_hardware() -> list[str]:
    """Names of the descriptions shipped with the package."""
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.json"))


def load_hardware(name_or_path: str | Path) -> HardwareSpec:
    """Load a shipped description by name (`a100-80gb`) or a user's JSON file by path."""
    path = Path(name_or_path)
    if not path.exists():
        path = HARDWARE_DIR / f"{name_or_path}.json"
    if not path.exists():
        raise ConfigError(
            f"unknown hardware '{name_or_path}': not a file and not one of {shipped_hardware()}"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"hardware file {path} is not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    return HardwareSpec.from_dict(data, origin=f"hardware file {path}")


def comm_table(
    hardware: HardwareSpec, *, max_group_size: int, sizes: tuple[int, ...] = DEFAULT_COMM_SIZES
) -> pd.DataFrame:
    """comm.csv rows (op, group_size, scope, bytes, time_us) computed from the description.

    Inter-node rows for every group size up to max_group_size (tensor, data or expert groups
    that span nodes); intra-node rows only for groups that fit in one node (devices_per_node)."""
    rows = []
    for scope in ("intra_node", "inter_node"):
        link = hardware.link(scope)
        largest = max(max_group_size, 2)
        if scope == "intra_node":
            largest = min(largest, max(hardware.devices_per_node, 2))
        for op in COMM_OPS:
            groups = (
                [2] if op == "send_recv" else [g for g in (2, 4, 8, 16, 32, 64) if g <= largest]
            )
            for group in groups:
                for nbytes in sizes:
                    time_us = collective_time_us(
                        op, group, nbytes, link.bandwidth_gbs, link.latency_us
                    )
                    rows.append((op, group, scope, nbytes, round(time_us, 3)))
    return pd.DataFrame(rows, columns=["op", "group_size", "scope", "bytes", "time_us"])
