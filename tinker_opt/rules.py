"""Validity rules of a Strategy for a model, a cluster and a framework version.

One rule per function (`_rule_*`, each returning why a strategy is invalid or None); the outer
rules (OUTER_RULES) judge a configuration before its layer split, check_strategy the whole
strategy. The facts of the framework version the rules depend on are a FrameworkRules
(script/versions.py builds it for a script); layer forms (LAYER_FORMS) say which per-stage layer
counts a framework can write, one rule shared by the split solvers, `simulate` and the writer.
The overlap switches' rules are their declarations in the knob registry (knobs.py;
ARCHITECTURE.md, "The knob registry").
"""

from __future__ import annotations

from tinker_opt.choices import (
    CpAlgo,
    Dispatcher,
    Recompute,
    RecomputeMethod,
    Schedule,
    assert_never,
)
from tinker_opt.cp_rules import (
    MODELLED_CP_ALGOS,
    hybrid_ulysses_degree,
    ulysses_heads_factor,
    ulysses_heads_message,
)
from tinker_opt.errors import StrategyError
from tinker_opt.framework_rules import LATEST_RULES, FrameworkRules
from tinker_opt.knobs import CHOICES, knob_message
from tinker_opt.layer_stack import (
    LAYER_FORMS,
    dualpipev_layer_list,
    dualpipev_message,
    form_allows,
    layer_form_message,
    virtual_form_message,
)

__all__ = [  # the facts other modules import from here (their homes: the modules above)
    "LATEST_RULES",
    "LAYER_FORMS",
    "MODELLED_CP_ALGOS",
    "FrameworkRules",
    "form_allows",
    "hybrid_ulysses_degree",
    "layer_form_message",
    "ulysses_heads_factor",
    "ulysses_heads_message",
    "virtual_form_message",
]
from tinker_opt.specs import ClusterSpec, ModelSpec
from tinker_opt.strategy import Strategy

# ----------------------------------------------------------------------------------------------
# Validity rules: only strategies that Megatron-LM / MindSpeed-LLM can express.
# Each rule returns None or the one-line message of the StrategyError, with both numbers.
# Sources: ../shared/reference/script-conventions.md section 2 (facts over 1,300 real scripts) and
# Megatron-LM's own argument checks (arguments.py, parallel_state.py).
# ----------------------------------------------------------------------------------------------


def _rule_world(
    s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
) -> str | None:
    if s.world_size != num_devices:
        return (
            f"tp*pp*dp*cp = {s.tp}*{s.pp}*{s.dp}*{s.cp} = {s.world_size} must equal the "
            f"cluster's {num_devices} devices"
        )
    return None


