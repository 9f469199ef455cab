"""Reading the script's current parallel strategy from its flags, normalised as the Strategy schema.

Normalisation (what a script can express, and what the framework really does):
* sp only counts with tp > 1 (Megatron turns sequence parallelism off at tp = 1);
* cp_algo is None when cp == 1, else `--context-parallel-algo` or MindSpeed's default
  `megatron_cp_algo` (Megatron-LM has only the ring algorithm: `megatron_cp_algo`);
* etp: `--expert-tensor-parallel-size`, else 1 with `--moe-tp-extend-ep`, else None (= tp); None
  for dense models;
* ep: `--expert-model-parallel-size`, times tp with MindSpeed's `--moe-tp-extend-ep` (the tp group
  splits the experts, not their weights: num_experts % (tp x ep) == 0, each rank holds
  num_experts / (tp x ep) whole experts; Ascend/MindSpeed
  docs/features/megatron_moe/megatron-moe-tp-extend-ep.md and MoETpExtendEpFeature.validate_args),
  which is Megatron-Core's expert grid with ep x tp expert ranks at etp 1;
* recompute: `--recompute-activations` or `--recompute-granularity selective` -> selective;
  `--recompute-granularity full` -> full with `--recompute-method` (default uniform) and
  `--recompute-num-layers` (default 1); method and layer count are None otherwise;
* vpp = L / (pp x `--num-layers-per-virtual-pipeline-stage`) with L the script's `--num-layers`;
* num_layer_list from `--num-layer-list` (MindSpeed) or Megatron's
  `--decoder-first/last-pipeline-num-layers`, `--pipeline-model-parallel-layout` (one count per
  virtual stage, vpp = its stages / pp) or `--account-for-embedding/loss-in-pipeline-split`
  (script/pipeline_layout.py); None for an even split;
* dp = world / (tp x pp x cp);
* zero: DeepSpeed's `--zero-stage N` (pre-1.0 ModelLink scripts with `--deepspeed`), or Megatron-core
  FSDP (`--use-megatron-fsdp`, `--use-custom-fsdp` before core 0.14) with
  `--data-parallel-sharding-strategy no_shard | optim | optim_grads | optim_grads_params` (0..3,
  default no_shard); else 1 with `--use-distributed-optimizer`, 0 without.
* overlap switches: on when any of the record's spellings is present, None where the record
  says the knob does not exist (knobs.read_switches).

Every flag and value comes from the knob's record (knobs.py: LAYOUT for the sizes, CHOICES for
vpp, recompute, ZeRO, the cp algorithm and the schedule, KNOBS for the switches); the record's
roles (knob_types.Spelling.role) tell its flags apart.
"""

from __future__ import annotations

from collections.abc import Callable

from tinker_opt.choices import CpAlgo, Recompute, RecomputeMethod, Schedule, choice
from tinker_opt.errors import ScriptError, StrategyError
from tinker_opt.knobs import CHOICES, LAYOUT, KnobContext, read_switches
from tinker_opt.script.launch import Launch
from tinker_opt.script.model_args import int_list, int_value
from tinker_opt.script.pipeline_layout import (
    EMBEDDING_FLAG,
    LAYOUT_FLAG,
    LOSS_FLAG,
    accounted_split,
    layout_split,
    parse_layout,
)
from tinker_opt.script.recompute_args import PER_RANK_FLAG, chunk_count
from tinker_opt.strategy import Strategy

DEFAULT_CP_ALGO = CpAlgo(CHOICES["cp_algo"].default)
_ZERO, _VPP, _RECOMPUTE = CHOICES["zero"], CHOICES["vpp"], CHOICES["recompute"]
_SPLIT = CHOICES["num_layer_list"]
SHARDING_FLAG = _ZERO.flag_for("sharding")
SHARDING_STRATEGIES = _ZERO.words_for("sharding")
"""Megatron-FSDP's sharding strategies, index = ZeRO stage (the zero record, knobs.py)."""
ZERO_STAGE_FLAG = _ZERO.flag_for("stage")


def zero_backend(launch: Launch) -> str | None:
    """`deepspeed` or `megatron_fsdp` when the script chooses its ZeRO stage by flag, else None."""
    if launch.has(_ZERO.flag_for("deepspeed")) and launch.has(ZERO_STAGE_FLAG):
        return "deepspeed"
    if any(launch.has(flag) for flag in _ZERO.flags_for("fsdp")):
        return "megatron_fsdp"
    return None


def _zero(launch: Launch) -> int:
    """The ZeRO stage the flags choose (see the module docstring)."""
    backend = zero_backend(launch)
    if backend == "deepspeed":
        stage = int_value(launch, ZERO_STAGE_FLAG)
        if stage is None or stage not in _ZERO.choices:
            *rest, last = _ZERO.choices
            raise ScriptError(
                f"{ZERO_STAGE_FLAG} is {stage}; DeepSpeed's ZeRO stages are "
                f"{', '.join(map(str, rest))} and {last}"
            )
        return stage
    if backend == "megatron_fsdp":
        name = launch.value(SHARDING_FLAG) or SHARDING_STRATEGIES[0]
        if name not in SHARDING_STRATEGIES:
            raise ScriptError(
                f"{SHARDING_FLAG} is {name!r}; Megatron-FSDP takes one of {list(SHARDING_STRATEGIES)}"
            )
        return SHARDING_STRATEGIES.index(name)
    return _ZERO.default


