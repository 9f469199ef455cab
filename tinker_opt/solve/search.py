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
The presolved space stays with the result (ranking.Ranking): `SearchResult.deepen` ranks deeper
and `SearchResult.best_within` answers a narrowed space or a lower memory limit (the picks)
from the same presolve and bounds, never from a second full search.
Every strategy returned is re-evaluated with `CostModel.evaluate`, which must agree exactly with
the integer objective the solver or split reported.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tinker_opt.costs.evaluate import CostModel, Evaluation
from tinker_opt.errors import ConfigError, InfeasibleError
from tinker_opt.solve.cpsat import solve_cpsat
from tinker_opt.solve.enumerate import Candidate, enumerate_splits, presolve
from tinker_opt.solve.infeasible import infeasible_message
from tinker_opt.solve.layer_split import Split
from tinker_opt.solve.milp import solve_milp
from tinker_opt.solve.ranking import Ranking
from tinker_opt.solve.space import DEFAULT_MAX_MBS, SearchSpace, outer_choices

SOLVERS = ("cpsat", "milp", "enum")
ENUM_POOL = 500
"""How many strategies (fastest first) SearchResult.pool keeps at least (the enumeration splits
every configuration; the pool keeps this many, or the ranking's depth when deeper)."""


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
    ranking: Ranking | None = field(default=None, repr=False, compare=False)
    """The presolved space, for deeper rankings and the picks (ranking.py)."""

    @property
    def best(self) -> Evaluation:
        return self.top[0]

    def deepen(self, depth: int) -> SearchResult:
        """This result ranked `depth` deep, from the same presolve (exact like the first)."""
        assert self.ranking is not None  # search() sets it; None is only the field's default
        ranked = self.ranking.walk(depth)
        pool = [_evaluate(self.ranking, cand) for cand in ranked[: max(depth, ENUM_POOL)]]
        return dataclasses.replace(self, top=pool[:depth], pool=pool)

    def best_within(self, space: SearchSpace, memory_fraction: float = 1.0) -> Evaluation:
        """The fastest strategy of a narrower `space` (its outers a subset of the search's or
        presolved now), under `memory_fraction` of the search's memory limit (the same cost model
        under lowered rules, split_rules.py); raises InfeasibleError when none fits."""
        ranking = self.ranking
        assert ranking is not None  # search() sets it; None is only the field's default
        allowed = _narrowed_outers(ranking, space)
        ranking.include(allowed)
        searched = ranking.cost_model
        under = (
            None
            if memory_fraction == 1
            else searched.under(searched.rules.lowered(memory_fraction))
        )
        found = ranking.walk(1, allowed.__contains__, under)
        if not found:
            raise InfeasibleError("no strategy of the narrowed space fits")
        return _evaluate(ranking, found[0], under)


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
    # The splits the framework can write: the search's rule, handed to the cost model's splits.
    cost_model = cost_model.under(
        dataclasses.replace(
            cost_model.rules, layer_form=space.layer_form, uneven_vpp=space.uneven_vpp
        )
    )
    outers = _outers(cost_model, space)
    note(f"{len(outers)} valid outer configurations")
    if solver == "enum":
        return _search_enum(cost_model, outers, space, cpus, time_limit_s, top_k, start)
    return _search_model(
        cost_model, outers, space, solver, cpus, time_limit_s, top_k, start, note, prune
    )


def _search_enum(
    cost_model, outers, space, cpus: int, time_limit_s: float, top_k: int, start: float
):
    """Exhaustive enumeration (the reference): optimal when it finishes, else feasible."""
    found, complete = enumerate_splits(cost_model, outers, cpus=cpus, time_limit_s=time_limit_s)
    if not found and complete:
        raise InfeasibleError(infeasible_message(cost_model, outers))
    if not found:
        raise InfeasibleError(
            f"enumeration stopped at the {time_limit_s:g} s time limit before "
            "finding a strategy that fits; raise --time-limit or use --solver cpsat"
        )
    ranking = Ranking(cost_model, {cand.outer: cand.time_ns for cand in found}, outers, space)
    ranking.splits = {cand.outer: cand for cand in found}
    pool = [_evaluate(ranking, cand) for cand in found[: max(top_k, ENUM_POOL)]]
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
        ranking,
    )


