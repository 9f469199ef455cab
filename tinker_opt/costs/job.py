"""The launch script's job flags that change the cost model without being strategy knobs.

One object, read from the script once (verbs/common.py `job_options`), part of the cost model's
Workload (costs/inputs.py), which the term modules read through the TermContext unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tinker_opt.costs.recompute_modules import DEFAULT_MODULES
from tinker_opt.optimizer_precision import OptimizerPrecision
from tinker_opt.specs import StepFlags


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    """What the job's flags change in the cost model (TrainSpec fields, costs/terms.py rules)."""

    swap_optimizer_times: int | None = None
    """MindSpeed's `--swap-optimizer` chunk count (None: the states stay on the device)."""
    recompute_activation: bool = False
    """MindSpeed's `--recompute-activation-function` (costs/recompute.py)."""
    overlap_p2p_comm: bool = True
    """The interleaved schedule overlaps p2p send/recv (TrainSpec.overlap_p2p_comm, by version)."""
    swap_attention: bool = False
    """MindSpeed's `--swap-attention`: attention activations kept on the host (costs/swap_terms.py)."""
    gradient_accumulation_fusion: bool = True
    """False with `--no-gradient-accumulation-fusion`: one add per weight and micro-batch
    (costs/grad_accumulation.py)."""
    reuse_fp32_param: bool = False
    """MindSpeed's `--reuse-fp32-param`: 2 B fewer optimizer-state bytes per parameter."""
    recompute_modules: tuple[str, ...] = DEFAULT_MODULES
    """What selective recompute recomputes (Megatron-Core `--recompute-modules`; costs/recompute_modules.py)."""
    recompute_all: bool = False
    """Full recompute covers every layer or none (MindSpeed-LLM FSDP2's parallel.recompute)."""
    optimizer_precision: OptimizerPrecision = field(default_factory=OptimizerPrecision)
    """Gradient-buffer and optimizer-state dtypes (Megatron's precision-aware optimizer)."""
    step: StepFlags = field(default_factory=StepFlags)
    """Clipping, step logging and the batch's attention mask (costs/step_costs.py)."""
    ulysses_degree: int | None = None
    """The job's `--ulysses-degree-in-cp` (hybrid_cp_algo; rules.hybrid_ulysses_degree)."""


JOB_DEFAULTS = JobOptions()
"""No job flag set (a plain Megatron-LM script)."""
