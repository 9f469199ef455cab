"""Reading the script's current parallel strategy from its flags, normalised as the Strategy schema.

Normalisation (what a script can express, and what the framework really does):
* sp only counts with tp > 1 (Megatron turns sequence parallelism off at tp = 1);
* cp_algo is None when cp == 1, else `--context-parallel-algo` or MindSpeed's default
  `megatron_cp_algo` (Megatron-LM has only the ring algorithm: `megatron_cp_algo`);
* etp: `--expert-tensor-parallel-size`, else 1 with `--moe-tp-extend-ep`, else None (= tp); None
  for dense models;
* recompute: `--recompute-activations` or `--recompute-granularity selective` -> selective;
  `--recompute-granularity full` -> full with `--recompute-method` (default uniform) and
  `--recompute-num-layers` (default 1); method and layer count are None otherwise;
* vpp = L / (pp x `--num-layers-per-virtual-pipeline-stage`) with L the script's `--num-layers`;
* num_layer_list from `--num-layer-list` (MindSpeed) or Megatron's
  `--decoder-first/last-pipeline-num-layers`; None for an even split;
* dp = world / (tp x pp x cp);
* zero: DeepSpeed's `--zero-stage N` (pre-1.0 ModelLink scripts with `--deepspeed`), or Megatron-core
  FSDP (`--use-megatron-fsdp`, `--use-custom-fsdp` before core 0.14) with
  `--data-parallel-sharding-strategy no_shard | optim | optim_grads | optim_grads_params` (0..3,
  default no_shard); else 1 with `--use-distributed-optimizer`, 0 without.
* overlap switches (flags in script/flags.py): overlap_grad_reduce always a bool;
  overlap_param_gather only with the distributed optimizer, overlap_moe_comm only for MoE models,
  tp_comm_overlap only with tp > 1; None where the knob does not apply.
"""

from __future__ import annotations

from collections.abc import Callable

from tinker_opt.choices import CpAlgo, Recompute, RecomputeMethod
from tinker_opt.errors import ScriptError, StrategyError
from tinker_opt.script.launch import Launch
from tinker_opt.script.model_args import int_list, int_value
from tinker_opt.strategy import Strategy

DEFAULT_CP_ALGO = CpAlgo.MEGATRON
MEGATRON_FSDP_FLAGS = ("--use-megatron-fsdp", "--use-custom-fsdp")
SHARDING_FLAG = "--data-parallel-sharding-strategy"
SHARDING_STRATEGIES = ("no_shard", "optim", "optim_grads", "optim_grads_params")
"""Megatron-FSDP's sharding strategies, index = ZeRO stage (megatron/training/arguments.py)."""
ZERO_STAGE_FLAG = "--zero-stage"


def zero_backend(launch: Launch) -> str | None:
    """`deepspeed` or `megatron_fsdp` when the script chooses its ZeRO stage by flag, else None."""
    if launch.has("--deepspeed") and launch.has(ZERO_STAGE_FLAG):
        return "deepspeed"
    if any(launch.has(flag) for flag in MEGATRON_FSDP_FLAGS):
        return "megatron_fsdp"
    return None


def _zero(launch: Launch) -> int:
    """The ZeRO stage the flags choose (see the module docstring)."""
    backend = zero_backend(launch)
    if backend == "deepspeed":
        stage = int_value(launch, ZERO_STAGE_FLAG)
        if stage not in (0, 1, 2, 3):
            raise ScriptError(
                f"{ZERO_STAGE_FLAG} is {stage}; DeepSpeed's ZeRO stages are 0, 1, 2 and 3"
            )
        return stage
    if backend == "megatron_fsdp":
        name = launch.value(SHARDING_FLAG) or "no_shard"
        if name not in SHARDING_STRATEGIES:
            raise ScriptError(
                f"{SHARDING_FLAG} is {name!r}; Megatron-FSDP takes one of {list(SHARDING_STRATEGIES)}"
            )
        return SHARDING_STRATEGIES.index(name)
    return 0


VPP_LAYERS_FLAG = "--num-layers-per-virtual-pipeline-stage"
VPP_SIZE_FLAGS = (
    "--virtual-pipeline-model-parallel-size",
    "--num-virtual-stages-per-pipeline-rank",
)


def _recompute(launch: Launch, warn: Callable[[str], None]) -> dict:
    granularity = launch.value("--recompute-granularity")
    if launch.has("--recompute-activations") or granularity == Recompute.SELECTIVE:
        return {"recompute": Recompute.SELECTIVE}
    if granularity != Recompute.FULL:
        return {}
    method = launch.value("--recompute-method")
    if method not in tuple(RecomputeMethod):
        warn(
            "--recompute-granularity full without --recompute-method uniform|block; read as uniform "
            "(Megatron needs the method)"
        )
        method = RecomputeMethod.UNIFORM
    return {
        "recompute": Recompute.FULL,
        "recompute_method": method,
        "recompute_num_layers": int_value(launch, "--recompute-num-layers", 1),
    }


