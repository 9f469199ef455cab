"""What a script can express of a strategy: the normal form the writer writes and the reader reads.

`expressible_strategy` checks a strategy against the script's model, the target cluster and the
framework version, and returns the strategy the tuned script will read back (see
tinker_opt/script/strategy_args.py for the reading rules). It raises StrategyError naming the rule
or the missing flag.
"""

from __future__ import annotations

import dataclasses

from tinker_opt.choices import CpAlgo, Recompute, RecomputeMethod
from tinker_opt.errors import StrategyError
from tinker_opt.knobs import CHOICES, KNOBS, LAYOUT, KnobContext, ModelFacts, knob_message
from tinker_opt.rules import (
    FrameworkRules,
    interleaved_pipeline_message,
    layer_form_message,
)
from tinker_opt.script import versions
from tinker_opt.script.knob_report import searched_switch
from tinker_opt.script.pipeline_layout import LAYOUT_FLAG
from tinker_opt.script.reader import ScriptInfo
from tinker_opt.script.strategy_args import (
    DEFAULT_CP_ALGO,
    SHARDING_FLAG,
    VPP_LAYERS_FLAG,
    VPP_SIZE_FLAGS,
    zero_backend,
)
from tinker_opt.script.train_args import p2p_overlap
from tinker_opt.script.versions import VersionRange, flag_allowed
from tinker_opt.solve.space import SearchSpace
from tinker_opt.strategy import Strategy

_SPLIT = CHOICES["num_layer_list"]


def _can(flag: str, info: ScriptInfo, vr: VersionRange) -> bool:
    """Whether a tuned script may carry `flag`: the script has it, or its version knows it."""
    return info.launch.has(flag) or flag_allowed(flag, vr)


def _needs(flag: str, purpose: str, info: ScriptInfo, vr: VersionRange) -> None:
    """StrategyError when the script lacks `flag` and the version cannot have it."""
    if _can(flag, info, vr):
        return
    since = versions.FLAG_SINCE[flag].get(vr.family)
    where = f"added in {versions.format_version(vr.family, since)}" if since else "never available"
    framework = "Megatron-LM" if vr.family == versions.MEGATRON else "MindSpeed-LLM"
    raise StrategyError(
        f"{purpose} needs {flag}, which {framework} {vr.label} lacks ({where}); "
        "choose a strategy without it or pass a newer --version"
    )


def framework_rules(info: ScriptInfo, vr: VersionRange) -> FrameworkRules:
    """The version-dependent rule facts for this script at version `vr`."""
    return FrameworkRules(
        overlap_p2p_comm=p2p_overlap(info.launch, vr),
        layer_form=layer_form(info, vr),
        unaligned_ulysses=vr.family == versions.MINDSPEED
        and vr.allows(versions.UNALIGNED_ULYSSES_SINCE),
        family=vr.family,
    )


def layer_form(info: ScriptInfo, vr: VersionRange) -> str:
    """The per-stage layer counts this script can say (rules.LAYER_FORMS): MindSpeed-LLM's
    `--num-layer-list` any list, Megatron-LM's `--decoder-first/last-pipeline-num-layers` free
    first and last stages with equal middle ones, else (older versions) the even split only."""
    if vr.family == versions.MEGATRON:
        return "first_last" if _can(_SPLIT.flag_for("first"), info, vr) else "even"
    return "free" if _can(_SPLIT.flag, info, vr) else "even"


def overlap_flag(key: str, info: ScriptInfo, vr: VersionRange) -> str | None:
    """The flag that turns overlap `key` on: the script's own spelling, else the first the version has."""
    flags = KNOBS[key].flags
    present = [flag for flag in flags if info.launch.has(flag)]
    if present:
        return present[0]
    return next((flag for flag in flags if flag_allowed(flag, vr)), None)


def _overlaps(s: Strategy, info: ScriptInfo, vr: VersionRange) -> dict:
    """Normal form of the overlap knobs: None where a knob does not apply; a knob left None where it
    applies keeps the script's setting; a knob switched on needs a flag the version has."""
    out: dict[str, bool | None] = {}
    current = info.train.strategy
    model = info.model
    facts = ModelFacts.of(model, vr.family)
    layout = KnobContext.of_facts(s, facts)
    for key, knob in KNOBS.items():
        if not knob.exists(layout):
            out[key] = None
            continue
        value = getattr(s, key)
        value = bool(getattr(current, key)) if value is None else value
        if value and overlap_flag(key, info, vr) is None:
            _needs(knob.flags[-1 if vr.family == versions.MEGATRON else 0], key, info, vr)
        out[key] = value
    message = knob_message(s.replace(**out), model.is_moe, facts=facts)
    if message:
        raise StrategyError(message)
    return out


