"""Hardware descriptions: device compute and memory, intra-node link and inter-node network.

Shipped descriptions live beside this file as `<name>.json`; a user may pass their own file.
Schema (every figure carries its source in `sources`, or is listed in `assumptions`):

    {"name": str, "devices_per_node": int, "memory_gb": float,
     "peak_tflops": {"bf16": float, "fp16": float, "fp32": float,
                     "fp8": float},                                 # fp8 only where the device has it
     "memory_bandwidth_gbs": float,
     "host_link_gbs": float,                                        # optional, device<->host copy
     "host_op_us": float,                    # optional: host time to issue one eager operator
     "intra_node": {"bandwidth_gbs": float, "latency_us": float},   # per device, one direction,
     "inter_node": {"bandwidth_gbs": float, "latency_us": float},   # achievable (efficiency applied)
                   # a link may add "ops": {op: {"bandwidth_gbs", "latency_us"}} (calibrate --comm),
                   # an op its smaller-size regimes: "small": [{"below_bytes", "bandwidth_gbs", "latency_us"}]
     "efficiency": {"matmul": CURVE, "memory": CURVE, "notes": [...],
                    "matmul_fp8": CURVE},                           # optional: FP8 GEMMs (of fp8 peak)
     "nics_per_node": int,                                          # optional, network tiers below
     "domain": {"size": int, "bandwidth_gbs": float, "latency_us": float},   # optional
     "collectives": "nccl" | "hccl" | "rccl",                       # optional, default nccl
     "fused_attention": bool,                       # optional, default true: TE's fused attention
     "deterministic_attention_bwd": float,          # optional: --deterministic-mode's backward factor
     "fixed_ms_per_microbatch": float,              # optional, default 0: fitted by calibrate --log
     "sources": [...], "assumptions": [...]}

    CURVE = {"max_efficiency": float, "half_size": float}      # eff(x) = max * x / (x + half)
          | {"points": [[size, efficiency], ...]}              # log-linear table

The efficiency curves (hardware/efficiency.py) drive the analytic device: matmul efficiency versus
an op's FLOPs, memory-bandwidth efficiency versus the bytes an op moves. A missing `efficiency`
entry takes the defaults of `DeviceEfficiency` (an assumption).

Network tiers (Calculon's systems files: one link per level of the network): within a node
(`intra_node`, per device), within the high-bandwidth domain (`domain`: an NVLink / UB domain of
`size` devices that may span nodes, per device; default: the node, with the intra-node link) and
across domains (`inter_node`: one network card, `nics_per_node` of them per node, default one per
device). `collectives` names the library whose algorithms price a group that leaves the node
(tinker_opt/comm_cost.py). Files without the optional keys load as before: domain = node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_opt.errors import ConfigError
from tinker_opt.hardware.comm_rows import COMM_MAX_GROUP, comm_columns, comm_table
from tinker_opt.hardware.efficiency import DeviceEfficiency, EfficiencyCurve
from tinker_opt.hardware.links import LinkSpec, link_dict

__all__ = [
    "COMM_MAX_GROUP",
    "DeviceEfficiency",
    "EfficiencyCurve",
    "HardwareSpec",
    "LinkSpec",
    "comm_columns",
    "comm_table",
    "load_hardware",
    "shipped_hardware",
    "write_hardware_json",
]

HARDWARE_DIR = Path(__file__).parent
DEFAULT_HOST_OP_US = 15.0
"""Host time to issue one operator of an eager PyTorch training step (Python, the dispatcher,
autograd, the kernel launch) when a hardware file gives none (costs/fixed_costs.py). Holistic
Trace Analysis gives the CPU cost of a kernel launch as "usually between 5-20 microseconds"
(facebookresearch/HolisticTraceAnalysis docs/source/features/cuda_kernel_launch_stats.rst).
ASSUMPTION: 15 us, in the upper half of that range, since Megatron's Python layer code (module
calls, autograd functions, the RNG tracker) runs around each operator. Check: vTrain's
Megatron-DeepSpeed GPT layer on A100 (hidden 1024, tp 1, micro-batch 1, full recompute: 210
traced operators per layer and micro-batch) takes ~3.3 ms per layer and micro-batch where its GPU
work is ~1.5 ms (benchmarks/data/vtrain_ground_truth_single.csv, 8 GPUs, global batch 128, micro-batch
1 against 4): ~16 us per operator. The one figure a calibration from logs scales."""
DEFAULT_HOST_LINK_GBS = 25.0
"""Device<->host copy bandwidth per device and direction when a hardware file gives none.
ASSUMPTION: a PCIe 4.0/5.0 x16 class link (32/64 GB/s peak) shared by the devices on its switch,
about 25 GB/s achieved per device; used only for `--swap-optimizer` traffic."""
COLLECTIVE_LIBRARIES = ("nccl", "hccl", "rccl")
"""Libraries whose algorithms comm_cost.spanning_time_us models (NCCL on NVIDIA GPUs, HCCL on
Ascend, RCCL on AMD Instinct: NCCL's source ported to ROCm, ROCm/rccl README.md, priced with
NCCL's algorithms)."""


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
    host_op_us: float | None = None
    """Host (CPU) time to issue one eager PyTorch operator: Python, dispatcher and launch
    (costs/fixed_costs.py, costs/moe_host.py); None: the file states none, DEFAULT_HOST_OP_US
    applies."""
    nics_per_node: int | None = None
    """Network cards per node, each `inter_node` fast; None: one per device."""
    domain_size: int | None = None
    """Devices in one high-bandwidth domain (may span nodes); None: one node."""
    intra_domain: LinkSpec | None = None
    """Link per device between nodes of one domain; None: the intra-node link."""
    collectives: str = "nccl"
    """The collective library (COLLECTIVE_LIBRARIES) whose algorithms price groups across nodes."""
    fused_attention: bool = True
    """Transformer Engine's FlashAttention / cuDNN fused attention run here (sm80+); False: TE
    falls back to unfused attention, which keeps the s x s scores (V100)."""
    deterministic_attention_bwd: float | None = None
    """The fused attention backward's time under `--deterministic-mode` per unit of its
    non-deterministic time (costs/deterministic.py); None: the file states none, that module's
    DEFAULT_FACTOR (Hopper's, from FlashAttention-3) applies."""
    fixed_ms_per_microbatch: float = 0.0
    """Host / latency time per micro-batch and pipeline stage that does not shrink with the work
    (launches, data loading, schedule bookkeeping): 0 in the shipped descriptions; `calibrate
    --log` fits it from two or more logs of jobs of different size (verbs/calibrate_log.py) and
    the cost model adds it to every stage's micro-batch time (costs/stage_terms.py)."""
    sources: list[Any] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._check_network()
        if self.fixed_ms_per_microbatch < 0:
            raise ConfigError(
                f"hardware '{self.name}' needs fixed_ms_per_microbatch >= 0, got "
                f"{self.fixed_ms_per_microbatch}"
            )
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
        if self.deterministic_attention_bwd is not None and self.deterministic_attention_bwd < 1:
            raise ConfigError(
                f"hardware '{self.name}' needs deterministic_attention_bwd >= 1, got "
                f"{self.deterministic_attention_bwd}"
            )
        if self.host_op_us is not None and self.host_op_us < 0:
            raise ConfigError(
                f"hardware '{self.name}' needs host_op_us >= 0, got {self.host_op_us}"
            )

    def _check_network(self) -> None:
        """The optional network tiers: positive counts, a domain of whole nodes, a known library."""
        if self.collectives not in COLLECTIVE_LIBRARIES:
            raise ConfigError(
                f"hardware '{self.name}' collectives must be one of {COLLECTIVE_LIBRARIES}, "
                f"got {self.collectives!r}"
            )
        if self.nics_per_node is not None and self.nics_per_node < 1:
            raise ConfigError(
                f"hardware '{self.name}' needs nics_per_node >= 1, got {self.nics_per_node}"
            )
        domain = self.domain_size
        if domain is not None and (domain < 1 or domain % self.devices_per_node):
            raise ConfigError(
                f"hardware '{self.name}' domain size ({domain}) must be a multiple of "
                f"devices_per_node ({self.devices_per_node})"
            )

    @property
    def domain_devices(self) -> int:
        """Devices of one high-bandwidth domain (the node when the file names none)."""
        return self.domain_size or self.devices_per_node

    @property
    def domain_link(self) -> LinkSpec:
        """The per-device link between nodes of one domain (the intra-node link by default)."""
        return self.intra_domain or self.intra_node

    @property
    def nics_per_device(self) -> float:
        """Network cards per device (0.5 when two devices share a card)."""
        return (self.nics_per_node or self.devices_per_node) / self.devices_per_node

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
                host_op_us=float(data["host_op_us"]) if "host_op_us" in data else None,
                **_network_fields(data),
                fused_attention=bool(data.get("fused_attention", True)),
                deterministic_attention_bwd=_optional_float(data, "deterministic_attention_bwd"),
                fixed_ms_per_microbatch=float(data.get("fixed_ms_per_microbatch", 0.0)),
                sources=list(data.get("sources", [])),
                assumptions=list(data.get("assumptions", [])),
            )
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
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
            **({} if self.host_op_us is None else {"host_op_us": self.host_op_us}),
            "intra_node": link_dict(self.intra_node),
            "inter_node": link_dict(self.inter_node),
            "efficiency": self.efficiency.to_dict(),
            **self._network_dict(),
            **({} if self.fused_attention else {"fused_attention": False}),
            **_set_only(
                deterministic_attention_bwd=self.deterministic_attention_bwd,
                fixed_ms_per_microbatch=self.fixed_ms_per_microbatch or None,
            ),
            "sources": list(self.sources),
            "assumptions": list(self.assumptions),
        }

    def _network_dict(self) -> dict[str, Any]:
        """The optional network keys that are set, in the JSON form `_network_fields` reads."""
        out: dict[str, Any] = {"collectives": self.collectives}
        if self.nics_per_node is not None:
            out["nics_per_node"] = self.nics_per_node
        if self.domain_size is not None:
            out["domain"] = {"size": self.domain_size, **link_dict(self.domain_link)}
        return out


