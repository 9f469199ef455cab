"""Fit a hardware description's asymptotic efficiencies to the published runs' iteration times.

Used by `validate_published.py --fit`. Per hardware description, never per row:

1. the matmul (and, unless `--fix-memory`, the memory) asymptotic efficiency on the description's
   BF16 / FP16 rows of the fitted categories (`FIT_CATEGORIES`);
2. then, with those kept, the FP8 matmul efficiency (`efficiency.matmul_fp8`) on its FP8 rows:
   the BF16 and FP8 rows of the same model and layout (the GPT-3 175B series on H100) differ only
   in the GEMM precision, so their ratio determines it.

The residual of a row is predicted / measured - 1 of the modelled iteration time: the cost model
prices the overlap flags the runs use (costs/overlap.py). The A100 and 910B descriptions were
fitted earlier against an overlap bracket (their notes say so) and are not refitted here.
MoE rows are left out of the fit (their dispatch and grouped-GEMM terms are fitted on their own);
so is FSDP2 context-parallel row whose time is set by its ZeRO-3 collectives, not the GEMMs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
from published_runs import PublishedRun, hardware_for

from tinker_opt.hardware import EfficiencyCurve, HardwareSpec

FIT_CATEGORIES = ("dense", "dense_h100", "dense_blackwell")
"""Rows whose time the dense GEMM and memory efficiencies determine."""
Efficiencies = dict[str, dict[str, float]]
"""Per description name, the max_efficiency of the curves to replace (matmul, memory, matmul_fp8)."""
Cost = Callable[[list[PublishedRun], Efficiencies], list[float]]
"""Residuals of the rows under some efficiencies (validate_published's evaluation)."""


def fp8_curve(hardware: HardwareSpec, max_efficiency: float) -> EfficiencyCurve:
    """The FP8 matmul curve: the given asymptote, the half size of the BF16 curve scaled by the
    FP8 / BF16 peak ratio (ASSUMPTION: the same per-kernel overhead in microseconds)."""
    ratio = hardware.peak_tflops["fp8"] / hardware.peak_tflops["bf16"]
    return EfficiencyCurve(
        max_efficiency=max_efficiency, half_size=hardware.efficiency.matmul.half_size * ratio
    )


def with_efficiency(hardware: HardwareSpec, values: dict[str, float]) -> HardwareSpec:
    """The description with the named curves' asymptotic efficiencies replaced."""
    eff = hardware.efficiency
    changes = {
        name: replace(getattr(eff, name), max_efficiency=value)
        for name, value in values.items()
        if name in ("matmul", "memory")
    }
    if "matmul_fp8" in values:
        changes["matmul_fp8"] = fp8_curve(hardware, values["matmul_fp8"])
    return replace(hardware, efficiency=replace(eff, **changes))


def _grid_best(cost, candidates: list[dict[str, float]]) -> tuple[float, dict[str, float]]:
    return min(((cost(c), c) for c in candidates), key=lambda pair: pair[0])


def _dense_fit(kind, runs, cost, fix_memory, memory_now) -> dict[str, float]:
    """Coarse grid (matmul 0.50 ... 0.94 by 0.04, memory 0.4 ... 1.0 by 0.2), then a fine one
    (0.01, 0.05) around the coarse optimum: the cost is smooth in both parameters."""
    memories = [memory_now] if fix_memory else [round(b, 2) for b in np.arange(0.4, 1.0001, 0.2)]
    coarse = [
        {"matmul": round(a, 2), "memory": b}
        for a in np.arange(0.50, 0.9401, 0.04)
        for b in memories
    ]
    best_cost, best = _grid_best(cost, coarse)
    fine_memories = (
        [memory_now]
        if fix_memory
        else [
            round(b, 2)
            for b in np.arange(best["memory"] - 0.15, best["memory"] + 0.1501, 0.05)
            if 0.4 - 1e-9 <= b <= 1.0
        ]
    )
    fine = [
        {"matmul": round(a, 2), "memory": b}
        for a in np.arange(best["matmul"] - 0.03, best["matmul"] + 0.0301, 0.01)
        if a <= 1.0
        for b in fine_memories
    ]
    best_cost, best = min([(best_cost, best), _grid_best(cost, fine)], key=lambda p: p[0])
    print(
        f"fit {kind}: matmul max_efficiency {best['matmul']:.2f}, memory max_efficiency "
        f"{best['memory']:.2f}{' (kept)' if fix_memory else ''} (rms residual "
        f"{100 * np.sqrt(best_cost / len(runs)):.1f} % over {len(runs)} rows)",
        flush=True,
    )
    return best


def _fp8_fit(kind, runs, cost, dense: dict[str, float]) -> dict[str, float]:
    """The FP8 matmul asymptote (0.30 ... 0.95 by 0.05, then by 0.01) with the dense fit kept."""
    coarse = [dense | {"matmul_fp8": round(a, 2)} for a in np.arange(0.30, 0.9501, 0.05)]
    best_cost, best = _grid_best(cost, coarse)
    centre = best["matmul_fp8"]
    fine = [
        dense | {"matmul_fp8": round(a, 2)}
        for a in np.arange(centre - 0.04, centre + 0.0401, 0.01)
        if 0 < a <= 1.0
    ]
    best_cost, best = min([(best_cost, best), _grid_best(cost, fine)], key=lambda p: p[0])
    print(
        f"fit {kind}: FP8 matmul max_efficiency {best['matmul_fp8']:.2f} (rms residual "
        f"{100 * np.sqrt(best_cost / len(runs)):.1f} % over {len(runs)} FP8 rows)",
        flush=True,
    )
    return best


def fit_time_parameters(
    runs: list[PublishedRun], residuals: Cost, hardware_override: str | None, fix_memory: bool
) -> Efficiencies:
    """The fitted efficiencies per description (module docstring), least squares over grids."""
    kinds: dict[str, list[PublishedRun]] = {}
    for run in runs:
        if run.iteration_time_s is not None and run.category in FIT_CATEGORIES:
            kinds.setdefault(hardware_for(run, hardware_override).name, []).append(run)
    fitted: Efficiencies = {}
    for kind, kind_runs in kinds.items():
        bf16 = [r for r in kind_runs if r.strategy.get("precision") != "fp8"]
        fp8 = [r for r in kind_runs if r.strategy.get("precision") == "fp8"]

        def cost(values, rows, kind=kind) -> float:
            return float(sum(x**2 for x in residuals(rows, {kind: values})))

        memory_now = hardware_for(kind_runs[0], hardware_override).efficiency.memory.max_efficiency
        best = (
            _dense_fit(kind, bf16, lambda v, rows=bf16: cost(v, rows), fix_memory, memory_now)
            if bf16
            else {}
        )
        if fp8:
            best = _fp8_fit(kind, fp8, lambda v, rows=fp8: cost(v, rows), best)
        fitted[kind] = best
    print()
    return fitted