def _check_model(s: Strategy, info: ScriptInfo, world: int) -> None:
    model = info.model
    if s.world_size != world:
        raise StrategyError(
            f"tp x pp x cp x dp = {s.tp}x{s.pp}x{s.cp}x{s.dp} = {s.world_size} but the "
            f"cluster has {world} devices; make dp = {world} / (tp x pp x cp)"
        )
    if model.num_attention_heads % s.tp or model.num_query_groups % s.tp:
        raise StrategyError(
            f"num_attention_heads ({model.num_attention_heads}) and num_query_groups "
            f"({model.num_query_groups}) must be multiples of tp ({s.tp})"
        )
    if not model.is_moe and s.ep > 1:
        raise StrategyError(f"ep = {s.ep} but the model has no experts (--num-experts); use ep = 1")
    if model.is_moe and (model.num_experts or 1) % s.ep:
        raise StrategyError(f"num_experts ({model.num_experts}) must be a multiple of ep ({s.ep})")


def _layers(s: Strategy, total: int, info: ScriptInfo, vr: VersionRange) -> None:
    if s.num_layer_list is not None:
        if sum(s.num_layer_list) != total:
            raise StrategyError(
                f"num_layer_list sums to {sum(s.num_layer_list)} but --num-layers is "
                f"{total} (noop layers included); make them equal"
            )
    elif total % s.pp:
        raise StrategyError(
            f"--num-layers {total} is not divisible by pp ({s.pp}); give a "
            "num_layer_list or choose a pp that divides it"
        )
    if s.vpp > 1:
        message = interleaved_pipeline_message(s.pp, s.vpp, framework_rules(info, vr))
        if message:
            raise StrategyError(f"{message} in {vr.label}")
        if s.num_layer_list is None and total % (s.pp * s.vpp):
            raise StrategyError(
                f"vpp = {s.vpp} needs --num-layers {total} divisible by pp x vpp = {s.pp * s.vpp}"
            )
        layout = vr.family == versions.MEGATRON and uses_layout_string(s, info.launch, vr)
        if not layout and not any(info.launch.has(flag) for flag in VPP_SIZE_FLAGS):
            _needs(VPP_LAYERS_FLAG, f"vpp = {s.vpp}", info, vr)


def uses_layout_string(s: Strategy, launch, vr: VersionRange) -> bool:
    """Megatron-LM writes the split as `--pipeline-model-parallel-layout` (script/pipeline_layout.py)
    when the script already does, or when a layer list meets a virtual pipeline (which the
    first/last flags say only with even chunks). Unequal middle stages without virtual stages take
    the (experimental) layout only where the script has it or the version is given, at least
    core_v0.13; otherwise the first/last rule refuses them, as the search's layer form does."""
    if s.pp == 1:
        return False
    if launch.has(LAYOUT_FLAG):
        return True
    layers = s.num_layer_list
    if layers is None:
        return False
    if s.vpp > 1:
        return True
    since = versions.FLAG_SINCE[LAYOUT_FLAG][versions.MEGATRON]
    free = vr.exact is not None and since is not None and vr.exact >= since
    return free and layer_form_message(tuple(layers), "first_last") is not None


def virtual_list_message(s: Strategy, info: ScriptInfo, vr: VersionRange) -> str | None:
    """Why the script's framework cannot write a layer list with virtual stages (None if it can):
    Megatron-LM through `--pipeline-model-parallel-layout` where the version has it; never
    MindSpeed-LLM (its --num-layer-list refuses a virtual pipeline)."""
    try:
        _layer_list(s, info, vr)
    except StrategyError as exc:
        return str(exc)
    return None


