"""Exhaustive enumeration: every outer configuration with its exact split (the reference).

`enumerate_splits` visits every outer configuration of the space, builds its coefficients and
runs the exact split (stacks.best_split, vectorised over stages and candidate values) in
parallel over `cpus` processes; nothing is pruned by bounds, so it is the honest baseline the
solvers are checked against. `brute_force` tries every composition of the layers into stages and
every recompute count through the general `stage_costs` path: the reference of the reference, for
the small instances of the tests.
"""

from __future__ import annotations

import itertools
import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinker_opt.choices import Recompute
from tinker_opt.rules import form_allows
from tinker_opt.solve.layer_split import Split, recompute_range
from tinker_opt.solve.stacks import best_split
from tinker_opt.solve.virtual_split import in_family
from tinker_opt.strategy import Strategy

if TYPE_CHECKING:
    from tinker_opt.costs.evaluate import CostModel

_WORKER_MODEL: CostModel | None = None
"""The CostModel inherited by forked workers (set before the pool starts)."""


@dataclass(frozen=True)
class Candidate:
    """The best split of one outer configuration."""

    outer: Strategy
    split: Split
    vpp: int

    @property
    def time_ns(self) -> float:
        return self.split.time_ns_x_v / self.vpp


def _solve_chunk(outers: Sequence[Strategy]) -> list[Candidate]:
    assert _WORKER_MODEL is not None  # _map_chunks sets it before any chunk runs
    found = []
    for outer in outers:
        if _WORKER_MODEL.static_overflows(outer):  # no split fits (CostModel.static_overflows)
            continue
        coeffs = _WORKER_MODEL.coefficients(outer)
        split = best_split(coeffs)
        if split is not None:
            found.append(Candidate(outer, split, coeffs.vpp))
    return found


def _presolve_chunk(outers: Sequence[Strategy]) -> list[tuple[Strategy, float]]:
    """(outer, cheap lower bound on T in ns) of each configuration in which some split fits."""
    from tinker_opt.solve.bounds import all_feasible, lower_bound_x_v

    assert _WORKER_MODEL is not None  # _map_chunks sets it before any chunk runs
    outers = [o for o in outers if not _WORKER_MODEL.static_overflows(o)]  # no split fits
    coeffs = [_WORKER_MODEL.coefficients(outer) for outer in outers]
    return [
        (outer, lower_bound_x_v(c, tight=False) / c.vpp)
        for outer, c, fits in zip(outers, coeffs, all_feasible(coeffs), strict=True)
        if fits
    ]


def presolve(cost_model, outers: Sequence[Strategy], *, cpus: int = 1) -> dict[Strategy, float]:
    """Feasible configurations and their cheap bounds, computed over `cpus` processes."""
    found, _ = _map_chunks(cost_model, outers, _presolve_chunk, cpus, None, None)
    return dict(found)


def enumerate_splits(
    cost_model,
    outers: Sequence[Strategy],
    *,
    cpus: int = 1,
    progress: Callable[[int, int], None] | None = None,
    time_limit_s: float | None = None,
) -> tuple[list[Candidate], bool]:
    """Best split of every outer configuration that fits, fastest first, and whether every
    configuration was visited (False when the time limit stopped it)."""
    results, complete = _map_chunks(cost_model, outers, _solve_chunk, cpus, progress, time_limit_s)
    return sorted(results, key=lambda cand: (cand.time_ns, cand.outer.label())), complete


def _map_chunks(cost_model, outers, work, cpus, progress, time_limit_s):
    """Run `work` over interleaved chunks of `outers` in forked processes; (results, complete)."""
    global _WORKER_MODEL
    _WORKER_MODEL = cost_model
    workers = max(cpus, 1)
    num_chunks = max(1, min(len(outers), workers * 16))
    chunks = [list(outers[i::num_chunks]) for i in range(num_chunks)]
    deadline = time.perf_counter() + time_limit_s if time_limit_s else float("inf")
    if workers == 1 or len(outers) < 64:
        results, done = _run_serial(work, chunks, deadline, progress)
    else:
        results, done = _run_pool(work, chunks, workers, deadline, progress)
    return results, done == len(chunks)


def _run_serial(work, chunks, deadline, progress):
    results, done = [], 0
    for chunk in chunks:
        if time.perf_counter() > deadline:
            break
        results += work(chunk)
        done += 1
        if progress:
            progress(done, len(chunks))
    return results, done


def _run_pool(work, chunks, workers, deadline, progress):
    results, done = [], 0
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(work, chunk) for chunk in chunks]
        try:
            for future in as_completed(
                futures,
                timeout=max(deadline - time.perf_counter(), 0)
                if deadline != float("inf")
                else None,
            ):
                results += future.result()
                done += 1
                if progress:
                    progress(done, len(chunks))
        except FuturesTimeout:
            for future in futures:
                future.cancel()
    return results, done


def compositions(total: int, parts: int):
    """Every way to write `total` as an ordered sum of `parts` positive integers."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0,) + cuts + (total,)
        yield tuple(bounds[i + 1] - bounds[i] for i in range(parts))


def _brute_splits(coeffs):
    """(layers, chunks) of every split brute force tries: every composition of the layer form;
    with vpp the even split, or where pp x vpp does not divide the layers every per-virtual-stage
    list of virtual_split's family (each virtual stage 0 or more layers, filtered by its rule)."""
    L, p, v = coeffs.num_layers, coeffs.num_stages, coeffs.vpp
    if v == 1:
        return [
            (layers, None)
            for layers in compositions(L, p)
            if form_allows(layers, coeffs.layer_form)
        ]
    if L % (p * v) == 0 or not coeffs.uneven_vpp:
        return [((L // p,) * p, None)] if L % (p * v) == 0 else []
    found = []
    for padded in compositions(L + p * v, p * v):
        chunks = tuple(n - 1 for n in padded)
        if in_family(chunks):
            found.append((tuple(sum(chunks[s::p]) for s in range(p)), chunks))
    return found


def brute_force(cost_model, outers: Sequence[Strategy]) -> list[Candidate]:
    """Best split of each outer configuration by trying every composition and recompute count."""
    found = []
    for outer in outers:
        coeffs = cost_model.coefficients(outer)
        best = None
        for layers, chunks in _brute_splits(coeffs):
            largest = max(chunks) if chunks is not None else max(layers) // coeffs.vpp
            counts: Sequence[int] = recompute_range(coeffs)
            if coeffs.outer.recompute == Recompute.FULL:
                counts = range(1, largest + 1)
            if coeffs.recompute_all and coeffs.outer.recompute == Recompute.FULL:
                counts = [largest]  # every layer of each chunk, whatever the split
            for r in counts:
                if r > largest:
                    break
                stages = coeffs.stage_costs(layers, r, chunks)
                if (
                    max(st.memory_bytes_x_v for st in stages)
                    > coeffs.vpp * coeffs.memory_limit_bytes
                ):
                    continue
                value = coeffs.iteration_time_ns_x_v(stages)
                if best is None or value < best.time_ns_x_v:
                    best = Split(layers, r, value, chunks)
        if best is not None:
            found.append(Candidate(outer, best, coeffs.vpp))
    return sorted(found, key=lambda cand: (cand.time_ns, cand.outer.label()))
