"""MindSpeed's `--swap-attention` with `--recompute-num-layers N`: the layers' MLP recomputed.

With `--swap-attention`, MindSpeed does not run Megatron's layer checkpointing for the listed
layers; it installs its own policy (Ascend/MindSpeed docs/features/swap_attention.md, "开启预取功能
并且指定重计算层数": every layer's attention activations prefetched from the host and the fully
connected part of the first N layers recomputed). The code (mindspeed/core/memory/swap_attention/
adaptor.py `AdaptiveRecomputeSwap.solve_prefetch_policy` and `granular_module_allocation`;
swap_attention_apply.py `is_recompute_layer`) puts the `mlp` child of each listed TransformerLayer
under the recompute hook (`hook_checkpoint_forward`: only its input kept). Which layers: N counts
the layers of each model chunk (N x vpp of a stage); N at least the layers of a chunk (of a
stage with `--enable-recompute-layers-per-pp-rank`) or `--recompute-method uniform` lists every
layer of the stage. That needs no `--recompute-granularity`: Megatron's own checkpointing stays
off (transformer_block.py only checkpoints with granularity full, and MindSpeed's block
checkpoint skips swapped layers: `should_recompute() and not global_args.swap_attention`).

In the cost model's terms that is selective recompute of Megatron-Core's `mlp` module (a dense
layer's MLP) and `moe` module (a MoE layer's whole MoELayer: router, dispatch, experts, combine),
without `core_attn` (costs/recompute_modules.py prices both). A policy that lists only some of
the stage's layers is not expressible per layer: it is read as no MLP recompute, with a warning
(the modelled memory then errs high).

Written back (`swap_policy_count`, emit/strategy_plan.py): selective recompute of such a script
stays the swap policy, `--swap-attention --recompute-num-layers N` with no granularity, N covering
every layer of the new strategy's chunks. Megatron's `--recompute-granularity selective` would
recompute core attention instead, and MindSpeed-LLM RC3's Megatron has no `--recompute-modules`
to say `mlp` / `moe` with.
"""

from __future__ import annotations

from collections.abc import Callable

from tinker_opt.choices import Recompute, RecomputeMethod, RecomputeModule
from tinker_opt.knobs import CHOICES
from tinker_opt.script.launch import Launch
from tinker_opt.script.model_args import int_value
from tinker_opt.script.recompute_args import PER_RANK_FLAG
from tinker_opt.strategy import Strategy

SWAP_RECOMPUTE_MODULES = (RecomputeModule.MLP.value, RecomputeModule.MOE.value)
"""The `mlp` child of a TransformerLayer: the dense MLP or the MoELayer (module docstring)."""
_KIND, _METHOD, _COUNT = (
    CHOICES[key] for key in ("recompute", "recompute_method", "recompute_num_layers")
)
"""The recompute knobs' records (knobs.py spells their flags)."""


def _covers_every_layer(launch: Launch, strategy: Strategy, total_layers: int, n: int) -> bool:
    """Whether MindSpeed's swap policy recomputes the MLP of every layer of a stage."""
    if launch.value(_METHOD.flag) == RecomputeMethod.UNIFORM:
        return True
    per_stage = total_layers // strategy.pp
    if launch.has(PER_RANK_FLAG):
        return n >= per_stage
    return n >= per_stage // max(strategy.vpp, 1)


def is_swap_policy(launch: Launch, modules: tuple[str, ...] | None) -> bool:
    """Whether a script's recompute modules were read from MindSpeed's swap policy."""
    return modules == SWAP_RECOMPUTE_MODULES and launch.has("--swap-attention")


def swap_policy_count(launch: Launch, target: Strategy, total_layers: int) -> int:
    """The `--recompute-num-layers` that keeps the swap policy over every layer of `target`: the
    script's own N where it still covers each chunk (each stage with
    `--enable-recompute-layers-per-pp-rank`; any N with `--recompute-method uniform`), else the
    largest chunk's (stage's) layer count."""
    n = int_value(launch, _COUNT.flag, 0) or 0
    if launch.value(_METHOD.flag) == RecomputeMethod.UNIFORM:
        return n
    per_stage = launch.has(PER_RANK_FLAG) and target.vpp > 1
    chunked = not per_stage and (target.vpp > 1 or target.dualpipev)
    layers = target.chunk_layers(total_layers) if chunked else target.stage_layers(total_layers)
    return max(n, *layers)


def swap_mlp_recompute(
    launch: Launch, strategy: Strategy, total_layers: int, warn: Callable[[str], None]
) -> tuple[Strategy, tuple[str, ...] | None]:
    """The strategy and recompute modules of `--swap-attention --recompute-num-layers N` without a
    recompute granularity (module docstring); the strategy unchanged and None otherwise."""
    granularity = launch.value(_KIND.flag) or launch.has(_KIND.flag_for("selective"))
    n = int_value(launch, _COUNT.flag, 0) or 0
    if not launch.has("--swap-attention") or granularity or n <= 0:
        return strategy, None
    if not _covers_every_layer(launch, strategy, total_layers, n):
        warn(
            f"--swap-attention with {_COUNT.flag} {n} recomputes the MLP of only some "
            "layers of each stage (MindSpeed's swap policy); read as no MLP recompute (the "
            "modelled memory errs high)"
        )
        return strategy, None
    return strategy.replace(recompute=Recompute.SELECTIVE), SWAP_RECOMPUTE_MODULES