def _rule_tp(
    s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
) -> str | None:
    for name, value in (
        ("num_attention_heads", model.num_attention_heads),
        ("num_query_groups", model.num_query_groups),
        ("ffn_hidden_size", model.ffn_hidden_size),
    ):
        if value % s.tp:
            return f"{name} ({value}) must be a multiple of tensor_model_parallel_size ({s.tp})"
    if s.sp and s.tp == 1:
        return "sequence parallelism needs tensor_model_parallel_size > 1 (tp is 1); turn sp off"
    if s.sp and (model.seq_length // s.cp) % s.tp:
        return (
            f"with sequence parallelism seq_length / cp ({model.seq_length // s.cp}) must be a "
            f"multiple of tp ({s.tp})"
        )
    return None


def _rule_batch(
    s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
) -> str | None:
    if gbs % (s.mbs * s.dp):
        return (
            f"global_batch_size ({gbs}) must be a multiple of micro_batch_size * dp "
            f"({s.mbs} * {s.dp} = {s.mbs * s.dp})"
        )
    return None


def _rule_cp(
    s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
) -> str | None:
    if s.cp == 1:
        return None
    match s.cp_algo:
        case CpAlgo.MEGATRON | CpAlgo.HYBRID:
            # Ring attention (also the ring of hybrid) splits each sequence into 2*cp load-balanced chunks.
            chunks = 2 * s.cp
        case CpAlgo.ULYSSES | CpAlgo.KV_ALLGATHER:
            chunks = s.cp
        case CpAlgo.ADAPTIVE | None:
            return (
                f"context parallelism needs cp_algo, one of {MODELLED_CP_ALGOS} "
                f"(got {s.cp_algo and s.cp_algo.value!r}; the others are not modelled)"
            )
        case _:
            assert_never(s.cp_algo)
    if model.seq_length % chunks:
        return f"seq_length ({model.seq_length}) must be a multiple of {chunks} for cp={s.cp} with {s.cp_algo}"
    if s.cp_algo == CpAlgo.ULYSSES:
        return ulysses_heads_message(model.num_attention_heads, s.tp, s.cp, fw)
    # hybrid_cp_algo: a degree obeying MindSpeed's rule always exists (u = 1, the heads being a
    # multiple of tp); which one is used: hybrid_ulysses_degree.
    return None


def _rule_moe(
    s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
) -> str | None:
    if not model.is_moe:
        if s.ep > 1 or (s.etp is not None and s.etp != s.tp):
            return (
                f"ep ({s.ep}) / etp ({s.etp}) apply to MoE models only; this model has no experts"
            )
        return None
    if (model.num_experts or 1) % s.ep:
        return f"num_experts ({model.num_experts}) must be a multiple of expert_model_parallel_size ({s.ep})"
    etp = s.expert_tp
    if (s.tp * s.dp * s.cp) % (s.ep * etp):
        return (
            f"tp*dp*cp ({s.tp * s.dp * s.cp}) must be a multiple of ep*etp "
            f"({s.ep}*{etp} = {s.ep * etp})"
        )
    moe_ffn = model.moe_ffn_hidden_size or model.ffn_hidden_size
    if moe_ffn % etp:
        return f"moe_ffn_hidden_size ({moe_ffn}) must be a multiple of expert tensor-parallel size ({etp})"
    if s.tp > 1 and not s.sp:
        # Megatron: "sequence parallel must be used with expert and tensor parallelism".
        return f"MoE with tensor parallelism (tp {s.tp}) needs sequence parallelism; turn sp on"
    return None


def _rule_vpp(
    s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
) -> str | None:
    if s.vpp == 1:
        return None
    message = interleaved_pipeline_message(s.pp, s.vpp, fw)
    if message:
        return message
    if s.num_layer_list is not None:
        message = _virtual_list_message(s)
        if message:
            return message
    num_micro = gbs // (s.mbs * s.dp)
    if num_micro % s.pp:
        return (
            f"the interleaved schedule needs the number of micro-batches ({num_micro}) to be a "
            f"multiple of pp ({s.pp})"
        )
    return None


def _virtual_list_message(s: Strategy) -> str | None:
    """A layer list with virtual stages: per-rank totals must be multiples of vpp (Megatron-LM
    megatron/core/transformer/transformer_block.py get_num_layers_to_build divides a rank's layers
    evenly over its chunks); per-virtual-stage counts (`--pipeline-model-parallel-layout`,
    megatron/core/transformer/pipeline_parallel_layer_layout.py) need no more. The micro-batch
    rule of the interleaved schedule is checked by the caller."""
    if s.per_virtual_stage or s.num_layer_list is None:
        return None
    uneven = [n for n in s.num_layer_list if n % s.vpp]
    if uneven:
        return (
            f"with vpp {s.vpp} each stage's layer count must be a multiple of vpp; num_layer_list "
            f"{list(s.num_layer_list)} is not (give one count per virtual stage instead)"
        )
    return None


def interleaved_pipeline_message(pp: int, vpp: int, fw: FrameworkRules) -> str | None:
    """Megatron-LM's pipeline-size check of the interleaved schedule: pp > 1 with p2p overlap, pp > 2
    without it (two ranks would batch both directions' sends and receives together).
    Sources: NVIDIA/Megatron-LM megatron/training/arguments.py validate_args; MindSpeed-LLM keeps the
    same check; NVIDIA/Megatron-LM issue #750 (pp 2 is fine with overlap_p2p_comm)."""
    if vpp == 1:
        return None
    least = 2 if fw.overlap_p2p_comm else 3
    if pp < least:
        why = "" if fw.overlap_p2p_comm else " without p2p communication overlap"
        return (
            f"the interleaved schedule (vpp {vpp}) needs pipeline size >= {least}{why} (pp is {pp})"
        )
    return None


def _rule_overlap(
    s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
) -> str | None:
    return overlap_message(s, model.is_moe, model.moe_token_dispatcher_type, model.moe_grouped_gemm)


def overlap_message(
    s: Strategy, is_moe: bool, dispatcher: str | None = None, grouped_gemm: bool = False
) -> str | None:
    """Where each overlap switch is accepted, what it requires and excludes: the knob registry's
    declarations (knobs.py OVERLAP_KNOBS, with their sources)."""
    return knob_message(s, is_moe, dispatcher, grouped_gemm)


def _rule_schedule(
    s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
) -> str | None:
    """DualPipeV and MoE forward/backward overlap as MindSpeed accepts them (Ascend/MindSpeed
    docs/features/dualpipev.md and megatron_moe/megatron-moe-fb-overlap.md, "使用约束")."""
    num_micro = gbs // (s.mbs * s.dp)
    if s.schedule == Schedule.DUALPIPEV:
        message = dualpipev_message(model.num_layers, model.noop_layers, s.pp, num_micro)
        if message:
            return message
        padded = dualpipev_layer_list(model.num_layers, model.noop_layers, s.pp)
        listed = s.num_layer_list is not None and s.num_layer_list != padded
        if s.cp > 1 or listed or any(getattr(s, k) for k in CHOICES["dualpipev"].excludes):
            return (
                "dualpipev excludes context parallelism, a num_layer_list and overlap_grad_reduce"
            )
    if not s.moe_fb_overlap:
        return None
    if not model.is_moe or model.moe_token_dispatcher_type != Dispatcher.ALLTOALL:
        return "moe_fb_overlap needs an MoE model with the alltoall token dispatcher"
    if s.expert_tp != 1 or not model.moe_grouped_gemm:
        return f"moe_fb_overlap needs etp 1 (got {s.expert_tp}) and --moe-grouped-gemm"
    excluded = CHOICES["moe_fb_overlap"].excludes
    if any(getattr(s, key) for key in excluded):
        return f"moe_fb_overlap excludes {' and '.join(excluded)}"
    if s.vpp > 1 and num_micro <= s.pp:
        return f"moe_fb_overlap with vpp needs more micro-batches ({num_micro}) than pp ({s.pp})"
    return None


def _rule_recompute_kind(
    s: Strategy, model: ModelSpec, num_devices: int, gbs: int, fw: FrameworkRules = LATEST_RULES
) -> str | None:
    if s.recompute != Recompute.FULL and s.recompute_num_layers is not None:
        return f"recompute_num_layers ({s.recompute_num_layers}) applies to full recompute only"
    return None


OUTER_RULES = (
    _rule_world,
    _rule_tp,
    _rule_batch,
    _rule_cp,
    _rule_moe,
    _rule_vpp,
    _rule_overlap,
    _rule_schedule,
    _rule_recompute_kind,
)
"""Rules on the outer configuration (everything but the layer split and recompute count)."""


def check_outer(
    strategy: Strategy,
    model: ModelSpec,
    num_devices: int,
    global_batch_size: int,
    framework: FrameworkRules = LATEST_RULES,
) -> None:
    """Raise StrategyError naming the first outer rule the strategy breaks (for `framework`'s version)."""
    for rule in OUTER_RULES:
        message = rule(strategy, model, num_devices, global_batch_size, framework)
        if message:
            raise StrategyError(message)


def _layer_split_message(s: Strategy, num_layers: int, form: str = "free") -> str | None:
    """The split's rules (the outer rules leave it open: the search chooses an uneven split with
    virtual stages, solve/virtual_split.py, for a vpp that does not divide the layers)."""
    if s.num_layer_list is None:
        if num_layers % s.pp:
            return (
                f"num_layers ({num_layers}) is not divisible by pp ({s.pp}); "
                "give a num_layer_list or choose a pp that divides it"
            )
        if num_layers % (s.pp * s.vpp):
            return (
                f"num_layers ({num_layers}) must be a multiple of pp*vpp "
                f"({s.pp}*{s.vpp} = {s.pp * s.vpp}) with a virtual pipeline"
            )
        return None
    if sum(s.num_layer_list) != num_layers:
        return (
            f"num_layer_list sums to {sum(s.num_layer_list)} but the model has {num_layers} layers"
        )
    if min(s.num_layer_list) < 0 or min(s.stage_layers(num_layers)) < 1:
        return f"every pipeline stage needs at least one layer; num_layer_list is {list(s.num_layer_list)}"
    if s.per_virtual_stage:
        return None if form == "free" or s.dualpipev else virtual_form_message(s.num_layer_list)
    return layer_form_message(tuple(s.num_layer_list), form)


def _recompute_count_message(s: Strategy, num_layers: int) -> str | None:
    """`--recompute-num-layers` r: Megatron's config only asks for a value (transformer_config.py
    checks `recompute_num_layers is None`, not its range). `block` checkpoints the layers with
    index < r of each chunk (transformer_block.py `_checkpointed_forward`), so r above a chunk's
    layers means every layer (ModelLink's Mixtral script passes 32 with pp 8): accepted and
    priced as min(r, n) per chunk (costs/recompute.chunk_plan). `uniform` slices groups
    [i, i + r) of the chunk's layer list; ASSUMPTION: past the chunk that indexes a missing
    layer, so r above the largest chunk stays refused there."""
    if s.recompute != Recompute.FULL:
        return None
    r = s.recompute_num_layers
    chunked = s.vpp > 1 or s.dualpipev
    chunk_max = max(s.chunk_layers(num_layers) if chunked else s.stage_layers(num_layers))
    if s.recompute_method == RecomputeMethod.BLOCK and r is not None and r >= 1:
        return None
    if r is None or not 1 <= r <= chunk_max:
        return (
            f"full recompute needs recompute_num_layers between 1 and the layers of the largest "
            f"stage chunk ({chunk_max}), got {r}"
        )
    return None


def _dualpipev_split_message(s: Strategy, model: ModelSpec) -> str | None:
    """DualPipeV's split is the framework's own (the even split of the padded stack over its
    2 * pp chunks, layer_stack.dualpipev_layer_list): with noop layers that leave its chunks
    unequal, the strategy must say their computing layers."""
    if not s.dualpipev:
        return None
    padded = dualpipev_layer_list(model.num_layers, model.noop_layers, s.pp)
    if padded is not None and s.num_layer_list != padded:
        return (
            f"dualpipev over {model.num_layers} layers with noop layers "
            f"{list(model.noop_layers)} computes {list(padded)} layers per chunk; "
            "give that num_layer_list (simulate SCRIPT maps the script's split to it)"
        )
    return None


def check_strategy(
    strategy: Strategy,
    model: ModelSpec,
    cluster: ClusterSpec,
    global_batch_size: int,
    framework: FrameworkRules = LATEST_RULES,
) -> None:
    """Raise StrategyError naming the rule `strategy` breaks, with both numbers; None when valid.

    `model` is a ModelSpec, `cluster` a ClusterSpec (only its device count matters here);
    `framework` the version-dependent facts (the script's, else recent versions').
    """
    check_outer(strategy, model, cluster.num_devices, global_batch_size, framework)
    message = (
        _dualpipev_split_message(strategy, model)
        or _layer_split_message(strategy, model.num_layers, framework.layer_form)
        or _recompute_count_message(strategy, model.num_layers)
    )
    if message:
        raise StrategyError(message)
