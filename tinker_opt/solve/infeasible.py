"""When nothing fits: the least memory any strategy needs and the knob that would help most."""

from __future__ import annotations

import numpy as np

from tinker_opt.choices import RecomputeMethod
from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve.layer_split import recompute_range
from tinker_opt.solve.row_split import row_tables
from tinker_opt.solve.stacks import stack_of
from tinker_opt.solve.virtual_split import virtual_rows

HINTS = {
    "weights_mb": "more pipeline or tensor parallelism (more devices) or a larger memory limit",
    "gradients_mb": "more pipeline or tensor parallelism (more devices) or a larger memory limit",
    "optimizer_mb": "the distributed optimizer (--dist-opt) with more data parallelism, or more devices",
    "activations_mb": "full recompute, a smaller micro-batch size, or sequence / context parallelism",
    "transient_mb": "a smaller micro-batch size or more tensor parallelism",
    "recompute_work_mb": "a smaller micro-batch size or more tensor parallelism",
}


def least_memory_split(
    c: SplitCoefficients,
) -> tuple[tuple[int, ...], int, int, tuple[int, ...] | None] | None:
    """(layers, r, peak bytes x v, per-virtual-stage list or None) of the split with the
    smallest peak memory (most recompute). `uniform` is taken with one layer per group, whose
    memory is block's with every layer recomputed (costs/recompute.py), so the same formulas
    serve. With uneven virtual stages the least-memory list of virtual_split.py's family; None
    when the family is empty (p v - 2 > L)."""
    uniform = c.method == RecomputeMethod.UNIFORM
    r = recompute_range(c)[-1]
    p, L = c.num_stages, c.num_layers
    if stack_of(c).uneven_virtual():
        rows = virtual_rows(L, p, c.vpp)
        if len(rows) == 0:
            return None
        counts = 1 if uniform else rows.max(axis=1)[:, None] if c.method else 0
        peaks = row_tables(c, rows, counts)[2].max(axis=1)
        best = int(np.argmin(peaks))
        chunks = tuple(int(n) for n in rows[best])
        layers = tuple(sum(chunks[s::p]) for s in range(p))
        r = 1 if uniform else max(chunks) if c.method else 0
        return layers, r, int(peaks[best]), chunks
    if c.vpp > 1:
        layers = (L // p,) * p
        r = 1 if uniform else r
        return layers, r, max(st.memory_bytes_x_v for st in c.stage_costs(layers, r)), None
    layers, peak_x_v = stack_of(c).least_peak(r)
    return layers, 1 if uniform else min(r, max(layers)), peak_x_v, None


def infeasible_message(cost_model, outers) -> str:
    """The InfeasibleError text: limit, least need, and the knob that helps most."""
    limit = cost_model.cluster.memory_limit_mb
    if not outers:
        return (
            f"no valid strategy for {cost_model.cluster.num_devices} devices and global batch "
            f"{cost_model.global_batch_size} under the search space; relax the space or change "
            "the device count / global batch size"
        )
    best = None
    for outer in outers:
        c = cost_model.coefficients(outer)
        found = least_memory_split(c)
        if found is not None and (best is None or found[2] / c.vpp < best[0]):
            best = (found[2] / c.vpp, outer, found)
    if best is None:  # every configuration's family of virtual-stage lists is empty
        return f"no strategy fits in {limit:g} MB per device; relax the search space"
    peak, outer, (layers, r, _, chunks) = best
    evaluation = cost_model.evaluate(cost_model.split_strategy(outer, layers, r, chunks))
    stage = max(evaluation.stages, key=lambda st: st.memory_mb)
    part = max(HINTS, key=lambda name: getattr(stage, name))
    hint = HINTS[part]
    if (
        part == "optimizer_mb" and outer.dist_opt
    ):  # already sharded: only more data-parallel ranks help
        hint = "more devices (the distributed optimizer already shards the states over data parallelism)"
    return (
        f"no strategy fits in {limit:g} MB per device; the best ({outer.label()}) needs at least "
        f"{peak / 2**20:.0f} MB, mostly {part[:-3].replace('_', ' ')} ({getattr(stage, part):.0f} MB): "
        f"try {hint}"
    )
