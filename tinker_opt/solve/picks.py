"""Choices a user can act on: the script's own strategy, near-copies folded, named picks, Pareto front.

* `current_evaluation`: the strategy the launch script runs now (as `inspect` reads it), under the
  same CostModel as the search: its Evaluation (with `fits` false and `over_by_mb` where it is
  modelled above the memory limit: still priced and compared), or `{"error": ...}` naming the rule
  it breaks or why it cannot be compared.
* `fold_near_copies`: a ranked strategy is folded into a higher-ranked one of the same parallel
  layout (tp, pp, dp, cp, ep, vpp) when it is no faster and saves no more than FOLD_MEMORY_SHARE
  of that one's memory: it offers nothing the higher one does not (typically the same layout with
  selective recompute or one more recomputed layer, a fraction of a MB lighter and slower).
* `pareto_front`: the strategies no other one beats in both time and memory.
* Picks: the fastest; the fastest keeping the checkpoint's tp / pp / ep (no conversion) when the
  script loads one (`--load`); the fastest leaving `--headroom` percent of the memory limit free; the fastest
  without pipeline parallelism. Each pick is exact: the ranked list answers when its first entry
  (or, for a rule on the layout alone, any entry of the exact top-k) qualifies; otherwise the
  search's own presolve answers the rule (a narrower SearchSpace, or the memory limit less the
  headroom; SearchResult.best_within), with no second search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tinker_opt.errors import ConfigError, InfeasibleError, TinkerError
from tinker_opt.script.noop_layers import computing_layer_strategy
from tinker_opt.solve.space import SearchSpace
from tinker_opt.strategy import Strategy

Evaluation = dict[str, Any]
"""An Evaluation as its JSON dict (ARCHITECTURE.md)."""

LAYOUT_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp")
DEFAULT_HEADROOM_PCT = 10.0
FOLD_MEMORY_SHARE = 0.01
"""A slower strategy of the same layout must save more than this share of memory to stay listed."""


def layout(evaluation: Evaluation) -> tuple[int, ...]:
    """The parallel layout that near-copies share."""
    return tuple(evaluation["strategy"][key] for key in LAYOUT_KEYS)


def fold_near_copies(ranked: Sequence[Evaluation]) -> tuple[list[Evaluation], int]:
    """(the ranked list without near-copies, how many were folded); `ranked` is fastest first."""
    kept: list[Evaluation] = []
    for evaluation in ranked:
        if any(
            layout(k) == layout(evaluation)
            and evaluation["iteration_time_ms"] >= k["iteration_time_ms"]
            and evaluation["peak_memory_mb"] >= (1 - FOLD_MEMORY_SHARE) * k["peak_memory_mb"]
            for k in kept
        ):
            continue
        kept.append(evaluation)
    return kept, len(ranked) - len(kept)


def pareto_front(evaluations: Sequence[Evaluation]) -> list[Evaluation]:
    """The time-memory Pareto front, fastest first: each uses strictly less memory than every faster one."""
    front: list[Evaluation] = []
    for evaluation in sorted(
        evaluations, key=lambda e: (e["iteration_time_ms"], e["peak_memory_mb"])
    ):
        if not front or evaluation["peak_memory_mb"] < front[-1]["peak_memory_mb"]:
            front.append(evaluation)
    return front


def speedup(best: Evaluation | None, current: dict[str, Any] | None) -> float | None:
    """How many times faster the best strategy is than the script's own (None when not comparable:
    no script, or a strategy the rules refuse). A current strategy modelled above the memory limit
    is compared too; `current_note` says so beside the figure."""
    if not best or not current or "error" in current:
        return None
    return current["iteration_time_ms"] / best["iteration_time_ms"]


def current_note(current: dict[str, Any] | None) -> str | None:
    """Why the script's own strategy is not a plain comparison: the rule it breaks, or the memory
    it is modelled to lack (None: it fits, or no script is known)."""
    if current is None:
        return None
    if "error" in current:
        return str(current["error"])
    if current.get("fits", True):
        return None
    over = current["over_by_mb"]
    worst = max(current["stages"], key=lambda st: st["memory_mb"])
    return (
        f"the script's strategy is modelled not to fit: it needs {worst['memory_mb']:.0f} MB on "
        f"stage {worst['stage']}, {over:.0f} MB more than the {worst['memory_mb'] - over:.0f} MB limit"
    )


def comparison_sentence(best: Evaluation, current: Evaluation) -> str:
    """The best strategy against the script's own (both evaluated), in one sentence; a current
    strategy that does not fit is named as such."""
    ratio = current["iteration_time_ms"] / best["iteration_time_ms"]
    times = (
        f"{current['iteration_time_ms']:.1f} ms -> {best['iteration_time_ms']:.1f} ms per iteration"
    )
    caveat = "" if current.get("fits", True) else f" ({current_note(current)})"
    if ratio >= 1:
        return f"the best strategy is {ratio:.2f}x as fast as the script's own ({times}){caveat}"
    return (
        f"the script's own strategy is modelled {1 / ratio:.2f}x faster than the best found ({times}): "
        f"it uses something the search space leaves out{caveat}"
    )


# ---------------------------------------------------------------------------------------------
# The script's own strategy
# ---------------------------------------------------------------------------------------------


def current_evaluation(cost_model, info) -> dict[str, Any]:
    """The script's own strategy under `cost_model`: its Evaluation dict (a strategy modelled above
    the memory limit keeps `fits` false and gains `over_by_mb`, the worst stage's excess: the user
    still sees its time and the speed-up against it), or {"error": ..., "strategy": ...} when it
    cannot be compared (another device count, a rule it breaks)."""
    strategy = computing_layer_strategy(
        info.train.strategy, info.model.noop_layers, info.num_layers_in_script
    )
    script_devices = info.train.nnodes * info.train.nproc_per_node
    if script_devices != cost_model.cluster.num_devices:
        return {
            "error": f"the script runs on {script_devices} devices ({info.train.nnodes} x "
            f"{info.train.nproc_per_node}) but the search plans for {cost_model.cluster.num_devices}; "
            "its own strategy cannot be compared",
            "strategy": strategy.to_dict(),
        }
    try:
        evaluation = cost_model.evaluate(strategy).to_dict()
    except TinkerError as exc:
        return {"error": " ".join(str(exc).split()), "strategy": strategy.to_dict()}
    if not evaluation["fits"]:
        worst = max(st["memory_mb"] for st in evaluation["stages"])
        evaluation["over_by_mb"] = worst - cost_model.cluster.memory_limit_mb
    return evaluation


# ---------------------------------------------------------------------------------------------
# Named picks
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PickRule:
    """One named pick: which strategies qualify and how to search for the fastest of them."""

    name: str
    title: str
    """What the pick means, for the tables and the report."""
    accepts: Callable[[Evaluation], bool]
    layout_only: bool
    """The rule looks at the layout alone (any entry of the exact top-k answers it)."""
    space: Callable[[SearchSpace], SearchSpace] | None = None
    """Narrows the search space for the restricted search (None: the same space)."""
    memory_fraction: float = 1.0
    """The share of the memory limit the restricted search may use."""


def pick_rules(
    memory_limit_mb: float,
    *,
    headroom_pct: float = DEFAULT_HEADROOM_PCT,
    checkpoint: Strategy | None = None,
) -> list[PickRule]:
    """The picks (fastest, keeps_checkpoint, headroom, no_pipeline); `checkpoint` is the script's
    strategy when it loads a checkpoint;
    `headroom_pct` is the share of the memory limit the headroom pick leaves free, in percent."""
    if not 0 <= headroom_pct < 100:
        raise ConfigError(
            f"headroom must be a percentage in [0, 100), got {headroom_pct:g}; e.g. 10 for 10 %"
        )
    headroom = headroom_pct / 100
    rules = [PickRule("fastest", "fastest", lambda e: True, True)]
    if checkpoint is not None:
        keep = (checkpoint.tp, checkpoint.pp, checkpoint.ep)
        rules.append(
            PickRule(
                "keeps_checkpoint",
                f"fastest keeping the checkpoint's tp{keep[0]} pp{keep[1]} ep{keep[2]} (no conversion)",
                lambda e: (e["strategy"]["tp"], e["strategy"]["pp"], e["strategy"]["ep"]) == keep,
                True,
                lambda s: dataclasses.replace(s, tp=(keep[0],), pp=(keep[1],), ep=(keep[2],)),
            )
        )
    cap = (1 - headroom) * memory_limit_mb
    rules.append(
        PickRule(
            "headroom",
            f"fastest with at least {headroom:.0%} of the memory limit free (peak <= {cap:.0f} MB)",
            lambda e: e["peak_memory_mb"] <= cap,
            False,
            None,
            1 - headroom,
        )
    )
    rules.append(
        PickRule(
            "no_pipeline",
            "fastest without pipeline parallelism (pp 1)",
            lambda e: e["strategy"]["pp"] == 1,
            True,
            lambda s: dataclasses.replace(s, pp=(1,)),
        )
    )
    return rules


RestrictedSearch = Callable[[SearchSpace, float], Evaluation]
"""(narrowed space, memory fraction) -> the fastest Evaluation there; raises InfeasibleError."""


def find_picks(
    ranked: Sequence[Evaluation],
    rules: Sequence[PickRule],
    space: SearchSpace,
    restricted_search: RestrictedSearch,
) -> tuple[dict[str, Evaluation], dict[str, str]]:
    """({name: Evaluation}, {name: why there is none}) for each rule, fastest first in `ranked`
    (the exact top-k of the search, before folding)."""
    picks: dict[str, Evaluation] = {}
    missing: dict[str, str] = {}
    for rule in rules:
        candidates = ranked if rule.layout_only else ranked[:1]
        found = next((e for e in candidates if rule.accepts(e)), None)
        if found is None:
            try:
                found = restricted_search(
                    rule.space(space) if rule.space else space, rule.memory_fraction
                )
            except TinkerError as exc:  # nothing fits, or the narrowed space is empty
                reason = (
                    "nothing fits"
                    if isinstance(exc, InfeasibleError)
                    else " ".join(str(exc).split())
                )
                missing[rule.name] = f"none: {rule.title} ({reason})"
                continue
        picks[rule.name] = found
    return picks, missing


# ---------------------------------------------------------------------------------------------
# Everything the results folder shows beside the ranking
# ---------------------------------------------------------------------------------------------

POOL_FACTOR = 5
"""The search first ranks POOL_FACTOR x top_k strategies, so that folding near-copies leaves top_k."""
MAX_POOL = 400
"""The deepest ranking `deep_ranking` asks for."""


def deep_ranking(run_search: Callable[[int], Any], top_k: int):
    """The SearchResult of `run_search(depth)` ranked deep enough that top_k strategies remain after
    folding near-copies: POOL_FACTOR x top_k first, four times deeper while too few remain, until
    the space is exhausted or MAX_POOL is reached. One search: the deeper rankings come from its
    presolve (SearchResult.deepen)."""
    depth = POOL_FACTOR * top_k
    result = run_search(depth)
    while True:
        kept, _ = fold_near_copies([e.to_dict() for e in result.top])
        if len(kept) >= top_k or len(result.top) < depth or depth >= MAX_POOL:
            return result
        depth = min(4 * depth, MAX_POOL)
        result = result.deepen(depth)


@dataclass(frozen=True)
class Choices:
    """The ranked list without near-copies, the script's own strategy, the picks and the front."""

    top: list[Evaluation]
    folded: int
    current: dict[str, Any] | None
    picks: dict[str, Evaluation]
    pick_titles: dict[str, str]
    picks_missing: dict[str, str]
    pareto: list[Evaluation]
    evaluated: list[Evaluation]