def _vpp(launch: Launch, pp: int, total_layers: int, warn: Callable[[str], None]) -> int:
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
    per_chunk = int_value(launch, VPP_LAYERS_FLAG)
    if per_chunk <= 0 or total_layers % (pp * per_chunk):
        warn(
            f"--num-layers {total_layers} is not a multiple of pp ({pp}) x {VPP_LAYERS_FLAG} "
            f"({per_chunk}); read as no virtual pipeline"
        )
        return 1
    return total_layers // (pp * per_chunk)


OVERLAP_FLAGS = {
    "overlap_grad_reduce": ("--overlap-grad-reduce",),
    "overlap_param_gather": ("--overlap-param-gather",),
    "overlap_moe_comm": ("--moe-alltoall-overlap-comm", "--overlap-moe-expert-parallel-comm"),
    "tp_comm_overlap": ("--use-ascend-mc2", "--use-mc2", "--tp-comm-overlap"),
}
"""Strategy overlap key -> the flags that switch it on (MindSpeed-LLM spellings, then Megatron-LM's)."""


def overlap_applies(key: str, *, tp: int, dist_opt: bool, is_moe: bool) -> bool:
    """Whether an overlap knob exists for this configuration (else the schema's value is None)."""
    return {
        "overlap_grad_reduce": True,
        "overlap_param_gather": dist_opt,
        "overlap_moe_comm": is_moe,
        "tp_comm_overlap": tp > 1,
    }[key]


def _overlaps(launch: Launch, tp: int, dist_opt: bool, is_moe: bool) -> dict:
    return {
        key: any(launch.has(flag) for flag in flags)
        if overlap_applies(key, tp=tp, dist_opt=dist_opt, is_moe=is_moe)
        else None
        for key, flags in OVERLAP_FLAGS.items()
    }


def _megatron_layer_list(launch: Launch, pp: int, total_layers: int) -> tuple[int, ...] | None:
    first = int_value(launch, "--decoder-first-pipeline-num-layers")
    last = int_value(launch, "--decoder-last-pipeline-num-layers")
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


def _layer_list(launch: Launch, pp: int, total_layers: int, warn) -> tuple[int, ...] | None:
    layers = int_list(launch, "--num-layer-list")
    if layers is None:
        return _megatron_layer_list(launch, pp, total_layers)
    if len(layers) != pp or sum(layers) != total_layers:
        warn(
            f"--num-layer-list {','.join(map(str, layers))} does not give {pp} stages summing to "
            f"--num-layers {total_layers}; read as an even split"
        )
        return None
    return layers


def _expert_tp(launch: Launch, is_moe: bool) -> int | None:
    if not is_moe:
        return None
    if launch.has("--expert-tensor-parallel-size"):
        return int_value(launch, "--expert-tensor-parallel-size")
    return 1 if launch.has("--moe-tp-extend-ep") else None


def read_strategy(
    launch: Launch,
    *,
    world: int,
    total_layers: int,
    is_moe: bool,
    megatron: bool,
    warn: Callable[[str], None],
) -> Strategy:
    """The strategy the launch arguments run, in the schema's normal form."""
    tp = int_value(launch, "--tensor-model-parallel-size", 1)
    pp = int_value(launch, "--pipeline-model-parallel-size", 1)
    cp = int_value(launch, "--context-parallel-size", 1)
    model_parallel = tp * pp * cp
    if model_parallel <= 0:
        raise ScriptError(f"parallel sizes tp={tp} pp={pp} cp={cp} must be positive; fix the flags")
    if world % model_parallel:
        warn(
            f"world size {world} is not a multiple of tp x pp x cp = {model_parallel}; "
            f"dp read as {max(world // model_parallel, 1)}"
        )
    algo = None
    # --use-distributed-optimizer alone is ZeRO-1; a DeepSpeed / Megatron-FSDP stage says more.
    zero = max(_zero(launch), int(launch.has("--use-distributed-optimizer")))
    if cp > 1:
        algo = (
            DEFAULT_CP_ALGO
            if megatron
            else (launch.value("--context-parallel-algo") or DEFAULT_CP_ALGO)
        )
    try:
        return Strategy(
            tp=tp,
            pp=pp,
            dp=max(world // model_parallel, 1),
            cp=cp,
            cp_algo=algo,
            ep=int_value(launch, "--expert-model-parallel-size", 1),
            etp=_expert_tp(launch, is_moe),
            sp=launch.has("--sequence-parallel") and tp > 1,
            vpp=_vpp(launch, pp, total_layers, warn),
            zero=zero,
            mbs=int_value(launch, "--micro-batch-size", 1),
            num_layer_list=_layer_list(launch, pp, total_layers, warn),
            **_recompute(launch, warn),
            **_overlaps(launch, tp, zero >= 1, is_moe),
            **_schedule(launch, is_moe),
        )
    except StrategyError as exc:
        raise ScriptError(f"the script's parallel flags are inconsistent: {exc}") from None


def _schedule(launch: Launch, is_moe: bool) -> dict:
    """MindSpeed's pipeline schedule (`--schedules-method dualpipev`) and MoE forward/backward
    overlap (`--moe-fb-overlap`, MoE models only)."""
    method = launch.value("--schedules-method")
    return {
        "dualpipev": method == "dualpipev",
        "moe_fb_overlap": is_moe and launch.has("--moe-fb-overlap"),
    }
