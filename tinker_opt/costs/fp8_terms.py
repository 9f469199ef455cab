"""FP8 training in the cost model: the memory of the FP8 weight copies and the FP8 parameter
all-gather. The FP8 GEMMs and casts are in the block times (profile/fp8.py).

Sources: Transformer Engine keeps the FP8 copy of each linear weight (and, on Hopper, its FP8
transpose for the data-gradient GEMM) from the first micro-batch of an iteration to the last
(`is_first_microbatch`, set by Megatron's pipeline schedules; megatron/core/extensions/
transformer_engine.py); with `--fp8-param-gather` ("keep the compute param in fp8 ... and perform
the param all-gather in fp8", megatron/training/arguments.py) the BF16 compute weights are
replaced by the FP8 ones, so the distributed optimizer's all-gather moves 1 B per parameter.

Rules, per decoder-layer parameter held by the rank:
* without `--fp8-param-gather`: + 2 B (FP8 weight + FP8 transpose) beside the BF16 weight;
* with it: the 2 B of BF16 weight become 1 B FP8 + 1 B FP8 transpose: no change in bytes; the
  parameter all-gather of the step moves half the bytes.
ASSUMPTION: every decoder-layer parameter is in a linear layer (norms and the router are under
0.1 % of a layer's parameters); the embedding and head stay BF16 (not TE modules). ZeRO-3
(FSDP) ranks are priced the same per gathered parameter. The amax history and scales (under 100
KB per layer at history 1024: 4 B x length x a few tensors per GEMM) are left out.
"""

from __future__ import annotations

from typing import Any

from tinker_opt.specs import ModelSpec

FP8_WEIGHT_COPY_BYTES = 2
"""FP8 weight (1 B) + its FP8 transpose (1 B) per parameter, cached across micro-batches."""
FP8_PARAM_BYTES = 1


def fp8_weight_extra_bytes(model: ModelSpec, params: int) -> int:
    """Bytes the FP8 weight copies add for `params` decoder-layer parameters held by a rank."""
    if not model.is_fp8 or model.fp8_param_gather:
        return 0
    return FP8_WEIGHT_COPY_BYTES * params


def fp8_gather_factor(model: ModelSpec) -> float:
    """Share of the BF16 parameter all-gather's bytes that an FP8 parameter all-gather moves."""
    if model.is_fp8 and model.fp8_param_gather:
        return FP8_PARAM_BYTES / model.bytes_per_element
    return 1.0


def precision_of(model: ModelSpec) -> dict[str, Any]:
    """The job's precision as an Evaluation records it: the training dtype, and the FP8 format
    and recipe when the linear layers run in FP8 (None otherwise)."""
    return {
        "dtype": model.precision,
        "fp8_format": model.fp8_format,
        "fp8_recipe": model.fp8_recipe if model.is_fp8 else None,
    }