def _layer_list(s: Strategy, info: ScriptInfo, vr: VersionRange) -> tuple[int, ...] | None:
    layers = s.num_layer_list
    if layers is None or vr.family != versions.MEGATRON:
        if layers is not None and s.vpp > 1:
            # mindspeed_llm features_manager num_layer_list: "Dynamic pipeline model and
            # virtual pipeline cannot be enabled at the same time."
            raise StrategyError(
                "MindSpeed-LLM refuses --num-layer-list with a virtual pipeline; use an even "
                "split with vpp, or vpp 1 with the layer list"
            )
        if layers is not None:
            _needs(_SPLIT.flag, "num_layer_list", info, vr)
        return layers
    if s.pp == 1:
        return None
    if uses_layout_string(s, info.launch, vr):
        _needs(LAYOUT_FLAG, f"num_layer_list {list(layers)}", info, vr)
        return layers
    message = layer_form_message(tuple(layers), "first_last")
    if message:
        raise StrategyError(message)
    _needs(_SPLIT.flag_for("first"), "num_layer_list", info, vr)
    return layers


def _cp_algo(s: Strategy, info: ScriptInfo, vr: VersionRange) -> str | None:
    if s.cp == 1:
        return None
    _needs(LAYOUT["cp"].flag, f"cp = {s.cp}", info, vr)
    algo = s.cp_algo or DEFAULT_CP_ALGO
    if vr.family == versions.MEGATRON:
        if algo != DEFAULT_CP_ALGO:
            raise StrategyError(
                f"cp_algo {algo} is MindSpeed-LLM only; Megatron-LM runs ring "
                f"attention: use cp_algo {DEFAULT_CP_ALGO}"
            )
        return algo
    record = CHOICES["cp_algo"]
    since = record.value_since.get(algo)
    if since is None or not vr.allows(since):
        usable = [
            a
            for a in record.choices
            if a in record.value_since and vr.allows(record.value_since[a])
        ]
        raise StrategyError(
            f"cp_algo {algo} is not available in MindSpeed-LLM {vr.label}; "
            + (f"use one of {usable}" if usable else "use cp = 1")
        )
    return algo


def _etp(s: Strategy, info: ScriptInfo, vr: VersionRange) -> int | None:
    if not info.model.is_moe or s.etp is None:
        return None
    if _can(LAYOUT["etp"].flag, info, vr):
        return s.etp
    if s.etp == s.tp:
        return None  # the default: no flag needed
    if s.etp == 1 and info.launch.has(LAYOUT["etp"].flag_for("one")) and s.ep % s.tp == 0:
        return 1  # MindSpeed's tp x ep expert ranks (script/strategy_args.py)
    _needs(LAYOUT["etp"].flag, f"etp = {s.etp}", info, vr)
    return s.etp


def _recompute(s: Strategy, stage_layers: int) -> dict:
    if s.recompute != Recompute.FULL:
        return {"recompute_method": None, "recompute_num_layers": None}
    method = s.recompute_method or RecomputeMethod(CHOICES["recompute_method"].default)
    default_layers = 1 if method == RecomputeMethod.UNIFORM else stage_layers
    return {
        "recompute_method": method,
        "recompute_num_layers": s.recompute_num_layers or default_layers,
    }


def expressible_strategy(
    strategy: Strategy, info: ScriptInfo, vr: VersionRange, *, world: int
) -> Strategy:
    """The strategy as the tuned script will express it; StrategyError when it cannot."""
    total = info.num_layers_in_script
    _check_model(strategy, info, world)
    _layers(strategy, total, info, vr)
    layer_list = _layer_list(strategy, info, vr)
    if strategy.ep > 1:
        _needs(LAYOUT["ep"].flag, f"ep = {strategy.ep}", info, vr)
    if strategy.zero >= 2 and zero_backend(info.launch) is None:
        raise StrategyError(
            f"ZeRO stage {strategy.zero} needs DeepSpeed (--zero-stage) or Megatron-FSDP "
            f"({SHARDING_FLAG}); this script has neither: use zero <= 1"
        )
    chunk_max = max(strategy.chunk_layers(total)) if strategy.vpp > 1 else None
    stage_layers = max(layer_list) if layer_list else total // strategy.pp
    return strategy.replace(
        sp=strategy.sp and strategy.tp > 1,
        cp_algo=_cp_algo(strategy, info, vr),
        etp=_etp(strategy, info, vr),
        num_layer_list=layer_list,
        **_recompute(strategy, chunk_max or stage_layers),
        **_overlaps(strategy, info, vr),
    )


