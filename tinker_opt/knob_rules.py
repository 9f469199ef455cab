"""The validity rules of the choice knobs, each attached to its record (knobs.py `ChoiceKnob.check`
on the outer configuration, `ChoiceKnob.split_check` on the layer split); rules.py runs every
record's rule, so a knob's rules are part of its declaration.

A rule takes its record first (it reads the record's own `excludes`), then the strategy, the
model, the device count, the global batch and the framework version's facts (an outer rule), or
the strategy, the model and the layer form the framework writes (a split rule). It returns the
one-line message of the StrategyError, with both numbers, or None. The strategy and the model
are read by attribute (strategy.Strategy, specs.ModelSpec): this module sits below both, next to
the layer stack (layer_stack.py) whose one definition of a stage's layers the rules ask.
Sources: ../shared/reference/script-conventions.md section 2 and Megatron-LM's / MindSpeed's own
argument checks, named in each rule.
"""

from __future__ import annotations

from typing import Any

from tinker_opt.choices import CpAlgo, Dispatcher, Recompute, RecomputeMethod, assert_never
from tinker_opt.cp_rules import MODELLED_CP_ALGOS, ulysses_heads_message
from tinker_opt.framework_rules import FrameworkRules
from tinker_opt.knob_types import MEGATRON, MINDSPEED, KnobContext
from tinker_opt.layer_stack import (
    dualpipev_layer_list,
    dualpipev_message,
    layer_form_message,
    virtual_form_message,
)


def _micro_batches(s: Any, gbs: int) -> int:
    return gbs // (s.mbs * s.dp)


def tp_rule(
    knob: Any, s: Any, model: Any, devices: int, gbs: int, fw: FrameworkRules
) -> str | None:
    """Tensor parallelism splits the heads, the query groups and the MLP (Megatron-LM
    arguments.py validate_args, megatron/core/utils.divide)."""
    for name, value in (
        ("num_attention_heads", model.num_attention_heads),
        ("num_query_groups", model.num_query_groups),
        ("ffn_hidden_size", model.ffn_hidden_size),
    ):
        if value % s.tp:
            return f"{name} ({value}) must be a multiple of tensor_model_parallel_size ({s.tp})"
    return None


def ep_rule(
    knob: Any, s: Any, model: Any, devices: int, gbs: int, fw: FrameworkRules
) -> str | None:
    """The expert grid (Megatron-Core parallel_state.initialize_model_parallel: ep x etp divides
    tp x dp x cp; the experts over ep; the expert MLP over etp) and Megatron's "sequence parallel
    must be used with expert and tensor parallelism"."""
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
        return f"MoE with tensor parallelism (tp {s.tp}) needs sequence parallelism; turn sp on"
    return None


