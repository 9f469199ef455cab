"""Hardware descriptions: device compute and memory, intra-node link and inter-node network.

Shipped descriptions live beside this file as `<name>.json`; a user may pass their own file.
Schema (every figure carries its source in `sources`, or is listed in `assumptions`):

    {"name": str, "devices_per_node": int, "memory_gb": float,
     "peak_tflops": {"bf16": float, "fp16": float, "fp32": float},
     "memory_bandwidth_gbs": float,
     "intra_node": {"bandwidth_gbs": float, "latency_us": float},   # per device, one direction,
     "inter_node": {"bandwidth_gbs": float, "latency_us": float},   # achievable (efficiency applied)
     "efficiency": {...},          # compute / memory efficiency curves of the analytic device
     "sources": [...], "assumptions": [...]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tinker_opt.comm_cost import COMM_OPS, collective_time_us
from tinker_opt.errors import ConfigError

HARDWARE_DIR = Path(__file__).parent
DEFAULT_COMM_SIZES = tuple(64 * 1024 * 4**i for i in range(7))
"""64 KiB ... 256 MiB, the sizes the measured communication profile uses too."""


@dataclass(frozen=True)
class LinkSpec:
    """One level of the network, per device and direction, as achieved (not the datasheet peak)."""

    bandwidth_gbs: float
    latency_us: float

    def __post_init__(self) -> None:
        if self.bandwidth_gbs <= 0 or self.latency_us < 0:
            raise ConfigError(f"link bandwidth must be > 0 and latency >= 0, got {self.bandwidth_gbs}, {self.latency_us}")


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
    efficiency: dict[str, Any] = field(default_factory=dict)
    sources: list[Any] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "hardware file") -> "HardwareSpec":
        required = ("name", "devices_per_node", "memory_gb", "peak_tflops", "memory_bandwidth_gbs",
                    "intra_node", "inter_node")
        missing = [key for key in required if key not in data]
        if missing:
            raise ConfigError(f"{origin} lacks key(s) {missing}; see the schema in tinker_opt/hardware/__init__.py")
        try:
            return cls(
                name=str(data["name"]), devices_per_node=int(data["devices_per_node"]),
                memory_gb=float(data["memory_gb"]), peak_tflops={k: float(v) for k, v in data["peak_tflops"].items()},
                memory_bandwidth_gbs=float(data["memory_bandwidth_gbs"]),
                intra_node=LinkSpec(**data["intra_node"]), inter_node=LinkSpec(**data["inter_node"]),
                efficiency=dict(data.get("efficiency", {})), sources=list(data.get("sources", [])),
                assumptions=list(data.get("assumptions", [])))
        except (TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{origin} has a malformed entry ({exc}); see the schema in tinker_opt/hardware/__init__.py") from None

    def link(self, scope: str) -> LinkSpec:
        return self.intra_node if scope == "intra_node" else self.inter_node


def shipped_hardware() -> list[str]:
    """Names of the descriptions shipped with the package."""
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.json"))


def load_hardware(name_or_path: str | Path) -> HardwareSpec:
    """Load a shipped description by name (`a100-80gb`) or a user's JSON file by path."""
    path = Path(name_or_path)
    if not path.exists():
        path = HARDWARE_DIR / f"{name_or_path}.json"
    if not path.exists():
        raise ConfigError(f"unknown hardware '{name_or_path}': not a file and not one of {shipped_hardware()}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"hardware file {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return HardwareSpec.from_dict(data, origin=f"hardware file {path}")


def comm_table(hardware: HardwareSpec, *, max_group_size: int,
               sizes: tuple[int, ...] = DEFAULT_COMM_SIZES) -> pd.DataFrame:
    """comm.csv rows (op, group_size, scope, bytes, time_us) computed from the description."""
    rows = []
    for scope in ("intra_node", "inter_node"):
        link = hardware.link(scope)
        for op in COMM_OPS:
            groups = [2] if op == "send_recv" else [g for g in (2, 4, 8, 16, 32, 64) if g <= max(max_group_size, 2)]
            for group in groups:
                for nbytes in sizes:
                    time_us = collective_time_us(op, group, nbytes, link.bandwidth_gbs, link.latency_us)
                    rows.append((op, group, scope, nbytes, round(time_us, 3)))
    return pd.DataFrame(rows, columns=["op", "group_size", "scope", "bytes", "time_us"])
