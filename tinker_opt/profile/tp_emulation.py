"""Autograd functions that reproduce, on one device, what a tensor-parallel rank computes and saves.

The collectives themselves are not run (the cost model adds them from comm.csv); each function
keeps the per-rank tensor shapes and the saved-for-backward tensors of its Megatron-LM
counterpart, so time and activation memory match one rank of the real run:

* `GatherLinear`: column-parallel linear with a sequence-parallel input. Megatron all-gathers the
  s/t shard, multiplies, and saves only the shard (re-gathered in backward), hence 34/t in
  Korthikanti's sequence-parallel formula.
* `ScatterToSequence`: the reduce-scatter after a row-parallel linear under sequence parallel.
* `GatherFromSequence`: the all-gather of a sequence-parallel tensor (MLA's rotary key part).
* `FusedScaleMaskSoftmax`: Megatron's fused causal softmax, which saves only its output and runs
  in place as the fused kernel does.
* `VocabParallelCrossEntropy`: Megatron's cross entropy over a vocabulary shard (fp32 softmax kept).
* `CheckpointCore`: selective recompute of the core attention (inputs saved, rest recomputed).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import is_fake


def _repeat_dim0(tensor: torch.Tensor, times: int) -> torch.Tensor:
    """Stand-in for an all-gather along dim 0 across `times` ranks (same shape and bytes)."""
    return tensor.repeat(times, *([1] * (tensor.dim() - 1))) if times > 1 else tensor


class GatherLinear(torch.autograd.Function):
    """y = all_gather_seq(x) @ W^T + b, saving the s/t shard x (Megatron, sequence parallel)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gather: int):
        ctx.save_for_backward(x, weight)
        ctx.gather, ctx.has_bias = gather, bias is not None
        return F.linear(_repeat_dim0(x, gather), weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        full = _repeat_dim0(x, ctx.gather)  # Megatron re-gathers the input in backward
        grad_full = grad.matmul(weight)
        grad_weight = grad.reshape(-1, grad.shape[-1]).t().matmul(full.reshape(-1, full.shape[-1]))
        grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.has_bias else None
        grad_x = grad_full.narrow(0, 0, x.shape[0]).contiguous()  # the reduce-scatter's shard
        return grad_x, grad_weight, grad_bias, None


class ScatterToSequence(torch.autograd.Function):
    """Reduce-scatter along the sequence (forward) / all-gather (backward); saves nothing."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, parts: int):
        ctx.parts = parts
        return x.narrow(0, 0, x.shape[0] // parts).contiguous()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _repeat_dim0(grad, ctx.parts), None


class GatherFromSequence(torch.autograd.Function):
    """All-gather along the sequence (forward) / reduce-scatter (backward); saves nothing."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, parts: int):
        ctx.parts = parts
        return _repeat_dim0(x, parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad.narrow(0, 0, grad.shape[0] // ctx.parts).contiguous(), None


class FusedScaleMaskSoftmax(torch.autograd.Function):
    """softmax(scale * scores) with the causal mask, output in the input dtype, holding what the
    fused kernel holds: Megatron's / Transformer Engine's `scaled_upper_triang_masked_softmax`
    (transformer_engine/common/include/transformer_engine/softmax.h) reads the 16-bit scores and
    writes a new 16-bit output, its fp32 math in registers, and its backward
    (`nvte_scaled_upper_triang_masked_softmax_backward(output_grads, softmax_results, ...)`)
    writes the input gradient over the output gradient. So the scale and mask run in place on the
    scores (dead after this: the bmm before keeps q and k, not its output) and the backward runs
    in place on its incoming gradient, with no [.., s, s] fp32 or extra 16-bit temporaries.
    Saves only its output."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, scale: float, causal: bool):
        logits = scores.mul_(scale) if scale != 1.0 else scores
        if causal:
            q_len, k_len = logits.shape[-2], logits.shape[-1]
            upper = torch.ones(q_len, k_len, dtype=torch.bool, device=logits.device).triu_(
                1 + k_len - q_len
            )
            logits.masked_fill_(upper, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        ctx.save_for_backward(probs)
        ctx.scale = scale
        return probs

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (probs,) = ctx.saved_tensors
        # d softmax: p * (g - sum(g * p)) = g p - p sum(g p), times the scale applied before it.
        grad = grad.mul_(probs) if grad.is_contiguous() else grad * probs
        grad.addcmul_(probs, grad.sum(dim=-1, keepdim=True), value=-1.0)
        return (grad.mul_(ctx.scale) if ctx.scale != 1.0 else grad), None, None


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Per-token cross entropy over one vocabulary shard [vocab_start, vocab_start + V/t)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, vocab_start: int):
        work = logits.float()  # Megatron casts the logits to fp32 first
        work -= work.max(dim=-1, keepdim=True).values  # all-reduce(max) across tp in Megatron
        outside = (target < vocab_start) | (target >= vocab_start + work.shape[-1])
        local_target = (target - vocab_start).masked_fill_(outside, 0)
        picked = work.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill_(outside, 0.0)
        exp = work.exp_()
        sum_exp = exp.sum(dim=-1)  # all-reduce(sum) across tp in Megatron
        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, outside, local_target)
        ctx.dtype = logits.dtype
        return torch.log(sum_exp) - picked

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        softmax, outside, local_target = ctx.saved_tensors
        # d loss / d logits = softmax - onehot(target) (on the shard that owns the target),
        # computed in the saved softmax itself as Megatron-Core does (tensor_parallel/
        # cross_entropy.py VocabParallelCrossEntropy.prepare_gradient_calculation_operands:
        # `grad_input = softmax`, then in-place updates): no second fp32 logits tensor.
        grad_logits = softmax
        grad_logits.scatter_add_(
            -1, local_target.unsqueeze(-1), (outside.float() - 1.0).unsqueeze(-1)
        )
        grad_logits.mul_(grad.unsqueeze(-1))
        return grad_logits.to(ctx.dtype), None, None


def _rng_state(tensor: torch.Tensor) -> torch.Tensor | None:
    """The generator state of the tensor's device, None under FakeTensorMode and on the meta device
    (nothing random runs)."""
    if is_fake(tensor) or tensor.device.type == "meta":
        return None
    if tensor.device.type == "cpu":
        return torch.get_rng_state()
    return getattr(torch, tensor.device.type).get_rng_state(tensor.device)


def _set_rng_state(tensor: torch.Tensor, state: torch.Tensor | None) -> None:
    if state is None:
        return
    if tensor.device.type == "cpu":
        torch.set_rng_state(state)
    else:
        getattr(torch, tensor.device.type).set_rng_state(state, tensor.device)


class RingAttentionSaves(torch.autograd.Function):
    """The context-parallel ring's steps (`fn`, flash kernels) keeping for backward what
    Transformer Engine's ring keeps: q, k, v, the combined output and one softmax statistic per
    query row and head (fp32), not each step's output and statistics.

    Source: NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/
    context_parallel.py `AttnFuncWithCPAndKVP2P.forward` (Megatron-Core's `--cp-comm-type p2p`,
    the default): each step's `out_per_step[i]` and `softmax_lse_per_step[i]` are folded into
    `out` / `softmax_lse` (flash_attn_fwd_out_correction), and `ctx.save_for_backward` keeps
    q, kv (the last p2p buffer), out and softmax_lse (plus cu_seqlens and rng states); the
    backward reruns each step's flash backward from those. The steps run here with their own
    graph, outside the saved-tensor counters (measure.memory_pass counts what is saved for
    backward), so their backward ops are the ones traced and timed; their per-step outputs stay
    live until backward, which the forward's peak (transient bytes) counts as TE's list of
    per-step outputs is live during its forward. Shapes: q [s, b, np, d] in, [s, b, np * dv] out."""

    @staticmethod
    def forward(ctx, fn: Callable[..., torch.Tensor], *inputs: torch.Tensor):
        inner = [t.detach().requires_grad_(t.requires_grad) for t in inputs]
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(_same, _same):
            out = fn(*inner)
        ctx.inner, ctx.out = inner, out
        q = inputs[0]
        lse = q.new_empty((q.shape[1], q.shape[2], q.shape[0]), dtype=torch.float32)
        result = out.detach()
        ctx.save_for_backward(*inputs, result, lse)
        return result

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        wanted = [t for t in ctx.inner if t.requires_grad]
        grads = iter(torch.autograd.grad(ctx.out, wanted, grad))
        ctx.inner = ctx.out = None
        return (None, *[next(grads) if t.requires_grad else None for t in ctx.saved_tensors[:-2]])


def _same(tensor: torch.Tensor) -> torch.Tensor:
    """Identity saved-tensor hook: the ring's inner graph is not counted (RingAttentionSaves)."""
    return tensor


class CheckpointCore(torch.autograd.Function):
    """Megatron's selective recompute: keep the inputs, rerun `fn` in backward (same dropout draws)."""

    @staticmethod
    def forward(ctx, fn: Callable[..., torch.Tensor], *inputs: torch.Tensor):
        ctx.fn = fn
        ctx.rng = _rng_state(inputs[0])
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return fn(*inputs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        inputs = [t.detach().requires_grad_(t.requires_grad) for t in ctx.saved_tensors]
        with torch.random.fork_rng(devices=[], enabled=ctx.rng is not None):
            _set_rng_state(inputs[0], ctx.rng)
            with torch.enable_grad():
                out = ctx.fn(*inputs)
        wanted = [t for t in inputs if t.requires_grad]
        grads = iter(torch.autograd.grad(out, wanted, grad))
        return (None, *[next(grads) if t.requires_grad else None for t in inputs])