def sp_rule(
    knob: Any, s: Any, model: Any, devices: int, gbs: int, fw: FrameworkRules
) -> str | None:
    """Sequence parallelism splits each rank's sequence over tp (Megatron-LM arguments.py)."""
    if s.sp and s.tp == 1:
        return "sequence parallelism needs tensor_model_parallel_size > 1 (tp is 1); turn sp off"
    if s.sp and (model.seq_length // s.cp) % s.tp:
        return (
            f"with sequence parallelism seq_length / cp ({model.seq_length // s.cp}) must be a "
            f"multiple of tp ({s.tp})"
        )
    return None


def mbs_rule(
    knob: Any, s: Any, model: Any, devices: int, gbs: int, fw: FrameworkRules
) -> str | None:
    """The global batch is whole micro-batches on every data-parallel rank (Megatron-LM
    microbatches.py)."""
    if gbs % (s.mbs * s.dp):
        return (
            f"global_batch_size ({gbs}) must be a multiple of micro_batch_size * dp "
            f"({s.mbs} * {s.dp} = {s.mbs * s.dp})"
        )
    return None


def cp_rule(
    knob: Any, s: Any, model: Any, devices: int, gbs: int, fw: FrameworkRules
) -> str | None:
    """The sequence splits of each context-parallel algorithm (MindSpeed
    context_parallel_feature.py validate_args: ring attention's 2 x cp load-balanced chunks,
    Ulysses' cp heads groups)."""
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
    # multiple of tp); which one is used: cp_rules.hybrid_ulysses_degree.
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


def _virtual_list_message(s: Any) -> str | None:
    """A layer list with virtual stages: per-rank totals must be multiples of vpp (Megatron-LM
    megatron/core/transformer/transformer_block.py get_num_layers_to_build divides a rank's layers
    evenly over its chunks); per-virtual-stage counts (`--pipeline-model-parallel-layout`,
    megatron/core/transformer/pipeline_parallel_layer_layout.py) need no more."""
    if s.per_virtual_stage or s.num_layer_list is None:
        return None
    uneven = [n for n in s.num_layer_list if n % s.vpp]
    if uneven:
        return (
            f"with vpp {s.vpp} each stage's layer count must be a multiple of vpp; num_layer_list "
            f"{list(s.num_layer_list)} is not (give one count per virtual stage instead)"
        )
    return None


def vpp_rule(
    knob: Any, s: Any, model: Any, devices: int, gbs: int, fw: FrameworkRules
) -> str | None:
    """The interleaved schedule: its pipeline size, a layer list's per-rank multiples of vpp and
    the micro-batches a multiple of pp (Megatron-LM arguments.py validate_args)."""
    if s.vpp == 1:
        return None
    message = interleaved_pipeline_message(s.pp, s.vpp, fw) or _virtual_list_message(s)
    if message:
        return message
    num_micro = _micro_batches(s, gbs)
    if num_micro % s.pp:
        return (
            f"the interleaved schedule needs the number of micro-batches ({num_micro}) to be a "
            f"multiple of pp ({s.pp})"
        )
    return None


def dualpipev_rule(
    knob: Any, s: Any, model: Any, devices: int, gbs: int, fw: FrameworkRules
) -> str | None:
    """DualPipeV as MindSpeed accepts it (Ascend/MindSpeed docs/features/dualpipev.md, "使用约束";
    its layer and micro-batch checks over the noop-padded stack: layer_stack.dualpipev_message):
    no context parallelism, no layer list of its own, none of the record's excluded switches."""
    if not s.dualpipev:
        return None
    message = dualpipev_message(model.num_layers, model.noop_layers, s.pp, _micro_batches(s, gbs))
    if message:
        return message
    padded = dualpipev_layer_list(model.num_layers, model.noop_layers, s.pp)
    listed = s.num_layer_list is not None and s.num_layer_list != padded
    if s.cp > 1 or listed or any(getattr(s, key) for key in knob.excludes):
        return "dualpipev excludes context parallelism, a num_layer_list and overlap_grad_reduce"
    return None


def fb_overlap_rule(
    knob: Any, s: Any, model: Any, devices: int, gbs: int, fw: FrameworkRules
) -> str | None:
    """MoE forward/backward overlap as MindSpeed accepts it (Ascend/MindSpeed
    docs/features/megatron_moe/megatron-moe-fb-overlap.md, "使用约束"): the alltoall dispatcher,
    etp 1 and grouped GEMM, none of the record's excluded switches, more micro-batches than pp
    with virtual stages."""
    if not s.moe_fb_overlap:
        return None
    if not model.is_moe or model.moe_token_dispatcher_type != Dispatcher.ALLTOALL:
        return "moe_fb_overlap needs an MoE model with the alltoall token dispatcher"
    if s.expert_tp != 1 or not model.moe_grouped_gemm:
        return f"moe_fb_overlap needs etp 1 (got {s.expert_tp}) and --moe-grouped-gemm"
    if any(getattr(s, key) for key in knob.excludes):
        return f"moe_fb_overlap excludes {' and '.join(knob.excludes)}"
    num_micro = _micro_batches(s, gbs)
    if s.vpp > 1 and num_micro <= s.pp:
        return f"moe_fb_overlap with vpp needs more micro-batches ({num_micro}) than pp ({s.pp})"
    return None


def recompute_kind_rule(
    knob: Any, s: Any, model: Any, devices: int, gbs: int, fw: FrameworkRules
) -> str | None:
    """A recompute count belongs to full recompute (Megatron-LM transformer_config.py)."""
    if s.recompute != Recompute.FULL and s.recompute_num_layers is not None:
        return f"recompute_num_layers ({s.recompute_num_layers}) applies to full recompute only"
    return None


def layer_split_rule(knob: Any, s: Any, model: Any, form: str) -> str | None:
    """The split's rules (the outer rules leave it open: the search chooses an uneven split with
    virtual stages, solve/virtual_split.py, for a vpp that does not divide the layers)."""
    num_layers = model.num_layers
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


def dualpipev_split_rule(knob: Any, s: Any, model: Any, form: str) -> str | None:
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


def recompute_count_rule(knob: Any, s: Any, model: Any, form: str) -> str | None:
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
    num_layers = model.num_layers
    chunk_max = max(s.chunk_layers(num_layers) if chunked else s.stage_layers(num_layers))
    if s.recompute_method == RecomputeMethod.BLOCK and r is not None and r >= 1:
        return None
    if r is None or not 1 <= r <= chunk_max:
        return (
            f"full recompute needs recompute_num_layers between 1 and the layers of the largest "
            f"stage chunk ({chunk_max}), got {r}"
        )
    return None


_A2A_DISPATCHERS = {
    MEGATRON: (Dispatcher.ALLTOALL, Dispatcher.FLEX),
    MINDSPEED: (Dispatcher.ALLTOALL, Dispatcher.ALLTOALL_SEQ),
}
"""The dispatchers each family's MoE all-to-all overlap runs with (sources: moe_comm_refusal)."""


def moe_comm_refusal(c: KnobContext) -> str | None:
    """Why the MoE all-to-all overlap (`overlap_moe_comm`) would not launch in context `c`, or None.

    Megatron-LM `--overlap-moe-expert-parallel-comm` (megatron-core 0.16.1
    transformer_config.py TransformerConfig.__post_init__): ep > 1, the alltoall or flex
    dispatcher, no full recompute (and so no recompute method or count), a virtual pipeline when
    pp > 1, bf16 or fp16, at most one MTP layer and then pp > 1; not with the shared-expert
    overlap (the record's `excludes`). MindSpeed `--moe-alltoall-overlap-comm` (Ascend/MindSpeed
    mindspeed/features_manager/moe/moe_alltoall_overlap.py MoEAlltoAllOverLapFeature.validate_args):
    the alltoall or alltoall_seq dispatcher with --moe-grouped-gemm; not with MC2 (`excludes`).
    A family not known (a search without a script): only what both share, a dispatcher of
    either list where the dispatcher is known. ASSUMPTION: MindSpeed's alltoall_seq branch also
    needs `--moe-permutation-async-comm` and, at tp > 1, `--moe-tp-extend-ep`; the context holds
    neither flag, so they are left to the script (README, "Overlap knobs")."""
    allowed = _A2A_DISPATCHERS.get(
        c.family or "", (*_A2A_DISPATCHERS[MEGATRON], Dispatcher.ALLTOALL_SEQ)
    )
    if c.dispatcher is not None and c.dispatcher not in allowed:
        names = " or ".join(d.value for d in allowed)
        return f"the {names} token dispatcher (this model's is {c.dispatcher})"
    if c.family == MINDSPEED and not c.grouped_gemm:
        return (
            "--moe-grouped-gemm (MindSpeed's alltoall overlap runs the experts as one grouped GEMM)"
        )
    if c.family != MEGATRON:
        return None
    if c.ep < 2:
        return f"expert parallelism (ep > 1; ep is {c.ep})"
    if c.recompute == Recompute.FULL:
        return "no full recompute (Megatron-Core refuses recompute_granularity full with it)"
    if c.pp > 1 and c.vpp < 2:
        return f"a virtual pipeline when pp > 1 (pp {c.pp}, vpp {c.vpp})"
    if c.precision not in ("bf16", "fp16"):
        return f"bf16 or fp16 training (this model trains in {c.precision})"
    if c.mtp_layers > 1 or (c.mtp_layers == 1 and c.pp < 2):
        return f"at most one MTP layer, and then pp > 1 (mtp {c.mtp_layers}, pp {c.pp})"
    return None


def shared_expert_refusal(c: KnobContext) -> str | None:
    """Why the shared-expert overlap (`moe_shared_expert_overlap`) would not launch, or None:
    with shared experts Megatron-Core wants the alltoall dispatcher (megatron-core 0.16.1
    transformer_config.py __post_init__: 'moe_shared_expert_overlap only works with alltoall
    token dispatcher'); a dispatcher not known is not refused."""
    if c.shared_experts and c.dispatcher is not None and c.dispatcher != Dispatcher.ALLTOALL:
        return f"the alltoall token dispatcher with shared experts (this model's is {c.dispatcher})"
    return None
