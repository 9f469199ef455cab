"""The cost model's inputs as three frozen objects (ARCHITECTURE.md, "One cost model, one truth").

* `Workload`: what is trained where: the model, the cluster and the job (batch, job flags);
* `ProfileConventions`: what the profile's block times already hold (Tinker folders run on real
  tp x ep ranks, profile/tinker_compat.py), read from its meta.json;
* `HardwareRates`: the device rates the terms use beyond the profile (HBM and host link
  bandwidth) and the accelerator family, from the hardware description.

Each default is written once, here. The search's own rules (memory limit, layer form) are not
inputs of the cost model: the solvers take them as arguments (costs/split_rules.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from tinker_opt.costs.framework_memory import accelerator_of
from tinker_opt.costs.job import JOB_DEFAULTS, JobOptions
from tinker_opt.hardware import DEFAULT_HOST_LINK_GBS, DEFAULT_HOST_OP_US, HardwareSpec
from tinker_opt.hardware.efficiency import EfficiencyCurve
from tinker_opt.profile.meta import ProfileMeta
from tinker_opt.specs import ClusterSpec, ModelSpec

DEFAULT_MEMORY_BANDWIDTH_GBS = 1600.0
"""HBM bandwidth when no hardware file is given (Ascend 910B / A100-40GB class, ~1.6 TB/s)."""
DEFAULT_MATMUL_TFLOPS = 312.0
"""Dense BF16 matmul peak when no hardware file is given (A100's datasheet figure, the same class)."""


def large_matmul_efficiency(hardware: HardwareSpec) -> float:
    """The fraction of the matmul peak a large GEMM reaches on `hardware`: the asymptote of its
    `matmul` efficiency curve (its `max_efficiency`, or a table's largest point), the rate the
    analytic profile gives the layer's large GEMMs (hardware/efficiency.py). ASSUMPTION: the
    GEMMs a module recompute reruns are large (the experts' and MLP GEMMs of a layer)."""
    curve = hardware.efficiency.matmul
    return curve.points[-1][1] if curve.points else curve.max_efficiency


@dataclass(frozen=True)
class Workload:
    """The model, the cluster it is planned for and the job's batch and flags."""

    model: ModelSpec
    cluster: ClusterSpec
    global_batch_size: int
    job: JobOptions = JOB_DEFAULTS
    """The script's job flags (costs/job.py)."""


@dataclass(frozen=True)
class ProfileConventions:
    """What the profile's block times and memory already include (costs/terms.py conventions)."""

    times_include_tp_comm: bool = False
    """The block times include the TP / SP collectives (Tinker folders): add none."""
    times_include_ep_comm: bool = False
    """The block times include the expert all-to-all and etp collectives."""
    attention_mask_bytes: int = 0
    """A mask every stage holds once (Tinker's seq^2 bytes), 0 for our own profiles."""

    @classmethod
    def of(cls, meta: ProfileMeta) -> ProfileConventions:
        """The conventions a profiled-data folder's meta.json states."""
        return cls(
            times_include_tp_comm=bool(meta.times_include_tp_comm),
            times_include_ep_comm=bool(meta.times_include_ep_comm),
            attention_mask_bytes=int(meta.attention_mask_bytes or 0),
        )


@dataclass(frozen=True)
class HardwareRates:
    """Device rates the terms read beyond the profiled blocks and links."""

    memory_bandwidth_gbs: float = DEFAULT_MEMORY_BANDWIDTH_GBS
    """HBM bandwidth (memory-bound steps: Adam, activation-function recompute)."""
    host_link_gbs: float = DEFAULT_HOST_LINK_GBS
    """Host <-> device copies (the swap optimizer)."""
    matmul_tflops: float = DEFAULT_MATMUL_TFLOPS
    """Dense matmul rate of a large GEMM in the training precision: the bf16 peak times the
    description's matmul efficiency asymptote (`large_matmul_efficiency`), the rate the analytic
    profile times the layer's large GEMMs at; the recomputed module GEMMs run at it
    (costs/recompute_modules.py)."""
    host_op_us: float = DEFAULT_HOST_OP_US
    """Host time to issue one eager operator (hardware `host_op_us`, DEFAULT_HOST_OP_US where the
    file states none; 0: not priced): costs/fixed_costs.py, costs/moe_host.py."""
    accelerator: str = "cuda"
    """cuda | npu: the framework's context and communication buffers (framework_memory.py)."""
    attention_bwd: EfficiencyCurve | None = None
    """The fused attention backward's curve (the description's `attention_bwd`, else its matmul
    curve) at `peak_tflops`; None: the backward runs at `matmul_tflops` (costs/deterministic.py)."""
    peak_tflops: float = DEFAULT_MATMUL_TFLOPS
    """The bf16 peak the attention curve is a fraction of."""
    deterministic_attention_bwd: float | None = None
    """The description's `deterministic_attention_bwd` (None: costs/deterministic.py's default)."""
    fixed_us_per_microbatch: float = 0.0
    """Fixed time per micro-batch and stage (HardwareSpec.fixed_ms_per_microbatch, fitted by
    calibrate --log): added to every stage's micro-batch time (stage_terms.py)."""

    @classmethod
    def of(cls, hardware: HardwareSpec | None, device_kind: str | None = None) -> HardwareRates:
        """The rates of a hardware description (defaults without one); `device_kind` is the
        profile's device, which names the accelerator when no description does."""
        accelerator = accelerator_of(hardware.name if hardware is not None else None, device_kind)
        if hardware is None:
            return cls(accelerator=accelerator)
        return cls(
            memory_bandwidth_gbs=hardware.memory_bandwidth_gbs or DEFAULT_MEMORY_BANDWIDTH_GBS,
            host_link_gbs=hardware.host_link_gbs or DEFAULT_HOST_LINK_GBS,
            matmul_tflops=(hardware.peak_tflops.get("bf16") or DEFAULT_MATMUL_TFLOPS)
            * large_matmul_efficiency(hardware),
            host_op_us=DEFAULT_HOST_OP_US if hardware.host_op_us is None else hardware.host_op_us,
            accelerator=accelerator,
            fixed_us_per_microbatch=1e3 * hardware.fixed_ms_per_microbatch,
            attention_bwd=hardware.efficiency.attention("bwd"),
            peak_tflops=hardware.peak_tflops.get("bf16") or DEFAULT_MATMUL_TFLOPS,
            deterministic_attention_bwd=hardware.deterministic_attention_bwd,
        )

    def attention_bwd_us(self, flops: float) -> float:
        """Microseconds of a fused attention backward of `flops` (its curve at its size, as the
        analytic profile times the kernel: profile/op_timing.py compute_times_us)."""
        if self.attention_bwd is None:
            return flops / (self.matmul_tflops * 1e6)
        return float(self.attention_bwd.time_us(flops, self.peak_tflops * 1e6))
