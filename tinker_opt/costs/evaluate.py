"""CostModel: profiled tables -> integer coefficients; `evaluate(strategy)` -> Evaluation.

`CostModel.evaluate` is the one definition of the modelled iteration time and per-stage memory
(ARCHITECTURE.md, "One cost model, one truth"); it is built from `coefficients(outer)`, which the
exact split, the enumeration and the CP-SAT / MILP models use too. The terms are assembled in
`tinker_opt.costs.terms` (each with its source); this module holds the public objects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tinker_opt.choices import Recompute, RecomputeMethod
from tinker_opt.costs.breakdown import StageBreakdown
from tinker_opt.costs.coefficients import SplitCoefficients, StageCost
from tinker_opt.costs.comm_model import CommModel
from tinker_opt.costs.fp8_terms import precision_of
from tinker_opt.costs.framework_memory import (
    framework_memory,
    framework_stages,
    framework_summary,
)
from tinker_opt.costs.inputs import HardwareRates, ProfileConventions, Workload
from tinker_opt.costs.job import JOB_DEFAULTS, JobOptions
from tinker_opt.costs.profile_table import BlockTable
from tinker_opt.costs.split_rules import SplitRules
from tinker_opt.costs.term_context import TermContext
from tinker_opt.costs.terms import TermBuilder
from tinker_opt.errors import StrategyError
from tinker_opt.hardware import HardwareSpec
from tinker_opt.profile.store import ProfiledData
from tinker_opt.rules import check_outer, check_strategy
from tinker_opt.specs import ClusterSpec, ModelSpec
from tinker_opt.strategy import Strategy

BYTES_PER_MB = 2**20
NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class Evaluation:
    """The modelled cost of one strategy (the Evaluation interface of ARCHITECTURE.md)."""

    strategy: Strategy
    iteration_time_ms: float
    peak_memory_mb: float
    tokens_per_s_per_device: float
    stages: tuple[StageBreakdown, ...]
    time_breakdown_ms: dict[str, float]
    fits: bool
    estimated: bool
    time_ns_x_vpp: int = field(default=0, compare=False)
    """vpp times the iteration time in ns: the exact integer the solvers optimise."""
    in_block_times: tuple[str, ...] = ()
    """Terms not added because the profile's block times include them (Tinker folders:
    `tp_comm`, `ep_comm`); the breakdown's comm_ms then holds only the other collectives."""
    framework_memory: dict[str, Any] = field(default_factory=dict, compare=False)
    """What the framework allocates and keeps beyond the modelled memory, and the predicted
    allocated / reserved / device peaks (costs/framework_memory.py)."""
    precision: dict[str, Any] = field(default_factory=dict, compare=False)
    """The training precision the times hold (costs/fp8_terms.py precision_of): the tuned
    script is written in it (an FP8 row chosen by `search --allow-fp8` carries its FP8 flags)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy.to_dict(),
            "iteration_time_ms": self.iteration_time_ms,
            "peak_memory_mb": self.peak_memory_mb,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "stages": [stage.to_dict() for stage in self.stages],
            "time_breakdown_ms": dict(self.time_breakdown_ms),
            "fits": self.fits,
            "estimated": self.estimated,
            "in_block_times": list(self.in_block_times),
            "framework_memory": dict(self.framework_memory),
            "precision": dict(self.precision),
        }


class CostModel:
    """Cost coefficients of every strategy of one model on one cluster, from one profile."""

    def __init__(
        self,
        context: TermContext,
        rules: SplitRules | None = None,
        terms: TermBuilder | None = None,
    ) -> None:
        self.context = context
        """The frozen inputs of the terms (costs/term_context.py, costs/inputs.py)."""
        self.rules = rules or SplitRules.of(context.cluster)
        """The search's rules every split of this model keeps (costs/split_rules.py)."""
        self.warnings: list[str] = list(context.comm.warnings)
        self._terms = terms or TermBuilder(context)
        self._cache: dict[Strategy, SplitCoefficients] = {}
        self.listed: set[Strategy] = set()
        """Outer configurations that pass the outer rules (rules.OUTER_RULES) for this model,
        cluster and batch, as solve/space.outer_choices lists them: `coefficients` does not
        check them again (issue 30: a search builds thousands)."""

    @classmethod
    def from_profile(
        cls,
        profiled: ProfiledData,
        model: ModelSpec,
        cluster: ClusterSpec,
        global_batch_size: int,
        *,
        hardware: HardwareSpec | None = None,
        inter_node_bandwidth_gbs: float | None = None,
        job: JobOptions = JOB_DEFAULTS,
    ) -> CostModel:
        """Build from a loaded profiled-data folder; see CommModel for the inter-node defaults and
        costs/job.py for the script's job flags."""
        comm = CommModel(
            profiled.columns("comm"),
            hardware=hardware,
            inter_node_bandwidth_gbs=inter_node_bandwidth_gbs,
            multi_node=cluster.num_nodes > 1,
            multi_device=cluster.devices_per_node > 1,
        )
        context = TermContext(
            Workload(model, cluster, global_batch_size, job),
            BlockTable(profiled.columns("blocks")),
            comm,
            ProfileConventions.of(profiled.meta),
            HardwareRates.of(hardware, str(profiled.meta.device)),
        )
        return cls(context)

    @property
    def model(self) -> ModelSpec:
        return self.context.model

    @property
    def cluster(self) -> ClusterSpec:
        return self.context.cluster

    @property
    def global_batch_size(self) -> int:
        return self.context.gbs

    @property
    def blocks(self) -> BlockTable:
        return self.context.blocks

    @property
    def comm(self) -> CommModel:
        return self.context.comm

    @property
    def accelerator(self) -> str:
        """cuda | npu: the framework's context and communication buffers (framework_memory.py)."""
        return self.context.rates.accelerator

    @property
    def job(self) -> JobOptions:
        """The script's job flags this model prices (costs/job.py)."""
        return self.context.job

    @property
    def layer_form(self) -> str:
        """The per-stage layer-count form every split of this model takes (rules.LAYER_FORMS)."""
        return self.rules.layer_form

    @property
    def uneven_vpp(self) -> bool:
        """Splits with virtual stages may be uneven (solve/virtual_split.py)."""
        return self.rules.uneven_vpp

    def under(self, rules: SplitRules) -> CostModel:
        """This cost model under other search rules (a layer form, a lower memory limit): the same
        inputs and priced terms, its own coefficient cache."""
        if rules == self.rules:
            return self
        model = CostModel(self.context, rules, self._terms)
        model.listed = self.listed  # the same model, cluster and batch: the same outer rules
        return model

    def available(self, tp: int, sp: bool, cp: int, ep: int, etp: int) -> bool:
        """Whether every block was profiled at this shard shape (any micro-batch size)."""
        return self.context.available(tp, sp, cp, ep, etp)

    def coefficients(self, outer: Strategy) -> SplitCoefficients:
        """Integer coefficients of an outer configuration (layer split and r are ignored)."""
        cached = self._cache.get(outer)
        if cached is not None:
            return cached
        method = (
            (outer.recompute_method or RecomputeMethod.BLOCK)
            if outer.recompute == Recompute.FULL
            else None
        )
        algo = outer.cp_algo if outer.cp > 1 else None
        key = outer
        if (
            outer.num_layer_list,
            outer.recompute_num_layers,
            outer.recompute_method,
            outer.cp_algo,
        ) != (None, None, method, algo):
            key = outer.replace(
                num_layer_list=None,
                recompute_num_layers=None,
                recompute_method=method,
                cp_algo=algo,
            )
        cached = self._cache.get(key) if key is not outer else None  # outer: missed above
        if cached is None:
            # The outer itself: a virtual pipeline with a layer list needs no even chunks.
            if outer not in self.listed:
                check_outer(outer, self.model, self.cluster.num_devices, self.global_batch_size)
            cached = self._terms.build(key, self.rules)
            self._cache[key] = cached
        if key is not outer:
            self._cache[outer] = cached
        return cached

    def static_overflows(self, outer: Strategy) -> bool:
        """The layers' weights, gradients and optimizer states alone exceed pp times the memory
        limit: then under every split some stage's static bytes (a part of its memory) exceed
        the limit, so nothing fits. Far cheaper than the coefficients (the presolve asks first)."""
        return self._terms.layers_static_bytes(outer) > outer.pp * self.rules.memory_limit_bytes

    def evaluate(self, strategy: Strategy) -> Evaluation:
        """The modelled iteration time, memory and breakdown of one (valid) strategy."""
        check_strategy(strategy, self.model, self.cluster, self.global_batch_size)
        coeffs = self.coefficients(strategy)
        layers = strategy.stage_layers(self.model.num_layers)
        r = strategy.recompute_num_layers if strategy.recompute == Recompute.FULL else 0
        evaluation = evaluation_of(
            coeffs,
            strategy,
            layers,
            r or 0,
            self.global_batch_size,
            self.model.seq_length,
            self.cluster.num_devices,
        )
        framework = framework_memory(strategy, self.accelerator)
        stages = framework_stages(evaluation.stages, framework)
        return dataclasses.replace(
            evaluation,
            stages=stages,
            in_block_times=self.context.left_out(),
            framework_memory=framework_summary(stages, framework),
            precision=precision_of(self.model),
        )

    def split_strategy(
        self,
        outer: Strategy,
        layers: tuple[int, ...],
        r: int,
        chunks: tuple[int, ...] | None = None,
    ) -> Strategy:
        """The full Strategy of an outer configuration with a split (per-stage `layers`, or the
        virtual stages' `chunks`) and recompute count."""
        even = len(set(layers)) == 1
        listed = chunks if chunks is not None else None if even else layers
        return outer.replace(
            num_layer_list=None if listed is None else tuple(int(n) for n in listed),
            recompute_num_layers=int(r) if outer.recompute == Recompute.FULL else None,
            recompute_method=(outer.recompute_method or RecomputeMethod.BLOCK)
            if outer.recompute == Recompute.FULL
            else None,
        )


