"""The search the CLI calls: space -> coefficients -> presolve -> solver -> ranked Evaluations.

Pipeline for `cpsat` and `milp`:
  1. every valid outer configuration of the space (space.py);
  2. presolve over `cpus` processes: exact feasibility (bounds.is_feasible: some split fits) and a
     cheap valid lower bound on the iteration time of each feasible configuration;
  3. incumbents: the exact split (layer_split) of the top_k configurations with the smallest
     bounds; the best is the solver's hint;
  4. the model: every configuration whose cheap and tight (water-filling) bounds are both below the
     incumbent's time, plus the incumbent's own. The solver proves (or, at the time limit, bounds)
     the optimum over them. A configuration left out has a valid bound at least the incumbent's
     time, so it cannot be strictly better: the optimum over the whole space is exact;
  5. ranks 2..k: exact splits in increasing bound order until the next bound reaches the k-th
     best time found (so the top-k is exact too). Every split computed is kept in `pool`.
`enum` splits every configuration exactly, with no bound, in parallel: the reference.
Every strategy returned is re-evaluated with `CostModel.evaluate`, which must agree exactly with
the integer objective the solver or split reported.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tinker_opt.costs.evaluate import CostModel, Evaluation
from tinker_opt.errors import ConfigError, InfeasibleError
from tinker_opt.solve.bounds import lower_bound_x_v
from tinker_opt.solve.cpsat import solve_cpsat
from tinker_opt.solve.enumerate import Candidate, enumerate_splits, presolve
from tinker_opt.solve.infeasible import infeasible_message
from tinker_opt.solve.milp import solve_milp
from tinker_opt.solve.space import DEFAULT_MAX_MBS, SearchSpace, outer_choices
from tinker_opt.solve.stacks import best_split

SOLVERS = ("cpsat", "milp", "enum")
ENUM_POOL = 500
"""How many of the enumeration's strategies (fastest first) SearchResult.pool keeps."""


@dataclass(frozen=True)
class SearchResult:
    """What a search found, reported honestly."""

    solver: str
    status: str
    """optimal (proven), feasible (time limit: best found, with gap) or infeasible."""
    objective_ms: float
    bound_ms: float
    gap: float
    """(objective - bound) / objective; 0 when proven optimal."""
    solve_time_s: float
    top: list[Evaluation]
    num_candidates: int
    """Valid outer configurations of the space."""
    num_feasible: int = 0
    """Configurations in which some split fits in memory."""
    num_in_model: int = 0
    """Configurations left in the solver's model after bound pruning (all of them for enum)."""
    solver_time_s: float = 0.0
    """Time inside the CP-SAT / MILP solve (or the whole enumeration)."""
    warnings: list[str] = field(default_factory=list)
    pool: list[Evaluation] = field(default_factory=list)
    """Every strategy whose exact split the search computed, fastest first (top is its prefix);
    the alternatives and the time-memory picture of the results folder come from it."""

    @property
    def best(self) -> Evaluation:
        return self.top[0]


def search(
    cost_model: CostModel,
    *,
    solver: str = "cpsat",
    time_limit_s: float = 60,
    cpus: int = 2,
    top_k: int = 10,
    space: SearchSpace | None = None,
    progress: Callable[[str], None] | None = None,
    prune: bool = True,
) -> SearchResult:
    """Find the fastest strategy that fits; raise InfeasibleError when none does.

    `prune=False` puts every feasible configuration into the CP-SAT / MILP model (no bound
    pruning): slower, for benchmarks and checks of the formulation."""
    if solver not in SOLVERS:
        raise ConfigError(f"unknown solver {solver!r}; choose one of {list(SOLVERS)}")
    start = time.perf_counter()
    note = progress or (lambda message: None)
    space = space or SearchSpace()
    cost_model = cost_model.with_layer_form(space.layer_form)  # splits the framework can write
    outers = _outers(cost_model, space)
    note(f"{len(outers)} valid outer configurations")
    if solver == "enum":
        return _search_enum(cost_model, outers, cpus, time_limit_s, top_k, start)
    return _search_model(cost_model, outers, solver, cpus, time_limit_s, top_k, start, note, prune)


