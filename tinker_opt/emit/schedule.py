"""The pipeline schedule of a strategy as timed operations, for the timeline picture.

Megatron's schedules (megatron/core/pipeline_parallel/schedules.py in NVIDIA/Megatron-LM):

* 1F1B (`forward_backward_pipelining_without_interleaving`): stage s runs min(p - s - 1, m)
  warm-up forwards, then alternates one forward and one backward, then the remaining backwards
  (the flush).
* Interleaved (`forward_backward_pipelining_with_interleaving`), v chunks per stage: m*v virtual
  micro-batches; stage s runs (p - s - 1) * 2 + (v - 1) * p warm-up forwards; the k-th forward
  works on chunk (k mod p*v) // p of micro-batch (k // (p*v)) * p + k mod p, the k-th backward on
  the chunks in reverse order.

Each operation starts when its stage is free and its input has arrived (the forward of the
previous stage, or of the last stage's previous chunk; the backward of the next stage). Durations
come from the Evaluation: a stage's time per micro-batch, less its recompute, is split between
forward and backward as 1 : 2 (the usual ratio of a transformer layer's backward to its forward,
Narayanan et al. 2021; the cost model keeps only their sum), divided evenly over the v chunks; a
recompute runs just before its backward. Communication is inside those times, as in the cost model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FORWARD_SHARE = 1 / 3
"""Forward share of a stage's forward + backward time (drawing only; the cost model uses the sum)."""


@dataclass(frozen=True)
class Op:
    """One box of the timeline: kind F (forward), R (recompute) or B (backward), times in ms."""

    kind: str
    stage: int
    chunk: int
    microbatch: int
    start: float
    end: float


def num_microbatches(evaluation: Mapping[str, Any], global_batch_size: int) -> int:
    strategy = evaluation["strategy"]
    return global_batch_size // (strategy["dp"] * strategy["mbs"])


def _order(stage: int, p: int, v: int, m: int) -> list[tuple[str, int, int]]:
    """(kind, chunk, micro-batch) in the order stage `stage` runs them."""
    total = m * v

    def virtual(k: int, forward: bool) -> tuple[int, int]:
        chunk = (k % (p * v)) // p
        return (chunk if forward else v - 1 - chunk), (k // (p * v)) * p + k % p

    warmup = min(p - stage - 1, m) if v == 1 else min((p - stage - 1) * 2 + (v - 1) * p, total)
    order = [("F",) + virtual(k, True) for k in range(warmup)]
    for k in range(total - warmup):
        order.append(("F",) + virtual(k + warmup, True))
        order.append(("B",) + virtual(k, False))
    order += [("B",) + virtual(k, False) for k in range(total - warmup, total)]
    return order


def pipeline_ops(
    evaluation: Mapping[str, Any], global_batch_size: int, *, max_microbatches: int = 8
) -> tuple[list[Op], int, int]:
    """(timed operations, micro-batches shown, micro-batches of the iteration). At most
    max(max_microbatches, p) micro-batches are drawn (a multiple of p when interleaved): enough
    for the warm-up, a steady phase and the flush."""
    strategy = evaluation["strategy"]
    p, v = strategy["pp"], strategy["vpp"]
    total = num_microbatches(evaluation, global_batch_size)
    shown = min(total, max(max_microbatches, p))
    if v > 1:
        shown = max(p, shown // p * p)
    stages = evaluation["stages"]
    recompute = [st.get("recompute_ms", 0.0) / v for st in stages]
    work = [(st["time_ms"] / v) - r for st, r in zip(stages, recompute, strict=True)]
    forward = [w * FORWARD_SHARE for w in work]
    backward = [w - f for w, f in zip(work, forward, strict=True)]
    orders = [_order(s, p, v, shown) for s in range(p)]
    done: dict[tuple[str, int, int, int], float] = {}
    position, free, ops = [0] * p, [0.0] * p, []
    while any(position[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            while position[s] < len(orders[s]):
                kind, chunk, micro = orders[s][position[s]]
                ready = _ready(kind, s, chunk, micro, p, v, done)
                if ready is None:
                    break
                start = max(free[s], ready)
                if kind == "B" and recompute[s] > 0:
                    ops.append(Op("R", s, chunk, micro, start, start + recompute[s]))
                    start += recompute[s]
                end = start + (forward[s] if kind == "F" else backward[s])
                ops.append(Op(kind, s, chunk, micro, start, end))
                done[(kind, s, chunk, micro)] = free[s] = end
                position[s] += 1
                progressed = True
        if not progressed:
            raise RuntimeError(
                f"pipeline schedule p={p} v={v} m={shown} deadlocked"
            )  # a bug, not user input
    return ops, shown, total


def _ready(kind: str, s: int, chunk: int, micro: int, p: int, v: int, done) -> float | None:
    """When the input of an operation has arrived (0 when it has none), None while it has not."""
    if kind == "F":
        if s > 0:
            return done.get(("F", s - 1, chunk, micro))
        return done.get(("F", p - 1, chunk - 1, micro)) if chunk > 0 else 0.0
    if s < p - 1:
        return done.get(("B", s + 1, chunk, micro))
    if chunk < v - 1:
        return done.get(("B", 0, chunk + 1, micro))
    return done.get(("F", s, chunk, micro))
