"""One definition of a stage's layers: which decoder layers each pipeline chunk holds.

A launch script counts layers one way and the cost model another, and the schedules place chunks
on ranks in two orders; every rule, cost term, reader and writer asks this module:

* **Script layers and computing layers.** `--num-layers` counts MindSpeed-LLM's `--noop-layers`
  placeholders (0-based indices; Ascend/MindSpeed-LLM examples/mcore/deepseek3: 61 layers padded
  to `--num-layers 64` with `--noop-layers 61,62,63`); the framework's own checks (Megatron-LM
  megatron/training/arguments.py validate_args: num_layers a multiple of pp without a layer
  list; MindSpeed's DualPipeV offsets) see the padded count, `layers_in_script`. The cost model
  prices the layers that compute (ModelSpec.num_layers), chunk by chunk (`computing_chunks`).
* **Chunks in layer order.** Interleaved 1F1B places chunk k on rank k mod pp (Megatron-LM
  megatron/core/transformer/pipeline_parallel_layer_layout.py); DualPipeV's V places chunk r and
  chunk 2p - 1 - r on rank r (Ascend/MindSpeed mindspeed/core/pipeline_parallel/dualpipev/
  dualpipev_chunks.py get_transformer_layer_offset: the first chunk starts at r * L / (2p), the
  second at L - (r + 1) * L / (2p)). `rank_chunks` is that one mapping.
* **Layer forms.** Which per-stage counts a framework can write (LAYER_FORMS: any list, first
  and last free, or even), one rule the split solvers, `simulate` and the writer share.
* **Embedding and loss.** Megatron's `--account-for-embedding/loss-in-pipeline-split` count each
  as one layer of the split (script/pipeline_layout.py accounted_split reads them); MTP layers
  sit with the loss (DualPipeV: on rank 0, costs/units.head_stage).

The functions take plain integers and sequences so the lowest modules (strategy.py, rules.py)
can ask them.
"""

from __future__ import annotations

from collections.abc import Sequence


def layers_in_script(num_layers: int, noop_layers: Sequence[int]) -> int:
    """`--num-layers` as the script writes it: the computing layers plus the noop padding."""
    return num_layers + len(noop_layers)


def num_chunks(pp: int, vpp: int, dualpipev: bool) -> int:
    """Model chunks of the whole pipeline: pp * vpp, or DualPipeV's 2 * pp."""
    return 2 * pp if dualpipev else pp * vpp


def rank_chunks(pp: int, vpp: int, dualpipev: bool, rank: int) -> tuple[int, ...]:
    """The chunks (indices in layer order) pipeline rank `rank` holds, in its own order: the
    interleaved rank's j * pp + rank, or DualPipeV's rank and 2 * pp - 1 - rank."""
    if dualpipev:
        return (rank, 2 * pp - 1 - rank)
    return tuple(j * pp + rank for j in range(vpp))


def stage_totals(chunks: Sequence[int], pp: int, vpp: int, dualpipev: bool) -> tuple[int, ...]:
    """Per-rank totals of per-chunk counts (layer order)."""
    return tuple(sum(chunks[k] for k in rank_chunks(pp, vpp, dualpipev, r)) for r in range(pp))