def _network_fields(data: dict[str, Any]) -> dict[str, Any]:
    """HardwareSpec keyword arguments of the optional network keys of a hardware file."""
    fields: dict[str, Any] = {"collectives": str(data.get("collectives", "nccl"))}
    if "nics_per_node" in data:
        fields["nics_per_node"] = int(data["nics_per_node"])
    domain = data.get("domain")
    if domain is not None:
        domain = dict(domain)
        fields["domain_size"] = int(domain.pop("size"))
        fields["intra_domain"] = LinkSpec(**domain) if domain else None
    return fields


def _set_only(**values: Any) -> dict[str, Any]:
    """The keys whose value is set (not None): optional fields a description states."""
    return {key: value for key, value in values.items() if value is not None}


def _optional_float(data: dict[str, Any], key: str) -> float | None:
    """A description's optional number (None where the file states none)."""
    return float(data[key]) if key in data else None


def write_hardware_json(data: dict[str, Any], path: str | Path) -> Path:
    """Write a hardware description (a calibration's result) that load_hardware reads back;
    what cannot load is refused."""
    from tinker_opt.io_utils import write_text_atomic

    HardwareSpec.from_dict(data, origin="calibrated description")
    return write_text_atomic(Path(path), json.dumps(data, indent=2) + "\n")


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
