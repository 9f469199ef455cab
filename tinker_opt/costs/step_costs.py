"""Costs of a training step that do not shrink with the job: the optimizer step's kernels beside
Adam, the step's scalar all-reduces, and the data loader's per-micro-batch batch transfer.

Small jobs (a few layers per rank, a micro-batch of 1) spend a larger share of the iteration on
these; the layer terms never see them. Each is priced from Megatron-LM's code path:

Per iteration, per rank (`train_step`, megatron/training/training.py, and the optimizer,
megatron/core/optimizer/optimizer.py `MixedPrecisionOptimizer.step`):

* zero the gradient buffer: `DistributedDataParallel.zero_grad_buffer` ->
  `_ParamAndGradBuffer.reset` -> `grad_data.zero_()` (megatron/core/distributed/
  param_and_grad_buffer.py): a write of the whole local gradient buffer (grad_bytes per local
  parameter, not sharded by the distributed optimizer).
* fp16 only: `_unscale_main_grads_and_check_for_nan` -> `torch._amp_foreach_non_finite_check_and_unscale_`
  reads and writes the main gradients of the rank's optimizer shard (4 + 4 B), then all-reduces
  `found_inf` over the model-parallel group and reads it on the host (`found_inf.item()`).
* gradient clipping (`--clip-grad`, default 1.0): `get_grad_norm_fp32` (megatron/core/optimizer/
  clip_grads.py) runs `multi_tensor_l2norm` over the shard's main gradients (4 B read), all-reduces
  the norm over the group that holds the model (`grad_stats_parallel_group`: the model-parallel
  group, with the distributed optimizer its data-parallel ranks too) and reads it on the host.
  `clip_grad_by_total_norm_fp32` then scales the gradients (`multi_tensor_scale`, 8 B) only when
  the norm exceeds the clip value, which depends on the data: ASSUMPTION, left out (a long run's
  norm settles below the clip; the short CI and tutorial logs of tests/fixtures/logs, with norms
  of 4-25 against 1.0, do pay it: 8 B per shard parameter, under 1 % of their iteration).
* Adam: `ADAM_TOUCH_BYTES` per shard parameter (costs/data_parallel.py).
* `--log-num-zeros-in-grad`: `count_zeros_fp32` counts the zeros of the shard's main gradients
  (4 B read) and all-reduces the count.
* `--log-params-norm`: `calc_params_l2_norm` (megatron/training/utils.py), called by `train()`
  every iteration, runs `multi_tensor_l2norm` over the rank's model parameters (bytes_per_element
  each, not sharded) and all-reduces the norm over the model-parallel group.

Each memory-bound pass costs `bytes / HBM bandwidth`, as Adam's (a streaming pass over a large
shard runs near the peak bandwidth; linear in the parameters, so the solvers' per-layer tails add
up) plus, once per iteration, its first launch: `multi_tensor_applier` (apex / TE
csrc/multi_tensor_apply.cuh) launches one kernel per `MTA_BLOCKS` chunks of `MTA_CHUNK` elements,
issued by the host (`host_op_us`), and after the step's host syncs (`.item()`) the GPU waits for
it. ASSUMPTION: one launch per pass is exposed (a shard of more than MTA_CHUNK x MTA_BLOCKS =
21M elements launches more, hidden behind the running kernel). Each scalar all-reduce costs the
collective's latency on its group (comm model, 4 bytes) plus one host round trip.

Per micro-batch (megatron/training/utils.py `get_batch_on_this_tp_rank`, pretrain_gpt.py
`get_batch`): tensor-parallel rank 0 of the first and the last pipeline stage copies the batch to
the device (`.cuda(non_blocking=True)`, ordered on the compute stream): tokens, labels and
position ids (int64), the loss mask (fp32) and, where the dataset builds one
(`--create-attention-mask-in-dataloader`, Megatron-LM's default;
`--no-create-attention-mask-in-dataloader` turns it off), the [b, 1, s, s] bool attention mask;
then broadcasts its tensors to the other tp ranks (first stage: tokens, mask, position ids; last:
labels, loss mask, mask; both with pp 1). Middle stages load nothing. ASSUMPTION: a broadcast
costs the ring all-gather of the same bytes (each link carries the message once, as a pipelined
ring broadcast); MindSpeed-LLM's launches build no attention mask in the batch
(mindspeed_llm/training/utils.py generates the causal mask on the device), so the mask is counted
for Megatron-LM launches only (JobOptions.step); a cost model built without a launch prices no
loader (StepFlags.load_batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinker_opt.costs.term_context import TermContext
    from tinker_opt.strategy import Strategy

MTA_CHUNK = 2048 * 32
"""Elements per chunk of `multi_tensor_applier` (Megatron's `--multi-tensor-chunk-size`
default 2048*32; apex multi_tensor_apply.cuh)."""
MTA_BLOCKS = 320
"""Chunks (thread blocks) per multi-tensor launch (apex / TE multi_tensor_apply.cuh
`depth_to_max_blocks`: 320 for every list depth)."""
BATCH_TOKEN_BYTES = 8 + 8 + 8 + 4
"""Per token of a micro-batch: tokens, labels, position ids (int64) and the loss mask (fp32)."""


def step_kernels_us(ctx: TermContext, local: float, shard: float) -> float:
    """The step's memory-bound passes besides Adam (module docstring) over `local` parameters of
    the rank's gradient buffer and the `shard` of them its optimizer updates; linear in both, so
    the per-layer tails add up (costs/data_parallel.py tail_parts_us)."""
    step = ctx.job.step
    local_bytes = local * ctx.grad_bytes  # zero_grad_buffer
    shard_bytes = 8.0 * shard if ctx.model.precision == "fp16" else 0.0  # unscale + inf check
    if step.clip_grad:
        shard_bytes += shard * 4  # the l2 norm (the scale pass: module docstring)
    if step.log_num_zeros_in_grad:
        shard_bytes += shard * 4
    if step.log_params_norm:
        local_bytes += local * ctx.bpe
    return (local_bytes + shard_bytes) / stream_bytes_per_us(ctx)


def stream_bytes_per_us(ctx: TermContext) -> float:
    """Bytes per microsecond a large memory-bound pass moves (1 GB/s = 1e3 B/us)."""
    return ctx.mem_bw_gbs * 1e3


def step_fixed_us(ctx: TermContext, s: Strategy) -> float:
    """The step's per-iteration constant: the scalar all-reduces with their host round trips and
    one exposed launch per pass (module docstring)."""
    step = ctx.job.step
    fp16 = ctx.model.precision == "fp16"
    flags = (fp16, step.clip_grad, step.log_num_zeros_in_grad, step.log_params_norm)
    reductions = sum(flags)
    passes = 1 + reductions  # zero_grad, then one pass per reduction
    fixed = passes * ctx.rates.host_op_us
    if reductions:
        model_parallel = s.tp * s.pp * s.cp * (s.dp if s.dist_opt else 1)
        scope = ctx.scope(1, model_parallel)
        one = ctx.comm.time_us("all_reduce", model_parallel, scope, 4.0) + ctx.rates.host_op_us
        fixed += reductions * one
    return fixed


def batch_load_us(ctx: TermContext, s: Strategy, first: bool, last: bool) -> float:
    """One micro-batch's batch copy to the device and tp broadcast on a stage (first, last or
    both with pp 1; 0 for a middle stage): module docstring."""
    if not (ctx.job.step.load_batch and (first or last)):
        return 0.0
    tokens = s.mbs * ctx.model.seq_length
    mask = tokens * ctx.model.seq_length if ctx.job.step.batch_attention_mask else 0
    us = (tokens * BATCH_TOKEN_BYTES + mask) / (ctx.host_link_gbs * 1e3)
    if s.tp == 1:
        return us
    scope = ctx.scope(1, s.tp)
    sent = [8, 8] if first else []  # tokens, position ids
    sent += [8, 4] if last else []  # labels, loss mask
    for per_token in sent:
        us += ctx.comm.time_us("all_gather", s.tp, scope, tokens * per_token / s.tp)
    if mask:
        us += ctx.comm.time_us("all_gather", s.tp, scope, mask / s.tp)
    return us
