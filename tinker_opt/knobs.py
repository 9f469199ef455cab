"""The knob registry: one record per strategy knob, read by every stage that handles it.

A record (knob_types.py) says, once, what the script reader (script/strategy_args.py), the
validity rules (rules.py), the search space (solve/space.py), the writers
(emit/strategy_plan.py, expressible.py), the version table (script/versions.py) and the flag
table `inspect` reports from (script/flags.py) each need to know about a knob: its flags with the
framework versions that have each, its values and default, where it exists, what turning it on
requires and excludes, where the search turns it on, and the companion flags written back with
it. Adding a knob is its record here plus its cost term (ARCHITECTURE.md, "Adding a knob"): a
switch needs no Strategy field (strategy.py keeps the registry's switches by key).

The records: the communication-overlap switches (`Knob`, `OVERLAP_KNOBS`), the knobs of the
parallel layout that one flag spells (`LayoutKnob`, `LAYOUT_KNOBS`: tp, pp, cp, ep, etp, mbs and
sp) and the knobs with more than one setting (`ChoiceKnob`, `CHOICE_KNOBS`: vpp, the schedule,
fb-overlap, recompute kind / method / count / modules, ZeRO, the cp algorithm, the dispatcher,
FP8). A choice knob's rules are functions of knob_rules.py its record holds (`check` on the outer
configuration, `split_check` on the layer split); rules.py runs every record's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from functools import cache
from typing import Any

from tinker_opt import knob_rules
from tinker_opt.choices import (
    CpAlgo,
    Dispatcher,
    Recompute,
    RecomputeMethod,
    RecomputeModule,
    Schedule,
)
from tinker_opt.knob_types import (
    MEGATRON,
    MINDSPEED,
    ChoiceKnob,
    Knob,
    KnobContext,
    LayoutKnob,
    ModelFacts,
    Spelling,
    Version,
)
from tinker_opt.knob_types import spell as _spell
from tinker_opt.knob_types import spell_always as _spell_always

__all__ = ["MEGATRON", "MINDSPEED", "ChoiceKnob", "Knob", "KnobContext", "LayoutKnob", "Spelling"]

# Versions: MindSpeed-LLM, the first release whose examples use the flag
# (reference/script-conventions.md); Megatron-LM, arguments.py of the named core release.
# fmt: off
OVERLAP_KNOBS: tuple[Knob, ...] = (
    Knob(key="overlap_grad_reduce", spellings=(_spell("--overlap-grad-reduce", (0, 9, 2), (0, 0)),),
         effect="gradient reduce in buckets under the last backward (last bucket exposed)",
         source="NVIDIA/Megatron-LM megatron/training/arguments.py"),
    Knob(key="overlap_param_gather", spellings=(_spell("--overlap-param-gather", (0, 9, 3), (0, 0)),),
         exists=lambda c: c.dist_opt, accepts=lambda c: c.dist_opt,
         needs="the distributed optimizer (dist_opt, zero >= 1)", requires=("overlap_grad_reduce",),
         effect="parameter all-gather under the next forward (dist-opt; first bucket exposed)",
         source="Megatron-LM arguments.py: 'Must use --overlap-param-gather with --overlap-grad-reduce'; "
                "'Must use --overlap-param-gather-with-optimizer-step with --overlap-param-gather'"),
    Knob(key="overlap_moe_comm", spellings=(_spell("--moe-alltoall-overlap-comm", (2, 0, 0), None),
                                            _spell("--overlap-moe-expert-parallel-comm", None, (0, 14))),
         exists=lambda c: c.is_moe, accepts=lambda c: c.is_moe,
         needs="a MoE model; it applies to MoE models only and this model has no experts",
         refusal=knob_rules.moe_comm_refusal, excludes=("tp_comm_overlap", "moe_shared_expert_overlap"),
         pays_off=lambda c: c.ep > 1, effect="MoE all-to-all: backward one hidden behind the weight gradients",
         source="Ascend/MindSpeed mindspeed/features_manager/moe/moe_alltoall_overlap.py validate_args "
                "(incompatible_check use_ascend_mc2); megatron-core transformer_config.py __post_init__ "
                "('disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm')"),
    Knob(key="tp_comm_overlap", spellings=(_spell("--use-ascend-mc2", (2, 2, 0), None),
                                           _spell("--use-mc2", (0, 9, 2), None, until_mindspeed=(2, 2, 0)),
                                           _spell("--tp-comm-overlap", None, (0, 0))),
         exists=lambda c: c.tp > 1, accepts=lambda c: c.tp > 1 and c.sp,
         needs="tp > 1 with sequence parallelism", companions=("--tp-comm-overlap-cfg",),
         pays_off=lambda c: c.tp > 1 and c.sp, added_by_search=False,
         effect="TP communication fused into the matmuls in tp chunks (MC2 on Ascend, TE userbuffers "
                "on GPUs): one chunk exposed, the rest hidden behind the matmul",
         source="Ascend/MindSpeed docs/zh/features/mc2.md; Megatron-LM arguments.py (tp_comm_overlap)"),
    # ASSUMPTION: the first versions (Megatron-LM core 0.9; MindSpeed-LLM 2.1.0, on a core that has it).
    Knob(key="overlap_param_gather_with_optimizer_step",
         spellings=(_spell("--overlap-param-gather-with-optimizer-step", (2, 1, 0), (0, 9)),),
         exists=lambda c: c.dist_opt, accepts=lambda c: c.dist_opt and c.vpp > 1,
         needs="the distributed optimizer and a virtual pipeline (vpp > 1)",
         requires=("overlap_param_gather",), priced=False,
         effect="first parameter all-gather under the optimizer step (dist-opt, vpp > 1)",
         source="Megatron-LM arguments.py: 'Must use --overlap-param-gather-with-optimizer-step with "
                "--overlap-param-gather', '... only supported with interleaved pipeline parallelism'"),
    # ASSUMPTION: Megatron-LM core 0.14, the release of --overlap-moe-expert-parallel-comm it needs;
    # no MindSpeed-LLM example found.
    Knob(key="delay_wgrad_compute", spellings=(_spell("--delay-wgrad-compute", None, (0, 14)),),
         exists=lambda c: c.is_moe, accepts=lambda c: c.is_moe,
         needs="a MoE model; it delays the expert weight gradients", requires=("overlap_moe_comm",),
         priced=False,
         effect="expert weight gradients delayed behind the MoE all-to-all (with its overlap)",
         source="Megatron-LM megatron/core/transformer/transformer_config.py: "
                "'overlap_moe_expert_parallel_comm must be enabled when enabling delay_wgrad_compute'"),
    # ASSUMPTION: Megatron-LM core 0.16, the release whose ModelParallelConfig has it (0.16.1 read).
    Knob(key="ep_overlap_early_attn_memory_release", requires=("overlap_moe_comm",), priced=False,
         spellings=(_spell("--ep-overlap-early-attn-memory-release", None, (0, 16)),),
         exists=lambda c: c.is_moe, accepts=lambda c: c.is_moe, needs="a MoE model with the MoE all-to-all overlap",
         effect="attention backward before the MoE forward in the MoE all-to-all overlap (less peak memory)",
         source="megatron-core model_parallel_config.py, transformer_config.py: 'overlap_moe_expert_parallel_comm "
                "must be enabled when enabling ep_overlap_early_attn_memory_release'"),
    # ASSUMPTION: Megatron-LM core 0.10, the first release read with the shared-expert stream; no
    # MindSpeed-LLM example found. With shared experts Megatron needs the alltoall dispatcher
    # (knob_rules.shared_expert_refusal); without them it prices nothing, so it is not searched.
    Knob(key="moe_shared_expert_overlap", spellings=(_spell("--moe-shared-expert-overlap", None, (0, 10)),),
         exists=lambda c: c.is_moe, accepts=lambda c: c.is_moe, refusal=knob_rules.shared_expert_refusal,
         needs="a MoE model with shared experts", pays_off=lambda c: c.ep > 1 and c.shared_experts,
         effect="MoE dispatch / combine all-to-all hidden behind the shared expert's compute (costs/overlap.py)",
         source="NVIDIA/Megatron-LM megatron/core/transformer/moe/shared_experts.py (shared expert stream)"),
    # ASSUMPTION: MindSpeed-LLM 2.0.0, the release of its --moe-alltoall-overlap-comm twin (the
    # feature registers in mindspeed/features_manager at MindSpeed's optimization level 2). Its
    # validate_args also needs --moe-grouped-gemm (a model fact the cost model prices: accepted
    # only with it) and --moe-permutation-async-comm (unpriced: the writer adds it with the knob).
    Knob(key="moe_allgather_overlap_comm", spellings=(_spell("--moe-allgather-overlap-comm", (2, 0, 0), None),),
         exists=lambda c: c.dispatcher == Dispatcher.ALLGATHER,
         accepts=lambda c: c.dispatcher == Dispatcher.ALLGATHER and c.grouped_gemm,
         needs="a MoE model with the allgather token dispatcher and --moe-grouped-gemm",
         pays_off=lambda c: c.ep > 1 or c.tp > 1, with_flags=("--moe-permutation-async-comm",),
         effect="MoE allgather dispatcher: backward all-gather / reduce-scatter hidden behind the weight gradients",
         source="Ascend/MindSpeed docs/features/megatron_moe/megatron-moe-allgather-overlap-comm.md; "
                "mindspeed/features_manager/moe/moe_allgather_overlap.py"),
)
# fmt: on
"""The communication-overlap switches, in Strategy schema order (strategy.OVERLAP_KEYS). TP
overlap is searched only where the script already sets it: MindSpeed-LLM switches MC2 off in its
argument validation unless the code is edited (Ascend/MindSpeed-LLM
docs/zh/pytorch/features/mcore/mc2.md) and Megatron's --tp-comm-overlap needs Transformer Engine
userbuffers set up for the job, so a script cannot simply gain it."""


# Versions: Megatron-LM core releases and MindSpeed-LLM's first examples with the flag
# (reference/script-conventions.md); tp, pp, mbs and sp: every version. In the order the writer
# looks for the flag to add new ones after (emit/strategy_plan.py anchors).
# fmt: off
LAYOUT_KNOBS: tuple[LayoutKnob, ...] = (
    LayoutKnob(key="pp", spelling=_spell_always("--pipeline-model-parallel-size")),
    LayoutKnob(key="tp", spelling=_spell_always("--tensor-model-parallel-size"), check=knob_rules.tp_rule),
    LayoutKnob(key="cp", spelling=_spell("--context-parallel-size", (0, 9, 3), (0, 5))),
    LayoutKnob(key="ep", spelling=_spell("--expert-model-parallel-size", (0, 9, 1), (0, 4)), group="moe",
               check=knob_rules.ep_rule),
    # role "one": MindSpeed-LLM's experts split over tp instead of tp inside the experts (etp 1).
    LayoutKnob(key="etp", spelling=_spell("--expert-tensor-parallel-size", (2, 2, 0), (0, 10)), group="moe",
               others=(_spell("--moe-tp-extend-ep", (2, 0, 0), None, role="one",
                              effect="whole experts over tp x ep ranks (read as ep x tp at etp 1; MindSpeed)"),)),
    LayoutKnob(key="sp", spelling=_spell_always("--sequence-parallel"), default=False,
               effect="activations split over tp outside the matmuls", check=knob_rules.sp_rule),
    LayoutKnob(key="mbs", spelling=_spell_always("--micro-batch-size"), effect="micro-batch size",
               check=knob_rules.mbs_rule),
)
# fmt: on
"""The layout knobs one flag spells (their rules: `check`, run by rules.check_outer; the writer:
strategy_plan)."""

LAYOUT: dict[str, LayoutKnob] = {knob.key: knob for knob in LAYOUT_KNOBS}

_RECOMPUTE_EFFECT = "activation recompute (selective or full, method, layer count)"
_SCHEDULE_EFFECT = (
    "DualPipeV schedule and MoE forward/backward overlap (MindSpeed; costs/coefficients.py, "
    "costs/overlap.py)"
)
_CP_RING_ONLY = ("--use-cp-send-recv-overlap", "--cp-attention-mask-type", "--cp-window-size",
                 "--use-fused-ring-attention-update")  # fmt: skip
_CP_ADAPTIVE_ONLY = ("--adaptive-cp-dynamic-attn-mask", "--adaptive-cp-only-reschedule",
                     "--adaptive-cp-manually-set-mask-list")  # fmt: skip

# Roles (Spelling.role) of the knobs several flags spell: vpp "layers" (chunk size in layers),
# "size" (chunks per rank); recompute "selective" (the switch that means it); zero "dist_opt"
# (stage >= 1), "stage" (DeepSpeed's), "deepspeed" (its backend), "fsdp" (Megatron-FSDP), "sharding"
# (its strategy, words = the stage's name). Versions as for the switches: MindSpeed-LLM's first
# examples with the flag, Megatron-LM's core release (reference/script-conventions.md);
# `_spell_always`: every version of both families.
# fmt: off
CHOICE_KNOBS: tuple[ChoiceKnob, ...] = (
    ChoiceKnob(key="vpp", kind=int, searched=True, default=1,
               spellings=(_spell("--num-layers-per-virtual-pipeline-stage", (0, 9, 2), (0, 0), role="layers"),
                          _spell_always("--virtual-pipeline-model-parallel-size", role="size"),
                          _spell("--num-virtual-stages-per-pipeline-rank", None, (0, 13), role="size")),
               check=knob_rules.vpp_rule,
               priced="costs/pipeline.py (v chunks per rank), costs/coefficients.py _chunk_bounds",
               effect="virtual pipeline (interleaved schedule)"),
    ChoiceKnob(key="dualpipev", kind=Schedule, searched=True,
               values=(Schedule.ONE_F_ONE_B, Schedule.DUALPIPEV), default=Schedule.ONE_F_ONE_B,
               spellings=(_spell("--schedules-method", (2, 0, 0), None),), companions=("--dualpipev-dw-detach",),
               excludes=("overlap_grad_reduce",),
               check=knob_rules.dualpipev_rule, split_check=knob_rules.dualpipev_split_rule,
               priced="costs/pipeline.py, costs/stage_terms.py dualpipev_inflight_x_v", effect=_SCHEDULE_EFFECT,
               source="Ascend/MindSpeed mindspeed/features_manager/pipeline_parallel/dualpipev_feature.py"),
    # Roles: "" MindSpeed-LLM's list, "first" / "last" Megatron-LM's first and last stage,
    # "embedding" / "loss" its account-for switches, "layout" its layout string (per virtual stage).
    # Uneven virtual pipelines (layout, account-for): Megatron-LM main after core_v0.12
    # (reference/script-conventions.md "Main adds"; dated to 0.13). ASSUMPTION: MindSpeed-LLM never
    # (one tests/poc script on master only; its --num-layer-list refuses a virtual pipeline).
    ChoiceKnob(key="num_layer_list", kind=tuple, searched=True,
               spellings=(_spell("--num-layer-list", (0, 9, 1), None),
                          _spell("--decoder-first-pipeline-num-layers", None, (0, 10), role="first"),
                          _spell("--decoder-last-pipeline-num-layers", None, (0, 10), role="last"),
                          _spell("--account-for-embedding-in-pipeline-split", None, (0, 13), role="embedding"),
                          _spell("--account-for-loss-in-pipeline-split", None, (0, 13), role="loss"),
                          _spell("--pipeline-model-parallel-layout", None, (0, 13), role="layout",
                                 effect="layers per virtual stage (Megatron layout string; "
                                        "script/pipeline_layout.py)")),
               split_check=knob_rules.layer_split_rule,
               priced="costs/coefficients.py (per-stage and per-chunk layers), solve/ (the exact split)",
               effect="uneven layer split over stages"),
    ChoiceKnob(key="moe_fb_overlap", kind=bool, searched=True, values=(False, True), default=False,
               spellings=(_spell("--moe-fb-overlap", (2, 0, 0), None),),
               excludes=("overlap_grad_reduce", "overlap_moe_comm"),
               check=knob_rules.fb_overlap_rule, priced="costs/layer_comm.py (overlap.fb_overlap_exposed)",
               effect=_SCHEDULE_EFFECT,
               source="Ascend/MindSpeed docs/features/megatron_moe/megatron-moe-fb-overlap.md"),
    ChoiceKnob(key="recompute", kind=Recompute, searched=True, default=Recompute.NONE,
               spellings=(_spell_always("--recompute-granularity"),
                          _spell_always("--recompute-activations", role="selective")),
               check=knob_rules.recompute_kind_rule, priced="costs/terms.py, costs/recompute.py",
               effect=_RECOMPUTE_EFFECT),
    ChoiceKnob(key="recompute_method", kind=RecomputeMethod, searched=True, default=RecomputeMethod.UNIFORM,
               spellings=(_spell_always("--recompute-method"),),
               rules="knob_rules.recompute_count_rule (recompute_num_layers' record)",
               priced="costs/recompute.py chunk_plan", effect=_RECOMPUTE_EFFECT),
    # Role "per_rank": MindSpeed's switch that makes the count a pipeline rank's over its virtual
    # stages (script/recompute_args.py); its first examples are MindSpeed-LLM 1.0.0's.
    ChoiceKnob(key="recompute_num_layers", kind=int, searched=True, default=1,
               spellings=(_spell_always("--recompute-num-layers"),
                          _spell("--enable-recompute-layers-per-pp-rank", (1, 0, 0), None, role="per_rank",
                                 effect="full block recompute: --recompute-num-layers counts a pipeline rank's "
                                        "layers over its virtual stages (MindSpeed; read per chunk)")),
               split_check=knob_rules.recompute_count_rule, priced="costs/recompute.py chunk_plan",
               effect=_RECOMPUTE_EFFECT,
               source="Ascend/MindSpeed mindspeed/core/transformer/transformer_block.py "
                      "_block_method_checkpointed_forward_func"),
    ChoiceKnob(key="zero", kind=int, searched=True, values=(0, 1, 2, 3), searched_values=(0, 1), default=0,
               spellings=(_spell_always("--use-distributed-optimizer", role="dist_opt",
                                        effect="optimizer states sharded over dp (ZeRO-1)"),
                          _spell_always("--zero-stage", role="stage"), _spell_always("--deepspeed", role="deepspeed"),
                          _spell_always("--use-megatron-fsdp", role="fsdp"),
                          _spell_always("--use-custom-fsdp", role="fsdp"),
                          _spell_always("--data-parallel-sharding-strategy", role="sharding",
                                        words=("no_shard", "optim", "optim_grads", "optim_grads_params"))),
               rules="strategy.Strategy (zero in the values), expressible (stages 2, 3 need a backend flag)",
               priced="costs/zero_terms.py, costs/data_parallel.py",
               effect="ZeRO stage 0..3 (DeepSpeed; Megatron-FSDP sharding strategy)",
               source="Megatron-LM arguments.py (--use-megatron-fsdp, --data-parallel-sharding-strategy: the "
                      "index is the stage); DeepSpeed --zero-stage (Rajbhandari et al. 2020)"),
    ChoiceKnob(key="cp_algo", kind=CpAlgo, searched=True, default=CpAlgo.MEGATRON,
               searched_values=(CpAlgo.MEGATRON, CpAlgo.ULYSSES),
               value_since={"megatron_cp_algo": (0, 9, 3), "ulysses_cp_algo": (0, 9, 3),
                            "hybrid_cp_algo": (0, 9, 3), "adaptive_cp_algo": (2, 0, 0),
                            "kvallgather_cp_algo": (26, 1, 0)},
               spellings=(_spell("--context-parallel-algo", (0, 9, 3), None),),
               companions=(*_CP_RING_ONLY, "--kv-head-repeat-before-uly-alltoall", *_CP_ADAPTIVE_ONLY,
                           "--ulysses-degree-in-cp", "--cp-comm-type", "--hierarchical-context-parallel-sizes"),
               value_companions=((_CP_RING_ONLY, ("megatron_cp_algo", "hybrid_cp_algo", "adaptive_cp_algo")),
                                 (("--kv-head-repeat-before-uly-alltoall",), ("ulysses_cp_algo", "hybrid_cp_algo")),
                                 (_CP_ADAPTIVE_ONLY, ("adaptive_cp_algo",)),
                                 (("--ulysses-degree-in-cp",), ("hybrid_cp_algo",))),
               check=knob_rules.cp_rule, priced="costs/cp_terms.py",
               effect="context-parallel algorithm (MindSpeed)",
               source="Ascend/MindSpeed mindspeed/features_manager/context_parallel/context_parallel_feature.py"),
    ChoiceKnob(key="recompute_modules", kind=RecomputeModule, searched=False, home="job",
               spellings=(_spell_always("--recompute-modules"),),
               rules="script/recompute_args.recompute_modules", priced="costs/recompute_modules.py",
               effect="selective recompute by module (Megatron-Core): core_attn, mla_up_proj, mlp, moe_act, "
                      "layernorm, moe and shared_experts, each by what it frees and reruns "
                      "(costs/recompute_modules.py)"),
    ChoiceKnob(key="moe_token_dispatcher_type", kind=Dispatcher, searched=False, home="model",
               default=Dispatcher.ALLGATHER,
               spellings=(_spell_always("--moe-token-dispatcher-type"),),
               rules="knob_rules.fb_overlap_rule (fb-overlap needs alltoall)", priced="costs/moe_terms.py",
               effect="how tokens reach the experts and how the experts run (costs/moe_terms.py)"),
    ChoiceKnob(key="fp8_format", kind=str, searched=True, home="model", values=("e4m3", "hybrid"),
               spellings=(_spell_always("--fp8-format"),),
               rules="specs.ModelSpec", priced="costs/fp8_terms.py, costs/fp8_activation.py",
               effect="FP8 training: linear-layer GEMMs at the FP8 rate with cast / scaling kernels, FP8 weight "
                      "copies, FP8 parameter all-gather (profile/fp8.py)",
               source="NVIDIA/Megatron-LM arguments.py; searched by `search --allow-fp8` (verbs/precision.py)"),
)
# fmt: on
"""The knobs with more than one setting, or spelled by more than one flag. Their rules run in this
order (rules.py): a record whose rule is the more specific comes first (DualPipeV's split, the
framework's own, before the layer split's general rules)."""

CHOICES: dict[str, ChoiceKnob] = {knob.key: knob for knob in CHOICE_KNOBS}

KNOBS: dict[str, Knob] = {knob.key: knob for knob in OVERLAP_KNOBS}
assert len(KNOBS) == len(OVERLAP_KNOBS), "a knob is declared twice"
assert len(CHOICES) == len(CHOICE_KNOBS), "a knob is declared twice"
assert not (set(KNOBS) & set(LAYOUT) or set(CHOICES) & (set(KNOBS) | set(LAYOUT))), "declared twice"


def all_spellings() -> list[tuple[Spelling, Knob | LayoutKnob | ChoiceKnob]]:
    """Every flag of every record, with its record (the version table and the flag table)."""
    records: list[Knob | LayoutKnob | ChoiceKnob] = [*OVERLAP_KNOBS, *LAYOUT_KNOBS, *CHOICE_KNOBS]
    return [(spelling, record) for record in records for spelling in record.spellings]


def flag_versions() -> tuple[dict[str, dict[str, Version | None]], dict[str, dict[str, Version]]]:
    """The knobs' rows of script/versions.py FLAG_SINCE and FLAG_UNTIL (a flag every version has
    has none)."""
    spellings = [spelling for spelling, _ in all_spellings()]
    since = {spelling.flag: dict(spelling.since) for spelling in spellings if spelling.since}
    until = {spelling.flag: dict(spelling.until) for spelling in spellings if spelling.until}
    return since, until


@cache
def switched_off_with(excluded: frozenset[str]) -> tuple[str, ...]:
    """The switches that must be off when those of `excluded` are: them and every switch that
    requires one of them (transitively), in the registry's order."""
    off = set(excluded)
    while grown := {k for k, knob in KNOBS.items() if k not in off and off & set(knob.requires)}:
        off |= grown
    return tuple(key for key in KNOBS if key in off)


