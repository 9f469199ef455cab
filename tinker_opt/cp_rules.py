"""Context parallelism's validity facts: the algorithms the cost model times, MindSpeed's hybrid
Ulysses degree and the Ulysses head rule (with the unaligned all-to-all's uneven split). The cost
model's cp terms (costs/cp_terms.py), the writer and rules.py ask them."""

from __future__ import annotations

from tinker_opt.choices import CpAlgo
from tinker_opt.framework_rules import FrameworkRules

MODELLED_CP_ALGOS = tuple(
    algo.value for algo in (CpAlgo.MEGATRON, CpAlgo.ULYSSES, CpAlgo.HYBRID, CpAlgo.KV_ALLGATHER)
)
"""Context-parallel algorithms the cost model times (ring, all-to-all, all-to-all inside Ulysses
groups x ring across them, all-gather of K/V)."""


def hybrid_ulysses_degree(cp: int, tp: int, num_heads: int, requested: int | None = None) -> int:
    """The Ulysses degree u of `hybrid_cp_algo` at context-parallel size cp (ring degree cp / u).

    MindSpeed's rule (Ascend/MindSpeed mindspeed/features_manager/context_parallel/
    context_parallel_feature.py validate_args; the same in Ascend/MindSpeed-LLM
    mindspeed_llm/training/arguments.py _validate_cp_args): `--ulysses-degree-in-cp` must be given,
    divide cp with a ring degree cp / u > 1, and num_attention_heads must be a multiple of u * tp.
    `requested` (the script's `--ulysses-degree-in-cp`) is used when it obeys that rule at this cp.
    Otherwise, and when no degree is known, MindSpeed has no default (it refuses the launch);
    the model then uses the degree the script writer writes (emit/strategy_plan.py): 2 where
    valid, else 1 (a ring over all cp ranks). ASSUMPTION, not a framework default."""
    for u in (requested, 2, 1):
        if u and cp % u == 0 and cp // u > 1 and num_heads % (u * tp) == 0:
            return u
    return 1


def ulysses_heads_factor(num_heads: int, tp: int, cp: int) -> float:
    """How much the busiest Ulysses rank exceeds the mean: ceil(a / (t c)) / (a / (t c)).

    MindSpeed's unaligned all-to-all splits the heads of each tp rank unevenly over the cp ranks,
    the remainder one extra each to the first ranks (Ascend/MindSpeed
    mindspeed/core/context_parallel/ulysses_context_parallel/unaligned_cp/mapping.py
    cal_split_sizes / _split / _unaligned_all_to_all; the gather size from
    ulysses_context_parallel.py DynamicGatherSizeCalculator). The rank with the most heads sets
    the pace: its attention compute, attention activations and all-to-all volume are the aligned
    ones times this factor (1.0 when tp*cp divides the heads)."""
    per_rank = num_heads / (tp * cp)
    return -(-num_heads // (tp * cp)) / per_rank


def ulysses_heads_message(num_heads: int, tp: int, cp: int, fw: FrameworkRules) -> str | None:
    """Ulysses' head rule: num_attention_heads a multiple of tp*cp (Ascend/MindSpeed
    mindspeed/features_manager/context_parallel/ulysses_context_parallel.py validate_args), except
    where the version has the unaligned all-to-all (FrameworkRules.unaligned_ulysses,
    ulysses_heads_factor); even then every rank needs at least one head (heads >= tp*cp)."""
    if num_heads % (tp * cp) == 0 or (fw.unaligned_ulysses and num_heads >= tp * cp):
        return None
    return (
        f"Ulysses context parallelism needs num_attention_heads ({num_heads}) "
        f"to be a multiple of tp*cp ({tp * cp})"
    )