def _search_enum(cost_model, outers, cpus: int, time_limit_s: float, top_k: int, start: float):
    """Exhaustive enumeration (the reference): optimal when it finishes, else feasible."""
    found, complete = enumerate_splits(cost_model, outers, cpus=cpus, time_limit_s=time_limit_s)
    if not found and complete:
        raise InfeasibleError(infeasible_message(cost_model, outers))
    if not found:
        raise InfeasibleError(
            f"enumeration stopped at the {time_limit_s:g} s time limit before "
            "finding a strategy that fits; raise --time-limit or use --solver cpsat"
        )
    pool = [_evaluate(cost_model, cand) for cand in found[: max(top_k, ENUM_POOL)]]
    top = pool[:top_k]
    elapsed = time.perf_counter() - start
    # An interrupted enumeration proves nothing about the configurations it did not visit.
    bound_ns = top[0].time_ns_x_vpp / top[0].strategy.vpp if complete else 0.0
    return _result(
        "enum",
        "optimal" if complete else "feasible",
        top,
        bound_ns,
        start,
        len(outers),
        len(found),
        len(outers),
        cost_model,
        elapsed,
        pool,
    )


def _search_model(
    cost_model,
    outers,
    solver: str,
    cpus: int,
    time_limit_s: float,
    top_k: int,
    start: float,
    note,
    prune: bool,
):
    """Presolve, incumbents from the exact splits, bound pruning, then the CP-SAT / MILP model."""
    cheap = presolve(cost_model, outers, cpus=cpus)  # feasibility and cheap bounds, in parallel
    if not cheap:
        raise InfeasibleError(infeasible_message(cost_model, outers))
    coeffs = _LazyCoefficients(cost_model)
    bounds = _Bounds(coeffs, cheap)
    feasible = bounds.order
    hints = _split_all(coeffs, bounds.order[:top_k])
    note(f"{len(feasible)} fit in memory; incumbent {hints[0].time_ns / 1e6:.3f} ms")
    in_model = [
        o
        for o in bounds.order
        if not prune
        or o == hints[0].outer
        or (bounds.cheap[o] < hints[0].time_ns and bounds.tight(o) < hints[0].time_ns)
    ]
    note(f"{len(in_model)} configurations in the {solver} model")
    outcome = _solve(
        solver, coeffs, in_model, hints[0], time_limit_s - (time.perf_counter() - start), cpus
    )
    best = hints[0]
    if outcome.split is not None and outcome.split.time_ns_x_v / outcome.split_vpp < best.time_ns:
        best = Candidate(
            in_model[outcome.index], outcome.split, coeffs[in_model[outcome.index]].vpp
        )
    ranked = _complete_ranking(coeffs, bounds, [best] + hints, top_k)
    bound_ns = min(outcome.bound_ns, best.time_ns)
    pool = [_evaluate(cost_model, cand) for cand in ranked]
    return _result(
        solver,
        outcome.status,
        pool[:top_k],
        bound_ns,
        start,
        len(outers),
        len(feasible),
        len(in_model),
        cost_model,
        outcome.solve_time_s,
        pool,
    )


class _LazyCoefficients:
    """coeffs[outer]: the cost model's (cached) coefficients, built when first needed."""

    def __init__(self, cost_model: CostModel) -> None:
        self.cost_model = cost_model

    def __getitem__(self, outer):
        return self.cost_model.coefficients(outer)


class _Bounds:
    """Lower bounds on T (ns): the cheap one for every feasible configuration (and the visiting
    order), the tight one (water-filling) computed when needed."""

    def __init__(self, coeffs, cheap: dict) -> None:
        self.coeffs = coeffs
        self.cheap = cheap
        self.order = sorted(cheap, key=lambda o: (cheap[o], o.label()))
        self._tight: dict = {}

    def tight(self, outer) -> float:
        if outer not in self._tight:
            self._tight[outer] = lower_bound_x_v(self.coeffs[outer]) / self.coeffs[outer].vpp
        return self._tight[outer]


def _outers(cost_model: CostModel, space: SearchSpace):
    profiled = cost_model.blocks.profiled_mbs()
    max_mbs = space.max_mbs or max([DEFAULT_MAX_MBS] + profiled)
    return outer_choices(
        cost_model.model,
        cost_model.cluster.num_devices,
        cost_model.global_batch_size,
        space,
        cost_model.available,
        max_mbs,
    )