def search_space_for(
    info: ScriptInfo, vr: VersionRange, base: SearchSpace | None = None
) -> SearchSpace:
    """The search space restricted to what this script and framework version can say.

    A strategy the solver returns must be writable as flags (README, "Reading and writing launch
    scripts"): a knob whose flag
    the version lacks is switched off before the search, never discovered after it.
    """
    if info.fsdp2 is not None:
        return fsdp2_search_space(info, base)

    def can(flag: str) -> bool:
        return _can(flag, info, vr)

    megatron = vr.family == versions.MEGATRON
    mcore = info.train.framework.flavour == "mcore"
    record = CHOICES["cp_algo"]
    searched = record.searched_choices
    algos = (
        (DEFAULT_CP_ALGO,)
        if megatron
        else tuple(
            a
            for a in searched
            if record.value_since.get(a) is not None and vr.allows(record.value_since[a])
        )
    )
    schedule, fb = CHOICES["dualpipev"], CHOICES["moe_fb_overlap"]
    return dataclasses.replace(
        base or SearchSpace(),
        allow_vpp=any(info.launch.has(f) for f in VPP_SIZE_FLAGS) or can(VPP_LAYERS_FLAG),
        allow_cp=can(LAYOUT["cp"].flag) and bool(algos),
        cp_algos=algos or searched,
        # The split solvers return only layer lists of this form (the writer's own rule).
        layer_form=layer_form(info, vr),
        # Uneven virtual stages only as Megatron-LM's layout string (MindSpeed-LLM's
        # --num-layer-list refuses a virtual pipeline: _layer_list).
        uneven_vpp=megatron and can(LAYOUT_FLAG),
        etp_follows_tp=not (
            can(LAYOUT["etp"].flag) or info.launch.has(LAYOUT["etp"].flag_for("one"))
        ),
        # MindSpeed raises on --swap-optimizer without the distributed optimizer.
        require_dist_opt=info.train.swap_optimizer_times is not None,
        overlaps=searched_overlaps(info, vr),
        family=vr.family,
        # ZeRO 2/3 only where the script already picks its stage by flag (DeepSpeed, Megatron-FSDP).
        zero_levels=CHOICES["zero"].choices
        if zero_backend(info.launch)
        else CHOICES["zero"].searched_choices,
        # MindSpeed-LLM's DualPipeV and MoE fb-overlap (mcore models; knob_rules.dualpipev_rule, fb_overlap_rule).
        schedules=schedule.searched_choices
        if mcore and can(schedule.flag)
        else (schedule.default.value,),
        fb_overlap=mcore and info.model.is_moe and can(fb.flag),
    )


def searched_overlaps(info: ScriptInfo, vr: VersionRange) -> tuple[str, ...]:
    """Overlap knobs the search switches on where they apply: those whose flag this version has,
    and those the search may not add (`Knob.added_by_search` false: TP overlap, knobs.py) only
    where the script already sets them."""
    keys = [key for key, knob in KNOBS.items() if knob.added_by_search]
    keys += [key for key, knob in KNOBS.items() if not knob.added_by_search]
    return tuple(key for key in keys if searched_switch(KNOBS[key], info.launch.has, vr))


def fsdp2_search_space(info: ScriptInfo, base: SearchSpace | None = None) -> SearchSpace:
    """MindSpeed-LLM FSDP2: tp, dp (sharded: ZeRO-3, or ZeRO-2 with parallel.reshard_after_forward
    False), ep, cp (ulysses | ring), recompute of every layer or none, micro-batch size (and so
    gradient accumulation); no pipeline, no sequence parallelism flag, no separate expert tensor
    parallelism, none of Megatron's overlap flags (the prefetch overlap is priced in
    costs/zero_terms.py) (docs/en/pytorch/features/fsdp2/arguments.md)."""
    return dataclasses.replace(
        base or SearchSpace(),
        pp=(1,),
        allow_vpp=False,
        allow_sp=False,
        layer_form="even",
        etp_follows_tp=True,
        zero_levels=(2, 3),
        recompute=(Recompute.NONE, Recompute.FULL),
        recompute_methods=(RecomputeMethod.BLOCK,),
        overlaps=None,
        cp_algos=(CpAlgo.ULYSSES.value, CpAlgo.MEGATRON.value),
    )