def excluded_pairs() -> list[tuple[str, str]]:
    """Every pair of knobs that exclude each other, once, whichever side declares it."""
    return list(_excluded_pairs())


@functools.cache
def _excluded_pairs() -> tuple[tuple[str, str], ...]:
    """excluded_pairs, computed once (the registry is fixed; the search asks per configuration)."""
    pairs = {tuple(sorted((knob.key, other))) for knob in KNOBS.values() for other in knob.excludes}
    return tuple(sorted(pairs))  # type: ignore[arg-type]


def knob_message(
    s: Any,
    is_moe: bool,
    dispatcher: str | None = None,
    grouped_gemm: bool = False,
    facts: ModelFacts | None = None,
) -> str | None:
    """Why the framework refuses the strategy's switches (the first reason), or None; `facts`
    (the model's and the framework family's, knob_types.ModelFacts) replace the three before."""
    facts = facts or ModelFacts(is_moe, dispatcher, grouped_gemm)
    context = KnobContext.of_facts(s, facts)
    for knob in KNOBS.values():
        if not getattr(s, knob.key):
            continue
        if not knob.accepts(context):
            return (
                f"{knob.key} needs {knob.needs} (tp {s.tp}, sp {s.sp}, zero {s.zero}); turn it off"
            )
        if knob.refusal and (reason := knob.refusal(context)):
            return f"{knob.key} needs {reason}; turn it off ({knob.flags[-1]} / {knob.flags[0]})"
        for other in knob.requires:
            if getattr(s, other) is False:
                return f"{knob.key} needs {other} on ({knob.source})"
    for a, b in _excluded_pairs():
        if getattr(s, a) and getattr(s, b):
            return f"{a} and {b} exclude each other; turn one of them off"
    return None


