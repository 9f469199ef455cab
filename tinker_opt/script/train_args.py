"""The job's flags of a Megatron-style launch into its TrainSpec: the strategy (strategy_args.py),
batch, framework, checkpoint / tuning, and the job switches the cost model prices (optimizer
swap, p2p overlap, fp32 parameter reuse, attention swap, gradient-accumulation fusion, the
precision-aware optimizer, Megatron-Core recompute modules, MindSpeed's activation recompute and
the MLP recompute of its attention swap, script/swap_recompute.py)."""

from __future__ import annotations

from tinker_opt.errors import ScriptError
from tinker_opt.knobs import LAYOUT
from tinker_opt.script import versions
from tinker_opt.script.launch import Launch
from tinker_opt.script.model_args import float_value, int_value
from tinker_opt.script.optimizer_args import optimizer_precision
from tinker_opt.script.recompute_args import recompute_modules
from tinker_opt.script.strategy_args import read_strategy
from tinker_opt.script.swap_recompute import swap_mlp_recompute
from tinker_opt.specs import FrameworkInfo, ModelSpec, StepFlags, TrainSpec

_LORA_FLAGS = ("--lora-r", "--lora-alpha", "--lora-target-modules")
ULYSSES_DEGREE_FLAG = "--ulysses-degree-in-cp"
"""hybrid_cp_algo's Ulysses group (a value companion of the cp_algo record: the writer keeps it
with hybrid only)."""


def _is_full_tune(name: str, launch: Launch) -> bool:
    """File name with "tune" and "full", a posttrain entry, or --finetune; LoRA is not a full tune."""
    stem = name.lower()
    entry = launch.entry_source.rsplit("/", 1)[-1]
    tune = (
        ("tune" in stem and "full" in stem)
        or entry.startswith(("posttrain", "postrain"))
        or launch.has("--finetune")
    )
    return tune and not any(launch.has(flag) for flag in _LORA_FLAGS)


SWAP_OPTIMIZER_TIMES_DEFAULT = 16
"""MindSpeed's default `--swap-optimizer-times` (mindspeed/features_manager/optimizer/swap_optimizer_feature.py)."""


def _swap_optimizer_times(launch: Launch) -> int | None:
    """The chunk count of `--swap-optimizer` (None when the script does not swap the optimizer)."""
    if not launch.has("--swap-optimizer"):
        return None
    times = int_value(launch, "--swap-optimizer-times", SWAP_OPTIMIZER_TIMES_DEFAULT)
    if times < 1:
        raise ScriptError(
            f"--swap-optimizer-times is {times}; give a positive chunk count (MindSpeed's default is 16)"
        )
    return times


def p2p_overlap(launch: Launch, version_range: versions.VersionRange) -> bool:
    """`--no-overlap-p2p-communication` / `--overlap-p2p-communication`, else the version's default."""
    if launch.has("--no-overlap-p2p-communication"):
        return False
    return launch.has("--overlap-p2p-communication") or versions.p2p_overlap_default(version_range)


def _activation_recompute(launch: Launch, version_range: versions.VersionRange) -> dict:
    """MindSpeed's activation-function recompute, where the script's version has the flag."""
    flag = "--recompute-activation-function"
    if not launch.has(flag) or not versions.flag_allowed(flag, version_range):
        return {}
    layers = int_value(launch, "--recompute-activation-function-num-layers")
    if layers is not None and layers < 1:
        raise ScriptError(
            f"--recompute-activation-function-num-layers is {layers}; give a positive layer count"
        )
    return {
        "recompute_activation_function": True,
        "recompute_activation_function_num_layers": layers,
    }


def train_spec(
    name: str,
    launch: Launch,
    model: ModelSpec,
    nodes: int,
    local: int,
    flavour: str,
    total: int,
    version_range,
    warn,
):
    """The TrainSpec of a Megatron-style launch: strategy, batch, framework and the job flags."""
    strategy = read_strategy(
        launch,
        world=nodes * local,
        total_layers=total,
        is_moe=model.is_moe,
        megatron=flavour == "megatron",
        warn=warn,
        mtp_layers=model.mtp_num_layers,
        dispatcher=model.moe_token_dispatcher_type,
    )
    strategy, swap_modules = swap_mlp_recompute(launch, strategy, total, warn)
    framework = FrameworkInfo(
        flavour=flavour,
        version=version_range.describe() if version_range.exact else None,
        launcher=launch.launcher,
        entry=launch.entry_source,
    )
    mbs = int_value(launch, LAYOUT["mbs"].flag, int(LAYOUT["mbs"].default))
    return TrainSpec(
        micro_batch_size=mbs,
        nnodes=nodes,
        nproc_per_node=local,
        strategy=strategy,
        global_batch_size=int_value(launch, "--global-batch-size", mbs * strategy.dp),
        framework=framework,
        is_full_tune=_is_full_tune(name, launch),
        loads_checkpoint=launch.has("--load"),
        swap_optimizer_times=_swap_optimizer_times(launch),
        overlap_p2p_comm=p2p_overlap(launch, version_range),
        reuse_fp32_param=launch.has("--reuse-fp32-param"),
        swap_attention=launch.has("--swap-attention"),
        gradient_accumulation_fusion=not launch.has("--no-gradient-accumulation-fusion"),
        optimizer_precision=optimizer_precision(launch),
        ulysses_degree_in_cp=int_value(launch, ULYSSES_DEGREE_FLAG),
        step_flags=step_flags(launch, flavour),
        recompute_modules=swap_modules or recompute_modules(launch),
        **_activation_recompute(launch, version_range),
    )


def step_flags(launch: Launch, flavour: str) -> StepFlags:
    """The step's clipping and logging flags and whether the batch holds the attention mask
    (costs/step_costs.py): Megatron-LM's dataset builds it unless told not to."""
    return StepFlags(
        clip_grad=float_value(launch, "--clip-grad", 1.0) > 0,
        log_params_norm=launch.has("--log-params-norm"),
        log_num_zeros_in_grad=launch.has("--log-num-zeros-in-grad"),
        load_batch=True,
        batch_attention_mask=flavour == "megatron"
        and not launch.has("--no-create-attention-mask-in-dataloader"),
        deterministic=launch.has("--deterministic-mode"),
    )