def choices(
    result,
    cost_model,
    info,
    space: SearchSpace,
    *,
    top_k: int,
    headroom_pct: float,
    restricted_search: RestrictedSearch,
    current_cost_model=None,
) -> Choices:
    """Fold, pick and compare, from a SearchResult ranked POOL_FACTOR x top_k deep; `info` is the
    launch script's ScriptInfo (None when no script is known). `current_cost_model` prices the
    script's own strategy when it differs from the search's (`search --allow-fp8` ranking FP8
    for a BF16 script: the script's strategy keeps the script's precision)."""
    as_dicts: dict[int, Evaluation] = {}  # each Evaluation written once (top is pool's head)
    for e in [*result.top, *result.pool]:
        if id(e) not in as_dicts:
            as_dicts[id(e)] = e.to_dict()
    ranked = [as_dicts[id(e)] for e in result.top]
    evaluated = [as_dicts[id(e)] for e in result.pool] or ranked
    top, _ = fold_near_copies(ranked)
    top = top[:top_k]
    folded = sum(1 for e in ranked if e["iteration_time_ms"] <= top[-1]["iteration_time_ms"]) - len(
        top
    )
    current = (
        current_evaluation(current_cost_model or cost_model, info) if info is not None else None
    )
    checkpoint = info.train.strategy if info is not None and info.train.loads_checkpoint else None
    rules = pick_rules(
        cost_model.cluster.memory_limit_mb, headroom_pct=headroom_pct, checkpoint=checkpoint
    )
    picks, missing = find_picks(ranked, rules, space, restricted_search)
    extra = [
        e
        for e in list(picks.values())
        + ([current] if current and current_note(current) is None else [])
        if e not in evaluated
    ]
    return Choices(
        top=top,
        folded=folded,
        current=current,
        picks=picks,
        pick_titles={rule.name: rule.title for rule in rules},
        picks_missing=missing,
        pareto=pareto_front(evaluated + extra),
        evaluated=evaluated + extra,
    )