def evaluation_of(
    c: SplitCoefficients,
    strategy: Strategy,
    layers: tuple[int, ...],
    r: int,
    global_batch_size: int,
    seq_length: int,
    num_devices: int,
) -> Evaluation:
    """Evaluation of a split of an outer configuration (the integers of `stage_costs`)."""
    if strategy.recompute == Recompute.FULL and r < 1:
        raise StrategyError("full recompute needs recompute_num_layers >= 1")
    listed = strategy.num_layer_list is not None
    chunks = strategy.chunk_layers(c.num_layers) if listed and c.vpp > 1 else None
    stages = c.stage_costs(layers, r, chunks)
    total_x_v = c.iteration_time_ns_x_v(stages)
    v = c.vpp
    iteration_ms = total_x_v / v / NS_PER_MS
    peak_bytes = max(st.memory_bytes_x_v for st in stages) / v
    fits = max(st.memory_bytes_x_v for st in stages) <= v * c.memory_limit_bytes
    tokens = global_batch_size * seq_length / (iteration_ms / 1e3) / num_devices
    return Evaluation(
        strategy=strategy,
        iteration_time_ms=iteration_ms,
        peak_memory_mb=peak_bytes / BYTES_PER_MB,
        tokens_per_s_per_device=tokens,
        stages=tuple(_stage_breakdown(s, st, v) for s, st in enumerate(stages)),
        time_breakdown_ms=_breakdown(c, stages),
        fits=bool(fits),
        estimated=c.estimated,
        time_ns_x_vpp=int(total_x_v),
    )