def _split_all(coeffs, outers) -> list[Candidate]:
    """Exact splits of these configurations, fastest first (the incumbents and hints)."""
    found = [Candidate(o, best_split(coeffs[o]), coeffs[o].vpp) for o in outers]
    return sorted(found, key=lambda cand: (cand.time_ns, cand.outer.label()))


def _complete_ranking(
    coeffs, bounds: _Bounds, known: list[Candidate], top_k: int
) -> list[Candidate]:
    """Ranks 2..k: exact splits in increasing bound order until the next bound reaches the k-th
    best time (a configuration not visited cannot enter the top k)."""
    by_outer = {}
    for cand in known:
        if cand.outer not in by_outer or cand.time_ns < by_outer[cand.outer].time_ns:
            by_outer[cand.outer] = cand
    kth = sorted(-cand.time_ns for cand in by_outer.values())[-top_k:]  # max-heap of the k best
    heapq.heapify(kth)
    for outer in bounds.order:
        full = len(kth) >= top_k
        if full and bounds.cheap[outer] >= -kth[0]:
            break
        if outer in by_outer or (full and bounds.tight(outer) >= -kth[0]):
            continue
        cand = Candidate(outer, best_split(coeffs[outer]), coeffs[outer].vpp)
        by_outer[outer] = cand
        heapq.heappush(kth, -cand.time_ns)
        if len(kth) > top_k:
            heapq.heappop(kth)
    return sorted(by_outer.values(), key=lambda cand: (cand.time_ns, cand.outer.label()))


@dataclass(frozen=True)
class _Outcome:
    status: str
    index: int | None
    split: object
    split_vpp: int
    bound_ns: float
    solve_time_s: float


def _solve(
    solver: str, coeffs, in_model, incumbent: Candidate, time_left_s: float, cpus: int
) -> _Outcome:
    items = [coeffs[o] for o in in_model]
    limit = max(time_left_s, 1.0)
    if solver == "cpsat":
        hint_index = in_model.index(incumbent.outer) if incumbent.outer in in_model else None
        hint = (hint_index, incumbent.split) if hint_index is not None else None
        scale = math.lcm(*[c.vpp for c in items])
        out = solve_cpsat(
            items,
            time_limit_s=limit,
            workers=cpus,
            hint=hint,
            upper_x_scale=int(incumbent.time_ns * scale),
        )
    else:
        out = solve_milp(items, time_limit_s=limit, workers=cpus)
    vpp = items[out.index].vpp if out.index is not None else 1
    return _Outcome(out.status, out.index, out.split, vpp, out.bound_ns, out.solve_time_s)


def _evaluate(cost_model: CostModel, cand: Candidate) -> Evaluation:
    strategy = cost_model.split_strategy(
        cand.outer, cand.split.layers, cand.split.recompute_num_layers
    )
    evaluation = cost_model.evaluate(strategy)
    # One truth: the solver's integer objective and evaluate() agree exactly.
    assert evaluation.time_ns_x_vpp == cand.split.time_ns_x_v, (
        strategy.label(),
        evaluation.time_ns_x_vpp,
        cand.split.time_ns_x_v,
    )
    assert evaluation.fits, strategy.label()
    return evaluation


def _result(
    solver,
    status,
    top,
    bound_ns,
    start,
    num_candidates,
    num_feasible,
    num_in_model,
    cost_model,
    solver_time_s: float,
    pool: list[Evaluation],
):
    objective_ms = top[0].iteration_time_ms
    bound_ms = min(bound_ns / 1e6, objective_ms)
    gap = 0.0 if status == "optimal" else (objective_ms - bound_ms) / objective_ms
    if status == "optimal" and gap == 0.0:
        bound_ms = objective_ms
    return SearchResult(
        solver=solver,
        status=status if status != "unknown" else "feasible",
        objective_ms=objective_ms,
        bound_ms=bound_ms,
        gap=gap,
        solve_time_s=time.perf_counter() - start,
        top=top,
        num_candidates=num_candidates,
        num_feasible=num_feasible,
        num_in_model=num_in_model,
        solver_time_s=solver_time_s,
        warnings=list(cost_model.warnings),
        pool=pool,
    )
