"""Layer counts with noop layers: the cost model counts computing layers, scripts count all.

Megatron / MindSpeed-LLM's `--noop-layers 61,62,63` (0-based indices) keeps placeholder layers in
`--num-layers`, and `--num-layer-list` counts them (Ascend/MindSpeed-LLM
`examples/mcore/deepseek3/`: `--num-layers 64` with `--noop-layers 47,62,63`). The solver
splits only the layers that compute, so before a strategy is written to a script its per-stage
counts are mapped back: stage s takes its n_s computing layers in order, plus every noop layer met
on the way; noop layers after the last computing layer go to the last stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tinker_opt.layer_stack import computing_chunks
from tinker_opt.strategy import Strategy


def script_stage_layers(
    stage_layers: Sequence[int], noop_layers: Sequence[int], layers_in_script: int
) -> tuple[int, ...]:
    """Per-stage counts of the script's layers (noop included) for per-stage computing-layer counts."""
    noop = set(noop_layers)
    counts = [0] * len(stage_layers)
    stage, filled = 0, 0
    for index in range(layers_in_script):
        while stage < len(stage_layers) - 1 and filled == stage_layers[stage] and index not in noop:
            stage, filled = stage + 1, 0
        counts[stage] += 1
        filled += index not in noop
    return tuple(counts)


def strategy_for_script(
    strategy: Strategy,
    stage_layers: Sequence[int],
    noop_layers: Sequence[int],
    layers_in_script: int,
) -> Strategy:
    """The strategy as the script must say it: with noop layers, an explicit layer list that counts them."""
    if not noop_layers or strategy.pp == 1 or strategy.vpp > 1:
        return strategy
    if strategy.dualpipev:  # the V's chunks are the even split of the padded stack
        return strategy.replace(num_layer_list=None)
    full = script_stage_layers(stage_layers, noop_layers, layers_in_script)
    even = len(set(full)) == 1
    return strategy.replace(num_layer_list=None if even else full)


def computing_layer_strategy(
    strategy: Strategy, noop_layers: Sequence[int], layers_in_script: int
) -> Strategy:
    """A strategy in the script's terms (its layer list, or the even split, counting noop layers)
    in the cost model's terms: a layer list of computing layers only (the inverse of
    strategy_for_script). MindSpeed-LLM pads the stack with noop layers so that the script's
    `--num-layers` splits evenly (GLM-4.5-Air: 48 = 46 + noop 1,47 over pp 4 is 12 script layers
    per stage, 11, 12, 12, 11 of them computing). With virtual stages each chunk keeps its
    computing layers, in Megatron's layer order (a per-virtual-stage list); so do DualPipeV's
    2 * pp chunks in its V (layer_stack.rank_chunks; DeepSeek-V3's rank 0 computes 4 + 1)."""
    if not noop_layers or strategy.pp == 1:
        return strategy
    chunks = 2 if strategy.dualpipev else strategy.vpp
    if strategy.num_layer_list is None and layers_in_script % (strategy.pp * chunks):
        return strategy  # the rules name the uneven split
    counts = computing_chunks(strategy.chunk_layers(layers_in_script), noop_layers)
    return strategy.replace(num_layer_list=None if len(set(counts)) == 1 else counts)


def strategy_to_write(data: dict[str, Any], info) -> Strategy:
    """The strategy of a JSON object (bare strategy, Evaluation or summary.json) in the script's terms.

    An Evaluation's stage counts are computing layers; scripts with noop layers count those too.
    A bare strategy is taken as written (its num_layer_list already counts the script's layers).
    """
    evaluation = data["best"] if isinstance(data.get("best"), dict) else data
    strategy = Strategy.from_dict(evaluation)
    if "stages" not in evaluation:
        return strategy
    return strategy_for_script(
        strategy,
        [stage["layers"] for stage in evaluation["stages"]],
        info.model.noop_layers,
        info.num_layers_in_script,
    )