VPP_LAYERS_FLAG = _VPP.flag_for("layers")
VPP_SIZE_FLAGS = _VPP.flags_for("size")


def _recompute(launch: Launch, vpp: int, warn: Callable[[str], None]) -> dict:
    granularity = launch.value(_RECOMPUTE.flag)
    if launch.has(_RECOMPUTE.flag_for("selective")) or granularity == Recompute.SELECTIVE:
        return {"recompute": Recompute.SELECTIVE}
    if granularity != Recompute.FULL:
        return {}
    method_knob, count_knob = CHOICES["recompute_method"], CHOICES["recompute_num_layers"]
    method = launch.value(method_knob.flag)
    if method not in method_knob.choices:
        warn(
            f"{_RECOMPUTE.flag} full without {method_knob.flag} "
            f"{'|'.join(dict.fromkeys((method_knob.default, *method_knob.choices)))}; "
            f"read as {method_knob.default} (Megatron needs the method)"
        )
        method = method_knob.default
    count = int_value(launch, count_knob.flag, count_knob.default)
    if method == RecomputeMethod.BLOCK and launch.has(PER_RANK_FLAG):
        count = chunk_count(count, vpp, warn)  # MindSpeed's count per pipeline rank
    return {"recompute": Recompute.FULL, "recompute_method": method, "recompute_num_layers": count}


