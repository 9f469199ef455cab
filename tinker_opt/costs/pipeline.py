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

from tinker_opt.choices import Schedule


class PipelineShape(Protocol):
    """What the objective reads of a configuration (SplitCoefficients has these fields)."""

    @property
    def num_microbatches(self) -> int: ...

    @property
    def vpp(self) -> int: ...

    @property
    def schedule(self) -> str: ...


def pipeline_x_v(c: PipelineShape, total: Any, bottleneck: Any, tail: Any) -> Any:
    """v * T from sum_s t_s (`total`), max_s t_s (`bottleneck`) and max_s tail_s (`tail`).

    DualPipeV (`c.schedule`, v = 2 chunks per rank): bubble (p - 1)(F&B + B - W) - F per chunk
    (Ascend/MindSpeed docs/features/dualpipev.md; deepseek-ai/DualPipe README) with a rank's
    micro-batch t = 2 (F + B). ASSUMPTION: B = 2F and W = B / 2 (weight gradients half of the
    backward, as in Zero Bubble, Qi et al. 2023) and F&B = F + B (the overlap it brings is priced
    on the all-to-all: costs/overlap.py). Bubble = 2/3 (p - 1) t - t / 6, for unequal stages
    2/3 (total - bottleneck) - bottleneck / 6, so 2 T = (4 total + (6 m - 5) bottleneck) / 3 + 2
    tail, rounded down to integer ns. Only even splits run it, so only numbers reach this case."""
    m, v = c.num_microbatches, c.vpp
    if getattr(c, "schedule", Schedule.ONE_F_ONE_B) == Schedule.DUALPIPEV:
        return (4 * total + (6 * m - 5) * bottleneck) // 3 + v * tail
    return total + (m * v - 1) * bottleneck + v * tail


def pipeline_bound_x_v(c: PipelineShape, total_lb: Any, bottleneck_lb: Any, tail_lb: Any) -> Any:
    """A lower bound on v * T from lower bounds of its three terms: the objective does not
    decrease in any of them (m*v >= 1, v >= 1), so the bounds go through the same formula."""
    return pipeline_x_v(c, total_lb, bottleneck_lb, tail_lb)
