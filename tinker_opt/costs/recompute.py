"""Full activation recomputation as Megatron-LM and MindSpeed-LLM run it: what one chunk recomputes,
keeps and holds while recomputing, for both `--recompute-method` values.

Source: Megatron-LM megatron/core/transformer/transformer_block.py, `TransformerBlock.
_checkpointed_forward` (MindSpeed-LLM runs the same method through its patched TransformerBlock).
Megatron builds one TransformerBlock per model chunk, so `num_layers_per_pipeline_rank` there is
the chunk's layer count: the stage's layers with 1F1B, each virtual chunk's with the interleaved
schedule (vpp > 1). Megatron's `--recompute-num-layers` r is one number for every stage and chunk
(transformer_config.py accepts 1 .. layers per pipeline rank; the model takes 1 .. largest chunk).

Rules per chunk of n layers (positions start .. start + n):

* `uniform`: the chunk is cut into groups [start + j r, min(start + (j + 1) r, start + n)) (the last
  group is shorter when r does not divide n); `tensor_parallel.checkpoint` keeps only the input of
  each group, so every layer of the chunk is recomputed (one extra forward with its collectives),
  and a micro-batch in flight holds ceil(n / r) group inputs. While a group is recomputed in the
  backward pass its forward runs again with autograd on, so the stage holds that group's full
  activations on top: min(r, n) layers (the working set).
* `block`: the first min(r, n) layers are checkpointed one by one (each keeps its input and is
  recomputed); the remaining layers keep their activations and are not recomputed. The working
  set is one layer's full activations.

Every layer input has the shape of the hidden state ([s/cp (/tp with SP), b, h]), so a group's
checkpoint is counted as the largest layer input (`SplitCoefficients.checkpoint_bytes`); the
working set counts each layer as the largest layer's full activations (`work_bytes`).

Time per micro-batch of a stage with n layers (homogeneous stack, a = forward + backward of one
layer, f = its extra forward): block `a n + f min(r, n)`, uniform `(a + f) n`, independent of r, so
with `uniform` r only trades checkpoints (fewer with larger r) against the working set (larger).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinker_opt.choices import RecomputeMethod


@dataclass(frozen=True)
class ChunkPlan:
    """What one chunk of n layers does under a method and a count r."""

    recomputed: int
    """Layers recomputed, counted from the chunk's first layer."""
    checkpoints: int
    """uniform: group inputs kept per micro-batch (block keeps each recomputed layer's input)."""
    work_layers: int
    """Layers whose full activations are live while one checkpoint is recomputed."""


def chunk_plan(method: str | None, n: int, r: int) -> ChunkPlan:
    """The rule of the module docstring for one chunk (method None or r = 0: no full recompute)."""
    if method is None or r <= 0 or n <= 0:
        return ChunkPlan(0, 0, 0)
    if method == RecomputeMethod.UNIFORM:
        return ChunkPlan(n, -(-n // r), min(r, n))
    k = min(r, n)
    return ChunkPlan(k, k, 1)


def time_shape(method: str | None, a: int, f: int, r: int) -> tuple[int, int, int]:
    """(low, high, knee) of a homogeneous stage's layer time: low per layer up to `knee` layers,
    high beyond (block: a + f for the first r, a after; uniform: a + f for every layer)."""
    if method == RecomputeMethod.UNIFORM:
        return a + f, a + f, 0
    if method == RecomputeMethod.BLOCK and r > 0:
        return a + f, a, r
    return a, a, 0


def piecewise(n, low: int | np.ndarray, high: int | np.ndarray, knee: int | np.ndarray):
    """low * min(n, knee) + high * (n - min(n, knee)), elementwise."""
    head = np.minimum(n, knee)
    return low * head + high * (np.asarray(n) - head)


def uniform_stage_memory(
    n: np.ndarray, r: int, *, w: int, ckpt: int, work: int, inflight: np.ndarray, fixed: np.ndarray
) -> np.ndarray:
    """Memory of each stage (rows) holding n layers (columns), uniform method, 1F1B:
    fixed_s + w n + K_s ceil(n / r) ckpt + min(r, n) work, with fixed_s the stage's static bytes
    plus K_s times its embedding / head activations."""
    n = np.asarray(n, dtype=np.int64)
    groups = -(-n // r)
    return (
        fixed[:, None]
        + w * n[None, :]
        + inflight.astype(np.int64)[:, None] * groups[None, :] * ckpt
        + np.minimum(r, n)[None, :] * work
    )


def caps_from_memory(memory: np.ndarray, limit: int) -> np.ndarray:
    """Largest n (column index) per row whose memory fits, given a row nondecreasing in n; -1 when
    even n = 0 does not fit."""
    fits = memory <= limit
    return np.cumprod(fits, axis=1).sum(axis=1).astype(np.int64) - 1


def activation_function_terms(
    model, kind: str, tokens: int, tp: int, bytes_per_element: int, memory_bandwidth_gbs: float
) -> tuple[int, float]:
    """(bytes not kept, extra microseconds) per layer and micro-batch of MindSpeed's
    `--recompute-activation-function` (Ascend/MindSpeed mindspeed/core/memory/recompute/activation/
    activation_recompute_forward.py and recompute_common.py `should_recompute`).

    The MLP's activation function runs under `CheckpointWithoutOutput`: its output (the input of
    linear_fc2, [tokens, ffn/tp]) is freed right after linear_fc2's forward and recomputed from the
    kept linear_fc1 output just before linear_fc2's backward. Saved: tokens * ffn/tp * bpe per
    MLP. Time: one more activation forward, elementwise, counted memory-bound at the HBM
    bandwidth: it reads the fc1 output (2 ffn/tp wide with a gated unit such as SwiGLU, else
    ffn/tp) and writes ffn/tp (ASSUMPTION: no fusion with the fc2 backward).
    Applied to the dense MLP and the shared experts of MoE layers (Megatron's `MLP` class, which
    the feature patches); the routed experts' grouped MLP is left as is (ASSUMPTION).
    `tokens` is the micro-batch's tokens on one context-parallel rank (the MLP sees the whole
    sequence slice even with sequence parallelism)."""
    width = (
        model.ffn_hidden_size
        if kind == "dense"
        else (model.moe_shared_expert_intermediate_size or 0)
    )
    if width <= 0:
        return 0, 0.0
    out_bytes = tokens * (width // tp) * bytes_per_element
    moved = out_bytes * ((2 if model.swiglu else 1) + 1)
    return out_bytes, moved / (memory_bandwidth_gbs * 1e3)  # 1 GB/s = 1e3 B/us
