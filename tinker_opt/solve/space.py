"""The search space: which outer configurations a search visits.

An outer configuration is a Strategy without its layer split and recompute count (those are
chosen per outer configuration, exactly, by the solvers): tp, sp, pp, dp, cp (+ algorithm),
ep, etp, vpp, distributed optimizer, micro-batch size and recompute kind. Only configurations
that pass the framework's rules (strategy.check_outer) and whose shapes were profiled are listed;
configurations that are the same strategy under another name are listed once (sp with tp = 1,
the distributed optimizer without any data-parallel group).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tinker_opt.choices import Recompute, Schedule
from tinker_opt.errors import ConfigError
from tinker_opt.knobs import (
    CHOICES,
    KNOBS,
    KnobContext,
    ModelFacts,
    search_choices,
    switched_off_with,
)
from tinker_opt.layer_stack import dualpipev_even
from tinker_opt.rules import LATEST_RULES, LAYER_FORMS, MODELLED_CP_ALGOS, OUTER_RULES
from tinker_opt.strategy import (
    OVERLAP_KEYS,
    RECOMPUTE_KINDS,
    RECOMPUTE_METHODS,
    ZERO_LEVELS,
    Strategy,
)

SEARCH_ADDED_OVERLAPS: tuple[str, ...] = tuple(
    key for key in OVERLAP_KEYS if KNOBS[key].added_by_search
)
"""The overlap switches a plain SearchSpace turns on where they apply (knobs.py `added_by_search`)."""
SEARCHED_CP_ALGOS: tuple[str, ...] = CHOICES["cp_algo"].searched_choices
"""Context-parallel algorithms searched by default (the cp_algo record's searched values;
kvallgather can be simulated and allowed)."""
DEFAULT_MAX_MBS = 8
UNEVEN_MAX_VPP = 4
"""Largest vpp tried with uneven virtual stages. ASSUMPTION: the published uneven layouts use 2 to
4 chunks per rank (Megatron-MoE-ModelZoo best-practice/DeepSeekV3/run.sh: pp 8 x vpp 4 on H100),
and each further vpp multiplies the outer configurations the presolve visits (DeepSeek-V3 on
1,024 H100s: 100,512 without uneven virtual stages, 469,152 with every vpp up to layers / pp)."""


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """Restrictions of the search space; the default turns every knob on."""

    max_mbs: int | None = None
    """Largest micro-batch size; None = max(8, the largest profiled one)."""
    tp: tuple[int, ...] | None = None
    """Allowed tensor-parallel sizes (None: every profiled size that divides the model)."""
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    etp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    allow_sp: bool = True
    allow_dist_opt: bool = True
    allow_vpp: bool = True
    allow_cp: bool = True
    layer_form: str = "free"
    """The per-stage layer counts the target framework can write (rules.LAYER_FORMS): a
    constraint of every split solver, so the search returns only writable splits (`even`: no
    `--num-layer-list` at all)."""
    uneven_vpp: bool = False
    """Uneven per-virtual-stage splits (the first and last virtual stage free, the rest equal;
    solve/virtual_split.py) for a pp whose layers no even interleaved split divides, with every
    vpp up to min(layers / pp, UNEVEN_MAX_VPP): the case Megatron-LM's
    --pipeline-model-parallel-layout was made for
    (MR 2795, DeepSeek-V3's 61 layers), where the framework writes it. Where some pp x vpp
    divides the layers the search keeps the even interleaved splits."""
    require_dist_opt: bool = False
    """Only strategies with the distributed optimizer (MindSpeed's --swap-optimizer needs it)."""
    zero_levels: tuple[int, ...] = CHOICES["zero"].searched_choices
    """ZeRO stages searched (strategy.ZERO_LEVELS; 1 = the distributed optimizer); a stage >= 1
    needs a data-parallel group and allow_dist_opt."""
    etp_follows_tp: bool = False
    """Only etp = tp (the framework cannot say `--expert-tensor-parallel-size`)."""
    recompute: tuple[str, ...] = RECOMPUTE_KINDS
    recompute_methods: tuple[str, ...] = RECOMPUTE_METHODS
    """Megatron's `--recompute-method` values searched with full recompute (model/recompute.py)."""
    cp_algos: tuple[str, ...] = SEARCHED_CP_ALGOS
    schedules: tuple[str, ...] = (CHOICES["dualpipev"].default.value,)
    """Pipeline schedules searched (strategy.SCHEDULES); `dualpipev` only where the framework
    version has it (expressible.py search_space_for)."""
    fb_overlap: bool = False
    """Search MindSpeed's `--moe-fb-overlap` (on and off) where its rule allows it."""
    overlaps: tuple[str, ...] | None = SEARCH_ADDED_OVERLAPS
    """Communication-overlap knobs switched on wherever they apply (`overlap_choices`); the others
    stay off. Not a search dimension: the cost model prices an overlap as the part of the
    collective that cannot hide (costs/overlap.py), never more than without it, and the overlaps
    add no modelled memory, so on is never worse (tests/test_model_overlap.py). The exceptions,
    pairs that exclude each other (the MoE all-to-all overlap against TP overlap (MC2) and
    against the shared-expert overlap), are searched. None: the backend has none of these knobs
    (MindSpeed-LLM FSDP2), every key stays None. The default leaves out the knobs a search may
    not add to a script (`Knob.added_by_search` false: TP overlap, whose Megatron flag needs
    Transformer Engine userbuffers set up for the job and MindSpeed's MC2 an edited validation);
    expressible.search_space_for adds them where the script already sets them."""
    family: str | None = None
    """The framework family the strategies are written for (knob_types.MINDSPEED, MEGATRON;
    expressible.search_space_for): the switches' own checks by family (knob_rules.py). None: not
    known (a search without a script), only the checks both families share."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.recompute) - set(RECOMPUTE_KINDS))
        if unknown:
            raise ConfigError(
                f"unknown recompute kind(s) {unknown}; expected some of {list(RECOMPUTE_KINDS)}"
            )
        bad_methods = sorted(set(self.recompute_methods) - set(RECOMPUTE_METHODS))
        if bad_methods or not self.recompute_methods:
            raise ConfigError(
                f"recompute method(s) {bad_methods or '()'} not allowed; use some of {list(RECOMPUTE_METHODS)}"
            )
        bad_overlaps = sorted(set(self.overlaps or ()) - set(OVERLAP_KEYS))
        if bad_overlaps:
            raise ConfigError(
                f"unknown overlap knob(s) {bad_overlaps}; expected some of {list(OVERLAP_KEYS)}"
            )
        bad_algos = sorted(set(self.cp_algos) - set(MODELLED_CP_ALGOS))
        if bad_algos:
            raise ConfigError(
                f"context-parallel algorithm(s) {bad_algos} are not modelled; use {list(MODELLED_CP_ALGOS)}"
            )
        if self.layer_form not in LAYER_FORMS:
            raise ConfigError(
                f"layer_form must be one of {list(LAYER_FORMS)}, got {self.layer_form!r}"
            )
        if not self.zero_levels or set(self.zero_levels) - set(ZERO_LEVELS):
            raise ConfigError(f"zero_levels {self.zero_levels} must be some of {ZERO_LEVELS}")
        if self.max_mbs is not None and self.max_mbs < 1:
            raise ConfigError(f"max_mbs must be >= 1, got {self.max_mbs}")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _allowed(values: list[int], allowed: tuple[int, ...] | None) -> list[int]:
    return values if allowed is None else [v for v in values if v in allowed]


ShapeCheck = Callable[[int, bool, int, int, int], bool]
"""available(tp, sp, cp, ep, etp): whether the profile holds every block at that shape."""


def outer_choices(
    model,
    num_devices: int,
    global_batch_size: int,
    space: SearchSpace,
    available: ShapeCheck,
    max_mbs: int,
) -> list[Strategy]:
    """Every valid outer configuration of the space, in a deterministic order."""
    return list(_iter_outer(model, num_devices, global_batch_size, space, available, max_mbs))


def _iter_outer(model, num_devices, gbs, space, available, max_mbs) -> Iterator[Strategy]:
    for tp, cp in itertools.product(
        _allowed(divisors(num_devices), space.tp), _allowed(divisors(num_devices), space.cp)
    ):
        if (cp > 1 and not space.allow_cp) or num_devices % (tp * cp):
            continue
        for pp in _allowed(
            [p for p in divisors(num_devices // (tp * cp)) if p <= model.num_layers], space.pp
        ):
            dp = num_devices // (tp * cp * pp)
            for parallel in _iter_parallel(model, tp, cp, pp, dp, space, available):
                yield from _iter_schedule(model, parallel, gbs, space, max_mbs, num_devices)


def _iter_parallel(model, tp, cp, pp, dp, space, available) -> Iterator[Strategy]:
    """tp, cp (+algo), ep, etp and sp choices for one (tp, cp, pp, dp)."""
    sps = [False] if tp == 1 else ([True] if model.is_moe else [False, True])
    if not space.allow_sp:
        sps = [s for s in sps if not s]
    algos = [None] if cp == 1 else list(space.cp_algos)
    experts: list[tuple[int, int | None]] = [(1, None)]
    if model.is_moe:
        eps = _allowed(divisors(model.num_experts), space.ep)
        etps = [tp] if space.etp_follows_tp else _allowed(sorted({1, tp}), space.etp)
        experts = [(ep, etp) for ep in eps for etp in etps]
    for sp, algo, (ep, etp) in itertools.product(sps, algos, experts):
        if not available(tp, sp, cp, ep, etp if etp is not None else 1):
            continue
        yield Strategy(tp=tp, pp=pp, dp=dp, cp=cp, cp_algo=algo, ep=ep, etp=etp, sp=sp)


def _iter_schedule(model, base: Strategy, gbs, space, max_mbs, num_devices) -> Iterator[Strategy]:
    """vpp, micro-batch, ZeRO stage (distributed optimizer) and recompute kind for one parallel layout."""
    vpps = [1]
    # pp 2 interleaves with p2p overlap (Megatron's default): rules.interleaved_pipeline_message,
    # which OUTER_RULES apply to every candidate below, is the one pipeline-size check.
    if space.allow_vpp and base.pp > 1:
        vpps += [
            v
            for v in divisors(model.num_layers // base.pp)
            if v > 1 and model.num_layers % (base.pp * v) == 0
        ]
        if space.uneven_vpp and vpps == [1]:  # no even interleaved split: uneven ones
            vpps += list(range(2, min(model.num_layers // base.pp, UNEVEN_MAX_VPP) + 1))
    vpps = _allowed(vpps, space.vpp) or []
    data_groups = base.dp * base.cp > 1 or (
        model.is_moe and base.tp * base.dp * base.cp > base.ep * base.expert_tp
    )
    zeros = [z for z in space.zero_levels if z == 0 or (data_groups and space.allow_dist_opt)]
    if space.require_dist_opt:
        zeros = [z for z in space.zero_levels if z >= 1] or [1]
    zeros = zeros or [0]  # no data-parallel group: every stage is the same strategy as 0
    if model.num_layers % base.pp and space.layer_form == "even":
        return
    # Cheap pre-filters of the batch rules (knob_rules.mbs_rule / vpp_rule check them again).
    mbss = [b for b in range(1, max_mbs + 1) if gbs % (b * base.dp) == 0]
    # Full recompute comes with each of Megatron's methods (block, uniform): the solver picks the
    # method with the count and the split.
    kinds = [
        (kind, method)
        for kind in space.recompute
        for method in (space.recompute_methods if kind == Recompute.FULL else (None,))
    ]
    # The overlap switches depend on the layout, the ZeRO stage, vpp and the recompute kind alone
    # (knobs.KnobContext; the MoE all-to-all overlap refuses full recompute on Megatron): listed
    # once per stage, vpp and kind, where the switches and the recompute kind are combined.
    facts = ModelFacts.of(model, space.family)
    overlaps = {
        (z, v, kind): overlap_choices(
            base.replace(zero=z, vpp=v, recompute=kind), model.is_moe, space.overlaps, facts=facts
        )
        for z in zeros
        for v in vpps
        for kind in {kind for kind, _ in kinds}
    }
    fw = dataclasses.replace(LATEST_RULES, family=space.family)
    for vpp, mbs, zero, (recompute, method) in itertools.product(vpps, mbss, zeros, kinds):
        if vpp > 1 and (gbs // (mbs * base.dp)) % base.pp:
            continue
        for knobs in overlaps[zero, vpp, recompute]:
            candidate = base.replace(
                vpp=vpp, mbs=mbs, zero=zero, recompute=recompute, recompute_method=method, **knobs
            )
            for choice in schedule_choices(candidate, space):
                if choice.dualpipev and not dualpipev_even(
                    model.num_layers, model.noop_layers, choice.pp
                ):
                    continue
                if all(rule(choice, model, num_devices, gbs, fw) is None for rule in OUTER_RULES):
                    yield choice


def schedule_choices(s: Strategy, space: SearchSpace) -> Iterator[Strategy]:
    """The strategy under each searched schedule and fb-overlap setting. DualPipeV and the
    fb-overlap exclude switches (their records' `excludes`: the asynchronous gradient reduce;
    fb-overlap also replaces the MoE all-to-all overlap; knob_rules.fb_overlap_rule), so those variants
    turn them off, with the switches that require them (the parameter gather)."""
    for schedule in space.schedules:
        if schedule != Schedule.ONE_F_ONE_B and s.vpp > 1:
            continue
        for fb in CHOICES["moe_fb_overlap"].choices if space.fb_overlap else (False,):
            if schedule == Schedule.ONE_F_ONE_B and not fb:
                yield s
                continue
            excluded = CHOICES["dualpipev"].excludes if schedule == Schedule.DUALPIPEV else ()
            excluded += CHOICES["moe_fb_overlap"].excludes if fb else ()
            off = {
                key: False
                for key in switched_off_with(frozenset(excluded))
                if getattr(s, key) is not None
            }
            yield s.replace(dualpipev=schedule == Schedule.DUALPIPEV, moe_fb_overlap=fb, **off)


def overlap_choices(
    s: Strategy,
    is_moe: bool,
    allowed: tuple[str, ...] | None,
    dispatcher: str | None = None,
    grouped_gemm: bool = False,
    *,
    facts: ModelFacts | None = None,
) -> list[dict[str, bool | None]]:
    """The overlap switches of an outer configuration (knobs.search_choices: on where allowed,
    accepted and useful, off where they exist but not, None where they do not exist; one choice
    per side of each pair that excludes each other). `allowed` None: the backend has none of
    these knobs, every key stays None. `facts` (the model's and the framework family's) replace
    is_moe, dispatcher and grouped_gemm."""
    if allowed is None:
        return [dict.fromkeys(OVERLAP_KEYS)]
    facts = facts or ModelFacts(is_moe, dispatcher if is_moe else None, grouped_gemm)
    return search_choices(KnobContext.of_facts(s, facts), allowed)
