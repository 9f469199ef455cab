"""FP8 training on the analytic device: which traced ops run in FP8, and the casts that FP8 adds.

Transformer Engine's FP8 (Megatron-LM `--fp8-format`, megatron/core/extensions/
transformer_engine.py; TE docs "Using FP8 with Transformer Engine") runs the GEMMs of the linear
layers of each decoder layer (QKV, output projection, MLP / expert fc1 and fc2, MLA's projections)
with FP8 inputs at the device's FP8 tensor-core rate; everything else stays in the training
precision: the attention core (softmax(QK^T)V), norms, activations, the MoE router (a plain
torch linear in megatron/core/transformer/moe/router.py), the embedding and the output layer
(Megatron's own ColumnParallelLinear, not a TE module). Per FP8 GEMM the sub-graph's ops are
rewritten here, hardware-independently, before they are timed:

* the GEMM is labelled `fp8` (timed at `peak_tflops.fp8` under the FP8 matmul curve);
* each activation or gradient operand is cast once per pass, before its first FP8 GEMM: read
  in BF16 (2 B), written as FP8 data plus its FP8 transpose (1 + 1 B; TE's fused cast_transpose:
  Hopper's FP8 GEMMs take only the TN layout, so the weight-gradient GEMM needs the transposed
  copy). The cast is a memory-bound op, so it fuses with a preceding norm or activation (TE's
  LayerNormLinear, fused bias-GeLU-cast), as the device runs it.
* tensorwise (current) scaling needs the operand's amax before the cast: one more read of it
  (a separate reduction kernel). delayed scaling takes the scale from the amax history, the amax
  is computed inside the cast kernel; blockwise and MXFP8 scale per block inside the cast kernel
  (the per-block scales, 1/32 to 1/128 of the data, are left out).
* weights are not cast per micro-batch: TE casts them on the first micro-batch of the iteration
  and reuses the FP8 copies (`is_first_microbatch`, set by Megatron's schedules); with
  `--fp8-param-gather` they are FP8 already. Their memory is priced in costs/terms.py.

ASSUMPTION: an FP8 GEMM moves the bytes of its BF16 trace (its operands are half as large; the
large GEMMs are compute-bound, so this errs slow only for small ones).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable

from torch import nn

from tinker_opt.profile.layers import ColumnParallelLinear, RowParallelLinear
from tinker_opt.profile.mla import DuplicatedLinear
from tinker_opt.profile.moe import GroupedExperts
from tinker_opt.profile.op_trace import OpRecord

FP8_BLOCKS = frozenset({"layer", "layer.dense", "layer.moe"})
"""Blocks whose linear layers are TE modules: the decoder layers (not the embedding or head)."""
LINEAR_TYPES = (ColumnParallelLinear, RowParallelLinear, DuplicatedLinear, GroupedExperts)
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "_grouped_mm"})
FP8_CAST_OUT_BYTES_PER_INPUT_BYTE = 1.0
"""FP8 data (1 B) + FP8 transpose (1 B) written per BF16 element (2 B) read: TE cast_transpose."""


def linear_module_names(module: nn.Module) -> frozenset[str]:
    """The ModuleTracker names (root class name + attribute path) of the block's linear layers."""
    root = type(module).__name__
    return frozenset(
        f"{root}.{name}" if name else root
        for name, sub in module.named_modules()
        if isinstance(sub, LINEAR_TYPES)
    )


def is_fp8_gemm(op: OpRecord, linears: frozenset[str]) -> bool:
    return op.flops > 0 and op.name in GEMM_OPS and not linears.isdisjoint(op.modules)


def _cast(op: OpRecord, sid: int, nbytes: int, recipe: str, fresh) -> OpRecord:
    """The memory-bound cast of one operand (storage `sid`, `nbytes` in BF16) before `op`."""
    reads = ((sid, nbytes),)
    if recipe == "tensorwise":  # the amax reduction reads the operand once more, before the cast
        reads += ((next(fresh), nbytes),)
    writes = ((next(fresh), int(nbytes * FP8_CAST_OUT_BYTES_PER_INPUT_BYTE)),)
    return OpRecord(
        name="fp8_cast",
        phase=op.phase,
        flops=0,
        bytes_moved=sum(b for _, b in reads + writes),
        precision=op.precision,
        modules=op.modules,
        reads=reads,
        writes=writes,
    )


def fp8_ops(
    ops: Iterable[OpRecord], linears: frozenset[str], param_ids: frozenset[int], recipe: str
) -> tuple[OpRecord, ...]:
    """The ops as they run under FP8: linear GEMMs labelled `fp8`, each non-weight operand cast
    once (the first FP8 GEMM that reads it, forward or backward), the rest unchanged."""
    fresh = itertools.count(-1, -1)  # storage ids of the FP8 copies: negative, never clash
    cast: set[int] = set()
    out: list[OpRecord] = []
    for op in ops:
        if not is_fp8_gemm(op, linears):
            out.append(op)
            continue
        for sid, nbytes in op.reads:
            if sid not in param_ids and sid not in cast:
                cast.add(sid)
                out.append(_cast(op, sid, nbytes, recipe, fresh))
        out.append(dataclasses.replace(op, precision="fp8"))
    return tuple(out)
