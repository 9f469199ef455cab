"""The pipeline objective, written once: the iteration time from the per-stage sum, the bottleneck
and the largest tail.

1F1B and its interleaved form (Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", section 2.2; Megatron-LM
`core/pipeline_parallel/schedules.py`): with v virtual chunks per rank and m micro-batches,

    v * T = sum_s t_s + (m*v - 1) * max_s t_s + v * max_s tail_s

which is `sum + (m - 1) * max + tail` for v = 1; `tail_s` is stage s's exposed gradient
synchronisation plus its optimizer step. Every place that prices a split calls `pipeline_x_v`:
`SplitCoefficients.iteration_time_ns_x_v` (what `CostModel.evaluate` reports), the exact splits
(layer_split, mixed_split, form_split), the bounds (layer_bounds, stacks) and the CP-SAT / MILP rows.
The three terms may be integers, numpy arrays (element-wise), CP-SAT or PuLP linear expressions:
only `+` and multiplication by an integer are used. A new schedule changes these two functions.
"""

from __future__ import annotations

from typing import Any, Protocol


class PipelineShape(Protocol):
    """What the objective reads of a configuration (SplitCoefficients has these fields)."""

    @property
    def num_microbatches(self) -> int: ...

    @property
    def vpp(self) -> int: ...


def pipeline_x_v(c: PipelineShape, total: Any, bottleneck: Any, tail: Any) -> Any:
    """v * T from sum_s t_s (`total`), max_s t_s (`bottleneck`) and max_s tail_s (`tail`)."""
    return total + (c.num_microbatches * c.vpp - 1) * bottleneck + c.vpp * tail


def pipeline_bound_x_v(c: PipelineShape, total_lb: Any, bottleneck_lb: Any, tail_lb: Any) -> Any:
    """A lower bound on v * T from lower bounds of its three terms: the objective does not
    decrease in any of them (m*v >= 1, v >= 1), so the bounds go through the same formula."""
    return pipeline_x_v(c, total_lb, bottleneck_lb, tail_lb)