def _stage_breakdown(s: int, st: StageCost, v: int) -> StageBreakdown:
    mb = BYTES_PER_MB * v
    return StageBreakdown(
        stage=s,
        layers=st.layers,
        recompute_layers=st.recompute_layers,
        time_ms=st.time_ns / NS_PER_MS,
        memory_mb=st.memory_bytes_x_v / mb,
        compute_ms=(st.time_ns - st.comm_ns) / NS_PER_MS,
        comm_ms=st.comm_ns / NS_PER_MS,
        recompute_ms=st.recompute_ns / NS_PER_MS,
        # The memory parts add up to memory_mb: static = weights + gradients + optimizer + transient + mask.
        weights_mb=(
            st.static_bytes_x_v
            - st.grad_bytes_x_v
            - st.optimizer_bytes_x_v
            - st.transient_bytes_x_v
            - st.mask_bytes_x_v
        )
        / mb,
        attention_mask_mb=st.mask_bytes_x_v / mb,
        gradients_mb=st.grad_bytes_x_v / mb,
        optimizer_mb=st.optimizer_bytes_x_v / mb,
        activations_mb=st.act_bytes_x_v / mb,
        transient_mb=st.transient_bytes_x_v / mb,
        recompute_work_mb=st.other_bytes_x_v / mb,
        tail_ms=st.tail_ns / NS_PER_MS,
        comm_hidden_ms=st.hidden_comm_ns / NS_PER_MS,
        sync_ms=st.tail_sync_ns / NS_PER_MS,
        sync_hidden_ms=st.hidden_sync_ns / NS_PER_MS,
    )


def _breakdown(c: SplitCoefficients, stages: list[StageCost]) -> dict[str, float]:
    """Iteration time split so that the parts add up: m x the slowest stage, bubble, tail;
    `fixed_ms` is the description's fitted fixed time per micro-batch (m of them on the
    slowest stage: HardwareSpec.fixed_ms_per_microbatch), taken out of compute_ms."""
    v, m = c.vpp, c.num_microbatches
    fixed_ms = m * c.fixed_ns_per_microbatch / NS_PER_MS
    slow = max(stages, key=lambda st: st.time_ns)
    tail = max(stages, key=lambda st: st.tail_ns)
    # What the schedule adds to m x the slowest stage and the tail (1F1B: sum - max).
    bubble_x_v = c.iteration_time_ns_x_v(stages) - v * (m * slow.time_ns + tail.tail_ns)
    return {
        "compute_ms": m
        * (slow.time_ns - slow.comm_ns - slow.recompute_ns - slow.host_ns)
        / NS_PER_MS
        - fixed_ms,
        "fixed_ms": fixed_ms,
        # The host's issue time above the GPU's (costs/fixed_costs.py): not in compute_ms.
        "host_ms": m * slow.host_ns / NS_PER_MS,
        "recompute_ms": m * slow.recompute_ns / NS_PER_MS,
        "comm_ms": m * slow.comm_ns / NS_PER_MS,
        "bubble_ms": bubble_x_v / v / NS_PER_MS,
        "dp_sync_ms": tail.tail_sync_ns / NS_PER_MS,
        "optimizer_ms": (tail.tail_ns - tail.tail_sync_ns) / NS_PER_MS,
    }