def _vpp(launch: Launch, pp: int, total_layers: int, warn: Callable[[str], None]) -> int:
    layout = launch.value(LAYOUT_FLAG)
    if layout:  # the layout's stage count is pp x vpp (pipeline_parallel_layer_layout.py)
        return max(len(parse_layout(layout)) // pp, 1)
    for flag in VPP_SIZE_FLAGS:
        size = int_value(launch, flag)
        if size:
            return size
    arg = launch.last(VPP_LAYERS_FLAG)
    if arg is None:
        return 1
    if not arg.value_text:
        warn(f"{VPP_LAYERS_FLAG} has no value (is its variable set?); read as no virtual pipeline")
        return 1
    per_chunk = int_value(launch, VPP_LAYERS_FLAG, 0)
    # The account-for switches count the embedding / the loss as one layer each of the split
    # (NVIDIA/Megatron-LM megatron/training/arguments.py validate_args: num_layers += 1 per
    # switch before vpp = num_layers / pp / --num-layers-per-virtual-pipeline-stage).
    counted = total_layers + int(launch.has(EMBEDDING_FLAG)) + int(launch.has(LOSS_FLAG))
    if per_chunk <= 0 or counted % (pp * per_chunk):
        accounted = f" (+ {counted - total_layers} for the account-for switches)" * (
            counted > total_layers
        )
        warn(
            f"--num-layers {total_layers}{accounted} is not a multiple of pp ({pp}) x "
            f"{VPP_LAYERS_FLAG} ({per_chunk}); read as no virtual pipeline"
        )
        return 1
    return counted // (pp * per_chunk)


def _megatron_layer_list(launch: Launch, pp: int, total_layers: int) -> tuple[int, ...] | None:
    first_flag, last_flag = _SPLIT.flag_for("first"), _SPLIT.flag_for("last")
    first, last = int_value(launch, first_flag), int_value(launch, last_flag)
    if (first is None and last is None) or pp < 2:
        return None
    fixed = [n for n in (first, last) if n is not None]
    rest_stages = pp - len(fixed)
    rest_layers = total_layers - sum(fixed)
    if rest_stages < 0 or rest_layers < 0 or (rest_stages and rest_layers % rest_stages):
        raise ScriptError(
            f"--decoder-first/last-pipeline-num-layers ({first}, {last}) do not split "
            f"{total_layers} layers evenly over the other {rest_stages} stages; fix them"
        )
    middle = [rest_layers // rest_stages] * rest_stages if rest_stages else []
    return tuple(
        ([first] if first is not None else []) + middle + ([last] if last is not None else [])
    )


def _megatron_layout(launch: Launch, pp: int, vpp: int, total_layers: int, mtp_layers: int):
    """Per-virtual-stage counts of `--pipeline-model-parallel-layout` or of the account-for
    switches (script/pipeline_layout.py), None when the script uses neither."""
    layout = launch.value(LAYOUT_FLAG)
    if layout:
        chunks = layout_split(layout, pp, total_layers, mtp_layers)[1]
        return None if len(set(chunks)) == 1 else tuple(chunks)  # an even layout
    embedding, loss = launch.has(EMBEDDING_FLAG), launch.has(LOSS_FLAG)
    if not (embedding or loss) or pp < 2:
        return None
    if launch.has(_SPLIT.flag_for("first")) or launch.has(_SPLIT.flag_for("last")):
        raise ScriptError(
            "--account-for-embedding/loss-in-pipeline-split cannot be combined with "
            "--decoder-first/last-pipeline-num-layers (Megatron refuses both); keep one"
        )
    return tuple(accounted_split(total_layers, pp, vpp, embedding, loss))


def _layer_list(
    launch: Launch, pp: int, vpp: int, total_layers: int, mtp_layers: int, warn
) -> tuple[int, ...] | None:
    layers = int_list(launch, _SPLIT.flag)
    if layers is None:
        return _megatron_layout(launch, pp, vpp, total_layers, mtp_layers) or _megatron_layer_list(
            launch, pp, total_layers
        )
    if len(layers) != pp or sum(layers) != total_layers:
        warn(
            f"--num-layer-list {','.join(map(str, layers))} does not give {pp} stages summing to "
            f"--num-layers {total_layers}; read as an even split"
        )
        return None
    if launch.has("--noop-layers"):
        # ASSUMPTION (version unknown): MindSpeed-LLM's own DeepSeek-V3 example passes both flags.
        warn(
            "--num-layer-list with --noop-layers: MindSpeed-LLM's argument check "
            "(mindspeed_llm/training/arguments.py _validate_noop_layer) drops the layer list when "
            "noop layers are set in the releases read; it is priced as written, check which split "
            "your version runs"
        )
    return layers


def _expert_tp(launch: Launch, is_moe: bool) -> int | None:
    if not is_moe:
        return None
    etp = LAYOUT["etp"]
    if launch.has(etp.flag):
        return int_value(launch, etp.flag)
    return 1 if launch.has(etp.flag_for("one")) else None


def _expert_parallel(launch: Launch, tp: int, is_moe: bool) -> int:
    """The expert-parallel group: the flag's size, times tp with `--moe-tp-extend-ep` (module
    docstring)."""
    ep = _size(launch, "ep")
    return ep * tp if is_moe and launch.has(LAYOUT["etp"].flag_for("one")) else ep


def _size(launch: Launch, key: str) -> int:
    """A layout size as its flag (knobs.LAYOUT) sets it, the framework's default without it."""
    knob = LAYOUT[key]
    return int_value(launch, knob.flag, int(knob.default))


def read_strategy(
    launch: Launch,
    *,
    world: int,
    total_layers: int,
    is_moe: bool,
    megatron: bool,
    warn: Callable[[str], None],
    mtp_layers: int = 0,
    dispatcher: str | None = None,
) -> Strategy:
    """The strategy the launch arguments run, in the schema's normal form."""
    tp, pp, cp = (_size(launch, key) for key in ("tp", "pp", "cp"))
    model_parallel = tp * pp * cp
    if model_parallel <= 0:
        raise ScriptError(f"parallel sizes tp={tp} pp={pp} cp={cp} must be positive; fix the flags")
    if world % model_parallel:
        warn(
            f"world size {world} is not a multiple of tp x pp x cp = {model_parallel}; "
            f"dp read as {max(world // model_parallel, 1)}"
        )
    algo: CpAlgo | None = None
    # --use-distributed-optimizer alone is ZeRO-1; a DeepSpeed / Megatron-FSDP stage says more.
    zero = max(_zero(launch), int(launch.has(_ZERO.flag_for("dist_opt"))))
    if cp > 1:
        flag = CHOICES["cp_algo"].flag
        algo = (
            DEFAULT_CP_ALGO
            if megatron
            else choice(CpAlgo, launch.value(flag) or DEFAULT_CP_ALGO, flag, ScriptError)
        )
    vpp = _vpp(launch, pp, total_layers, warn)
    try:
        layout = Strategy(
            tp=tp,
            pp=pp,
            dp=max(world // model_parallel, 1),
            cp=cp,
            cp_algo=algo,
            ep=_expert_parallel(launch, tp, is_moe),
            etp=_expert_tp(launch, is_moe),
            sp=launch.has(LAYOUT["sp"].flag) and tp > 1,
            vpp=vpp,
            zero=zero,
            mbs=_size(launch, "mbs"),
            num_layer_list=_layer_list(launch, pp, vpp, total_layers, mtp_layers, warn),
            **_recompute(launch, vpp, warn),
            **_schedule(launch, is_moe),
        )
        return layout.replace(
            **read_switches(launch.has, KnobContext.of(layout, is_moe, dispatcher))
        )
    except StrategyError as exc:
        raise ScriptError(f"the script's parallel flags are inconsistent: {exc}") from None


def _schedule(launch: Launch, is_moe: bool) -> dict:
    """MindSpeed's pipeline schedule (`--schedules-method dualpipev`) and MoE forward/backward
    overlap (`--moe-fb-overlap`, MoE models only)."""
    method = launch.value(CHOICES["dualpipev"].flag)
    return {
        "dualpipev": method == Schedule.DUALPIPEV,
        "moe_fb_overlap": is_moe and launch.has(CHOICES["moe_fb_overlap"].flag),
    }
