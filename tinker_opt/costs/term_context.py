"""TermContext: what every term module reads to price one outer configuration.

One frozen object built from the cost model's inputs (costs/inputs.py): the workload, the
profiled blocks and links, the profile's conventions and the hardware rates, plus the few facts
derived from them once (bytes per element and per optimizer state, the layer kinds). The term
modules (terms.py, layer_comm.py, stage_terms.py, data_parallel.py, zero_terms.py, cp_terms.py,
moe_terms.py) take it as their first argument and import it at run time: it depends on none of
them, so they form no import circle (tests/test_import_graph.py counts type-only imports too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tinker_opt.costs.comm_model import CommModel, GroupPlacement
from tinker_opt.costs.inputs import HardwareRates, ProfileConventions, Workload
from tinker_opt.costs.job import JobOptions
from tinker_opt.costs.profile_table import BlockCost, BlockTable
from tinker_opt.costs.units import data_groups
from tinker_opt.specs import ClusterSpec, ModelSpec
from tinker_opt.strategy import Strategy


@dataclass(frozen=True, eq=False)
class TermContext:
    """The inputs of the terms and the facts derived from them (module docstring)."""

    workload: Workload
    blocks: BlockTable
    comm: CommModel
    conventions: ProfileConventions = field(default_factory=ProfileConventions)
    rates: HardwareRates = field(default_factory=HardwareRates)
    # Derived once in __post_init__ (plain attributes: the terms read them in hot loops).
    model: ModelSpec = field(init=False)
    cluster: ClusterSpec = field(init=False)
    gbs: int = field(init=False)
    job: JobOptions = field(init=False)
    bpe: int = field(init=False)
    """Bytes per element of weights and activations (2 for bf16 / fp16)."""
    opt_state_bytes: int = field(init=False)
    """Optimizer-state bytes per parameter before the distributed optimizer's sharding."""
    grad_bytes: int = field(init=False)
    """Gradient-buffer bytes per parameter (fp32 main gradients unless --main-grads-dtype)."""
    kinds: list[str] = field(init=False)
    """The layer kind of each position (ModelSpec.layer_kinds)."""
    layer_block: dict[str, str] = field(init=False)
    """Layer kind -> its block name in blocks.csv (`layer` for a one-kind stack)."""
    kind_names: list[str] = field(init=False)
    kind_index: np.ndarray = field(init=False)
    """Position -> index of its kind in kind_names."""

    def __post_init__(self) -> None:
        model, job = self.workload.model, self.workload.job
        bpe = model.bytes_per_element
        # Optimizer states per parameter: fp32 master + two Adam moments (12 B), or the dtypes of
        # Megatron's precision-aware optimizer (optimizer_precision.OptimizerPrecision); --reuse-fp32-param
        # (bf16 only) saves sizeof(bf16) of the master copy; fp32 training keeps no master (8 B).
        # All divided by the optimizer's sharding with dist_opt.
        precision = job.optimizer_precision
        opt_state = (
            (precision.state_bytes - (bpe if job.reuse_fp32_param else 0)) if bpe == 2 else 8
        )
        kinds = model.layer_kinds()
        names = sorted(set(kinds))
        derived = {
            "model": model,
            "cluster": self.workload.cluster,
            "gbs": self.workload.global_batch_size,
            "job": job,
            "bpe": bpe,
            "opt_state_bytes": opt_state,
            "grad_bytes": precision.grad_bytes,
            "kinds": kinds,
            "layer_block": {k: ("layer" if len(names) == 1 else f"layer.{k}") for k in names},
            "kind_names": names,
            "kind_index": np.array([names.index(k) for k in kinds]),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @property
    def tp_comm_in_times(self) -> bool:
        """The block times already include the TP / SP collectives (Tinker folders): add none."""
        return self.conventions.times_include_tp_comm

    @property
    def ep_comm_in_times(self) -> bool:
        """The block times already include the expert all-to-all and etp collectives."""
        return self.conventions.times_include_ep_comm

    @property
    def attention_mask_bytes(self) -> int:
        """A mask every stage holds once (Tinker's seq^2 bytes), 0 for our own profiles."""
        return self.conventions.attention_mask_bytes

    @property
    def mem_bw_gbs(self) -> float:
        return self.rates.memory_bandwidth_gbs

    @property
    def host_link_gbs(self) -> float:
        return self.rates.host_link_gbs

    # -- shapes --------------------------------------------------------------------------------
    def layer_shape(self, kind: str, s: Strategy) -> tuple[int, int]:
        """(ep, etp) of a layer block row: experts only in MoE layers (dense rows use 1, 1)."""
        if self.model.is_moe and (kind == "moe" or self.layer_block[kind] == "layer"):
            return s.ep, s.expert_tp
        return 1, 1

    def available(self, tp: int, sp: bool, cp: int, ep: int, etp: int) -> bool:
        """Whether every block was profiled at this shard shape (any micro-batch size)."""
        for kind, block in self.layer_block.items():
            kep, ketp = (
                (ep, etp) if self.model.is_moe and (kind == "moe" or block == "layer") else (1, 1)
            )
            if not self.blocks.has(block, tp, sp, cp, kep, ketp):
                return False
        return all(self.blocks.has(b, tp, sp, cp) for b in ("embedding", "final_norm", "head"))

    def cost(self, block: str, s: Strategy, ep: int = 1, etp: int = 1) -> BlockCost:
        """One block's profiled cost at the strategy's shard shape and micro-batch size."""
        return self.blocks.cost(block, tp=s.tp, sp=s.sp, cp=s.cp, ep=ep, etp=etp, mbs=s.mbs)

    def scope(self, stride: int, size: int) -> GroupPlacement:
        """Where a group of `size` ranks `stride` apart lies on the cluster (comm_model.py)."""
        cluster = self.cluster
        return self.comm.placement(stride, size, cluster.devices_per_node, cluster.num_devices)

    # -- collectives shared by the term modules (us) -------------------------------------------
    def tp_pair_us(self, s: Strategy, nbytes: float) -> float:
        """One TP exchange of a layer part: all-gather + reduce-scatter with SP, else all-reduce
        (Korthikanti et al. 2022, Megatron's g / g-bar operators)."""
        scope = self.scope(1, s.tp)
        if s.sp:
            return self.comm.time_us("all_gather", s.tp, scope, nbytes) + self.comm.time_us(
                "reduce_scatter", s.tp, scope, nbytes
            )
        return self.comm.time_us("all_reduce", s.tp, scope, nbytes)

    def sync_groups(self, s: Strategy) -> list[tuple[int, GroupPlacement]]:
        """(size, scope) of the dense and expert gradient groups."""
        dp_cp, edp = data_groups(s, self.model.is_moe)
        groups = [(dp_cp, self.scope(s.tp, dp_cp))]
        if self.model.is_moe:
            groups.append((edp, self.scope(s.ep * s.expert_tp, edp)))
        return groups

    def left_out(self) -> tuple[str, ...]:
        """The terms not added because the profile's block times include them (for the breakdown)."""
        return (("tp_comm",) if self.tp_comm_in_times else ()) + (
            ("ep_comm",) if self.ep_comm_in_times else ()
        )
