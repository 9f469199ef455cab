"""SplitRules: what the search asks of a split beyond its cost.

The cost model prices a strategy; the search decides which splits it accepts: those whose every
stage fits in the memory limit and whose per-stage layer counts the framework can write
(rules.LAYER_FORMS). Both are the search's rules, handed to `CostModel.under` (a view of the same
cost model that shares its priced terms), never stored in the cost model's inputs: the headroom
pick asks for a lower limit, the search for the script's layer form, and neither rebuilds a cost
model (ARCHITECTURE.md, "One cost model, one truth").
"""

from __future__ import annotations

from dataclasses import dataclass

from tinker_opt.specs import ClusterSpec

BYTES_PER_MB = 2**20


@dataclass(frozen=True)
class SplitRules:
    """The memory limit per device and the layer-count form every accepted split keeps."""

    memory_limit_bytes: int
    """Modelled memory a stage may hold (ClusterSpec.memory_limit_mb in bytes)."""
    layer_form: str = "free"
    """Which per-stage layer counts the framework can write (rules.LAYER_FORMS): every split
    solver returns only splits of this form."""
    uneven_vpp: bool = False
    """Splits with virtual stages may be uneven (solve/virtual_split.py), where the framework
    writes them (Megatron-LM's --pipeline-model-parallel-layout)."""

    @classmethod
    def of(
        cls, cluster: ClusterSpec, layer_form: str = "free", uneven_vpp: bool = False
    ) -> SplitRules:
        """The cluster's memory limit, with `layer_form` and uneven virtual stages or not."""
        return cls(int(cluster.memory_limit_mb * BYTES_PER_MB), layer_form, uneven_vpp)

    def lowered(self, fraction: float) -> SplitRules:
        """These rules with `fraction` of the memory limit (the headroom pick)."""
        return SplitRules(int(fraction * self.memory_limit_bytes), self.layer_form, self.uneven_vpp)