def read_switches(has: Callable[[str], bool], context: KnobContext) -> dict[str, bool | None]:
    """The knobs as a script sets them: on when any spelling is present, None where the knob
    does not exist (the reader's normal form)."""
    return {
        key: any(has(flag) for flag in knob.flags) if knob.exists(context) else None
        for key, knob in KNOBS.items()
    }


def search_choices(context: KnobContext, allowed: tuple[str, ...]) -> list[dict[str, Any]]:
    """The switch settings the search tries for an outer configuration: every allowed knob on
    where it pays off and the framework accepts it, off where it exists but does not, None where
    it does not exist; for each pair that excludes each other and would both be on, one choice
    with each of the two (the search picks)."""
    on = {
        key
        for key, knob in KNOBS.items()
        if key in allowed
        and knob.priced
        and knob.accepts(context)
        and not (knob.refusal and knob.refusal(context))
        and knob.pays_off(context)
    }
    choices = [on - set(switched_off_with(frozenset(KNOBS.keys() - on)))]
    for a, b in excluded_pairs():
        choices = [
            variant - set(switched_off_with(frozenset(variant) ^ chosen))
            for chosen in choices
            for variant in ((chosen - {a}, chosen - {b}) if {a, b} <= chosen else (chosen,))
        ]
    choices = [c for i, c in enumerate(choices) if c not in choices[:i]]
    return [
        {
            key: (key in chosen) if knob.set_by_search(context) else None
            for key, knob in KNOBS.items()
        }
        for chosen in choices
    ]