def even_chunks(total: int, pp: int, vpp: int, dualpipev: bool) -> tuple[int, ...] | None:
    """Layers per chunk of the even split of `total` layers (layer order), None where the chunks
    cannot be equal. DualPipeV builds total // (2 pp) layers per chunk (get_num_layers_to_build and
    the offsets above), so every layer is built only where 2 pp divides the total."""
    count = num_chunks(pp, vpp, dualpipev)
    if total % count:
        return None
    return (total // count,) * count


def computing_chunks(script_chunks: Sequence[int], noop_layers: Sequence[int]) -> tuple[int, ...]:
    """Computing layers of each chunk, given each chunk's script layers (noop included) in
    layer order."""
    noop, counts, start = set(noop_layers), [], 0
    for size in script_chunks:
        counts.append(sum(1 for index in range(start, start + size) if index not in noop))
        start += size
    return tuple(counts)


def dualpipev_layer_list(
    num_layers: int, noop_layers: Sequence[int], pp: int
) -> tuple[int, ...] | None:
    """The computing layers of DualPipeV's 2 * pp chunks (layer order) when the padded stack
    splits evenly but the noop layers make the computing counts unequal (DeepSeek-V3: 64 = 61 +
    noop 61, 62, 63 over pp 8 is 4 layers per chunk, the last chunk, rank 0's second, computing
    one); None when the chunks compute equally or the padded stack does not split."""
    sizes = even_chunks(layers_in_script(num_layers, noop_layers), pp, 1, True)
    if sizes is None or not noop_layers:
        return None
    counts = computing_chunks(sizes, noop_layers)
    return None if len(set(counts)) == 1 else counts


def dualpipev_message(
    num_layers: int, noop_layers: Sequence[int], pp: int, num_micro: int
) -> str | None:
    """Why MindSpeed refuses DualPipeV for this stack, None when it accepts it (Ascend/MindSpeed
    mindspeed/features_manager/pipeline_parallel/dualpipev_feature.py validate_args: pp > 1 and
    num_layers >= 2 pp; the chunk offsets above build num_layers // (2 pp) layers per chunk, so
    the padded count must be a multiple of 2 pp for every layer to be built; the micro-batch
    floor is the rule of docs/features/dualpipev.md, 2 pp per pipeline)."""
    total = layers_in_script(num_layers, noop_layers)
    if pp < 2 or total % (2 * pp):
        padded = ", noop layers included" if noop_layers else ""
        return (
            f"dualpipev needs pp >= 2 and num_layers ({total}{padded}) a multiple of 2*pp "
            f"({2 * pp})"
        )
    if num_micro < 2 * pp:
        return (
            f"dualpipev needs at least 2*pp ({2 * pp}) micro-batches per pipeline, got {num_micro}"
        )
    return None


def dualpipev_even(num_layers: int, noop_layers: Sequence[int], pp: int) -> bool:
    """DualPipeV's chunks compute equal counts (the split the search's solvers price: the
    computing layers even over 2 * pp chunks). With noop padding that leaves them unequal the V is
    priced as written (`simulate`, a search's `current`) but not searched."""
    return num_layers % (2 * pp) == 0 and dualpipev_layer_list(num_layers, noop_layers, pp) is None


LAYER_FORMS = ("free", "first_last", "even")
"""Per-stage layer counts a framework can write. `free`: any list (MindSpeed-LLM `--num-layer-list`,
mindspeed_llm/training/arguments.py). `first_last`: the first and last stages free, the middle ones
equal (Megatron-LM `--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers`,
megatron/training/arguments.py, which split the rest evenly). `even`: num_layers / pp each."""


def layer_form_message(layers: tuple[int, ...], form: str) -> str | None:
    """Why a framework with layer form `form` cannot write per-stage counts `layers`; None if it can.
    The one rule the split solvers, `simulate` and the script writer share."""
    if form == "free" or len(set(layers)) <= 1:
        return None
    if form == "even":
        return (
            f"this framework version can only split the layers evenly over the stages; "
            f"num_layer_list {list(layers)} is uneven"
        )
    if len(set(layers[1:-1])) > 1:
        return (
            f"Megatron-LM can only give the first and last stages their own layer counts; "
            f"num_layer_list {list(layers)} has unequal middle stages"
        )
    return None


def form_allows(layers, form: str) -> bool:
    """layer_form_message(layers, form) is None (for filters over candidate splits)."""
    return layer_form_message(tuple(layers), form) is None


def virtual_form_message(layers: Sequence[int] | None) -> str:
    """Why a framework without per-virtual-stage layouts cannot write this split."""
    return (
        f"num_layer_list {list(layers or ())} gives each virtual stage its own layer count, "
        "which only Megatron-LM's --pipeline-model-parallel-layout can say"
    )
