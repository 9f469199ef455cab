"""StageBreakdown: one pipeline stage of an Evaluation, typed until the JSON is written.

Built by `CostModel.evaluate` (costs/evaluate.py) from the integer stage costs, completed with
the framework's own memory (costs/framework_memory.py); `to_dict` is its summary.json /
`simulate --json` object (ARCHITECTURE.md, "File formats").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StageBreakdown:
    """One pipeline stage of an Evaluation: where its time goes and what its memory holds (the
    memory parts add up to memory_mb: weights + mask + gradients + optimizer + transient +
    activations + recompute work). Typed until the JSON is written (`to_dict`)."""

    stage: int
    layers: int
    recompute_layers: int
    time_ms: float
    """One micro-batch through the stage, collectives included (hidden ones not)."""
    memory_mb: float
    compute_ms: float
    comm_ms: float
    recompute_ms: float
    weights_mb: float
    attention_mask_mb: float
    gradients_mb: float
    optimizer_mb: float
    activations_mb: float
    transient_mb: float
    recompute_work_mb: float
    tail_ms: float
    comm_hidden_ms: float
    """Communication hidden behind compute (not in time_ms / tail_ms; costs/overlap.py)."""
    sync_ms: float
    sync_hidden_ms: float
    allocated_mb: float | None = None
    """What the framework allocates at the peak (costs/framework_memory.py); None before it is
    added (evaluation_of alone)."""
    reserved_mb: float | None = None
    device_mb: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of summary.json and `simulate --json` (framework keys once known)."""
        out = {name: getattr(self, name) for name in _FIELDS}  # plain values: no deep copy
        for key in ("allocated_mb", "reserved_mb", "device_mb"):
            if out[key] is None:
                del out[key]
        return out


_FIELDS = tuple(f.name for f in dataclasses.fields(StageBreakdown))
"""The fields in declaration order (the JSON object's key order, as dataclasses.asdict gives)."""