def _search_model(
    cost_model,
    outers,
    space,
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
    ranking = Ranking(cost_model, cheap, outers, space)
    feasible = ranking.order
    hints = sorted(
        (ranking.split(o) for o in ranking.order[:top_k]),
        key=lambda cand: (cand.time_ns, cand.outer.label()),
    )
    note(f"{len(feasible)} fit in memory; incumbent {hints[0].time_ns / 1e6:.3f} ms")
    in_model = [
        o
        for o in ranking.order
        if not prune
        or o == hints[0].outer
        or (ranking.cheap[o] < hints[0].time_ns and ranking.tight(o) < hints[0].time_ns)
    ]
    note(f"{len(in_model)} configurations in the {solver} model")
    outcome = _solve(
        solver, cost_model, in_model, hints[0], time_limit_s - (time.perf_counter() - start), cpus
    )
    best = hints[0]
    if outcome.split is not None and outcome.split.time_ns_x_v / outcome.split_vpp < best.time_ns:
        assert outcome.index is not None  # a solver's split comes with its configuration's index
        best = Candidate(in_model[outcome.index], outcome.split, outcome.split_vpp)
        ranking.keep(best)
    ranked = ranking.walk(top_k)
    bound_ns = min(outcome.bound_ns, best.time_ns)
    pool = [_evaluate(ranking, cand) for cand in ranked[: max(top_k, ENUM_POOL)]]
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
        ranking,
    )


LAYOUT_FILTERS = ("tp", "pp", "cp", "ep")
"""SearchSpace tuples that restrict the Strategy field of the same name and nothing else
(space._allowed): narrowing one keeps exactly the outers whose field it admits."""


def _narrowed_outers(ranking: Ranking, space: SearchSpace) -> set:
    """The outer configurations of `space`: the search's own filtered, when `space` narrows only
    layout tuples to subsets of the search's; else the space listed anew."""
    searched = ranking.space
    changed = [
        f.name
        for f in dataclasses.fields(SearchSpace)
        if getattr(space, f.name) != getattr(searched, f.name)
    ]
    if all(
        name in LAYOUT_FILTERS
        and getattr(space, name) is not None
        and (
            getattr(searched, name) is None
            or set(getattr(space, name)) <= set(getattr(searched, name))
        )
        for name in changed
    ):
        return {
            o for o in ranking.outers if all(getattr(o, n) in getattr(space, n) for n in changed)
        }
    return set(_outers(ranking.cost_model, space))


def _outers(cost_model: CostModel, space: SearchSpace):
    profiled = cost_model.blocks.profiled_mbs()
    max_mbs = space.max_mbs or max([DEFAULT_MAX_MBS] + profiled)
    outers = outer_choices(
        cost_model.model,
        cost_model.cluster.num_devices,
        cost_model.global_batch_size,
        space,
        cost_model.available,
        max_mbs,
    )
    cost_model.listed.update(outers)  # they pass the outer rules: not checked again
    return outers


@dataclass(frozen=True)
class _Outcome:
    status: str
    index: int | None
    split: Split | None
    split_vpp: int
    bound_ns: float
    solve_time_s: float


def _solve(
    solver: str, cost_model, in_model, incumbent: Candidate, time_left_s: float, cpus: int
) -> _Outcome:
    """The CP-SAT / MILP model over the configurations the bounds left. When they left the
    incumbent alone, there is nothing to solve: its split is the exact best of its configuration
    (stacks.best_split) and every other configuration's lower bound is at least its time, so it
    is proven optimal without building the model (nor importing the solver: issue 30)."""
    if list(in_model) == [incumbent.outer]:
        return _Outcome("optimal", None, None, 1, incumbent.time_ns, 0.0)
    items = [cost_model.coefficients(o) for o in in_model]
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


def _evaluate(ranking: Ranking, cand: Candidate, cost_model: CostModel | None = None) -> Evaluation:
    """The Evaluation of an exact split under `cost_model` (None: the ranking's, whose
    evaluations are kept, since deeper rankings and the picks ask again)."""
    if cost_model is None:
        if cand not in ranking.evaluations:
            ranking.evaluations[cand] = _evaluate(ranking, cand, ranking.cost_model)
        return ranking.evaluations[cand]
    strategy = cost_model.split_strategy(
        cand.outer, cand.split.layers, cand.split.recompute_num_layers, cand.split.chunks
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
    ranking: Ranking,
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
        ranking=ranking,
    )
