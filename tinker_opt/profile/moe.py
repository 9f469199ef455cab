"""Mixture-of-experts MLP of one rank: router, top-k dispatch, num_experts/ep local experts, shared experts.

Mirrors Megatron-core's MoELayer. With `--moe-grouped-gemm` the local experts' weights are
stacked as [E_local, h, f] tensors and run as one batched matmul (GroupedMLP / TEGroupedMLP: one
grouped kernel whose tiles come from every expert, so it runs at the efficiency of the experts'
total size); without it every expert is its own GEMM (SequentialMLP: a loop of small GEMMs, each
at the efficiency of its own size; NVIDIA/Megatron-LM megatron/core/transformer/moe/experts.py).
The all-to-all and the expert-tensor-parallel all-gather / reduce-scatter are collectives the
cost model adds (costs/moe_terms.py); here the rank receives its etp group's tokens x topk
assignments times the busiest expert's load (shape.expert_load), split evenly over its local
experts (a fixed permutation, so timings do not depend on random routing).

What the routed experts keep for the backward follows Megatron-core's TEGroupedMLP
(megatron/core/transformer/moe/experts.py, `bias_act_func`): the routing probabilities are applied
inside the activation, a SwiGLU through `weighted_bias_swiglu_impl` (megatron/core/fusions/
fused_bias_swiglu.py, WeightedSwiGLUFunction: saves only its input and the probabilities; the
non-gated activation as `activation_func(x) * probs`), so the experts' [T, h] output is not kept;
the tokens go back through `unpermute` (megatron/core/transformer/moe/moe_utils.py:
`scatter_add_` of the expert output by the sorted indices, or Transformer Engine's fused
`moe_unpermute` under `--moe-permute-fusion`), which keeps only the indices.

The dispatch keeps what Megatron-core's unfused `permute` keeps (moe_utils.py, `permute` with
probs): the router's dense probabilities [T, E] (router.py `Router.routing`: the top-k scattered
into zeros) are transposed and `masked_select`ed by the transposed routing map, which keeps both
[E, T] tensors for the backward, and `tokens.index_select(0, sorted_indices)` keeps the int64
indices [T k] (the same tensor the unpermute's `scatter_add_` keeps). Checked against
megatron-core 0.16.1's MoE layer by tests/test_megatron_core_parity.py. ASSUMPTION: under
`--moe-permute-fusion` Transformer Engine's `moe_permute_with_probs` keeps an int32 row map of
about the same size instead; the unfused form is counted for both.

ModelLink's legacy GShard MoE (`moe_gshard_dispatch`, DeepSpeed sharded_moe.py MOELayer) builds
the expert input with one-hot einsums, "sec,sm->ecm" to dispatch and "sec,ecm->sm" to combine
(S tokens, E experts, C capacity, M hidden): two dense matmuls of 2 S E C M FLOPs each, and the
[S, E C] masks they keep for the backward; every expert computes its whole capacity.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tinker_opt.profile.kernels import REFERENCE
from tinker_opt.profile.layers import MLP, new_weight
from tinker_opt.profile.tp_emulation import ScatterToSequence, _repeat_dim0


class WeightedSwiGLU(torch.autograd.Function):
    """silu(gate) * up * probs saving only the input and the probabilities, as Megatron-core's
    WeightedSwiGLUFunction (megatron/core/fusions/fused_bias_swiglu.py); the backward recomputes
    silu from the input. `swiglu` is the forward's SwiGLU kernel (kernels.py)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, probs: torch.Tensor, swiglu) -> torch.Tensor:
        ctx.save_for_backward(x, probs)
        return (swiglu(x) * probs).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        """Megatron's `weighted_swiglu_back`: `swiglu_back(g * probs, x)` in the input's dtype
        and the probabilities' gradient, the SwiGLU output times g summed over the features."""
        x, probs = ctx.saved_tensors
        gate, up = x.chunk(2, dim=-1)
        sig = torch.sigmoid(gate)
        silu = gate * sig
        g = grad * probs
        grad_x = torch.cat((g * sig * (1 + gate * (1 - sig)) * up, g * silu), dim=-1)
        grad_probs = (silu * up * grad).sum(-1, keepdim=True).to(probs.dtype)
        return grad_x.to(x.dtype), grad_probs, None


class MaskedSelect(torch.autograd.Function):
    """`x.masked_select(mask)` for a mask whose True entries are known (`positions`, its flat
    indices): the same values, keeping x and the mask for the backward as torch's masked_select
    does (derivatives.yaml: `masked_select_backward(grad, self, mask)`); the output size does not
    depend on the data, so it runs on the meta device and under FakeTensorMode too."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, mask, positions)
        return x.reshape(-1).index_select(0, positions)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, _, positions = ctx.saved_tensors
        grad_x = grad.new_zeros(x.numel()).index_add(0, positions, grad)
        return grad_x.view_as(x), None, None


class GroupedExperts(nn.Module):
    """The rank's routed experts (width moe_ffn / etp each) as stacked weights; no collectives inside.

    fc1 [E, h, 2f | f] (+ bias [E, 2f | f]) and fc2 [E, f, h] (+ bias [E, h]): the same parameter
    count and bytes as E separate expert MLPs."""

    def __init__(
        self,
        num_experts: int,
        hidden: int,
        ffn_local: int,
        *,
        swiglu: bool,
        bias: bool,
        device,
        dtype,
    ) -> None:
        super().__init__()
        width = ffn_local * (2 if swiglu else 1)
        self.swiglu = swiglu
        self.fc1 = new_weight(num_experts, hidden, width, device=device, dtype=dtype)
        self.fc2 = new_weight(num_experts, ffn_local, hidden, device=device, dtype=dtype)
        self.fc1_bias = (
            nn.Parameter(torch.zeros(num_experts, width, device=device, dtype=dtype))
            if bias
            else None
        )
        self.fc2_bias = (
            nn.Parameter(torch.zeros(num_experts, hidden, device=device, dtype=dtype))
            if bias
            else None
        )
        self.kernel = REFERENCE["swiglu"]

    @property
    def kernel_op(self) -> str | None:
        return "swiglu" if self.swiglu else None

    @property
    def num_experts(self) -> int:
        return self.fc1.shape[0]

    def _activation(self, x: torch.Tensor, probs: torch.Tensor | None) -> torch.Tensor:
        """The activation, times the routing probabilities [E', n, 1] when given (the module
        docstring); a GShard expert (probs None) applies none."""
        if probs is None:
            return self.kernel.fn(x) if self.swiglu else F.gelu(x)  # as the dense MLP (kernels.py)
        if self.swiglu:
            return WeightedSwiGLU.apply(x, probs, self.kernel.fn)
        return (F.gelu(x) * probs).to(x.dtype)

    def _run(self, x: torch.Tensor, probs: torch.Tensor | None, experts: slice) -> torch.Tensor:
        """The experts of `experts` on x [E', n, h] (n tokens each): [E', n, h]."""
        # All experts: the parameters themselves (a slice would add a full-size zero-filled gradient).
        pick = (lambda p: p) if experts == slice(None) else (lambda p: p[experts])
        w1, w2 = pick(self.fc1), pick(self.fc2)
        hidden = (
            torch.bmm(x, w1)
            if self.fc1_bias is None
            else torch.baddbmm(pick(self.fc1_bias).unsqueeze(1), x, w1)
        )
        out = torch.bmm(self._activation(hidden, probs), w2)
        return out if self.fc2_bias is None else out + pick(self.fc2_bias).unsqueeze(1)

    def forward(self, dispatched: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
        """dispatched [T, h] (and its routing probabilities [T, 1]), grouped by expert: the first
        T % E experts get one token more (balanced).

        One batched call per group size: T = extra (per + 1) + (E - extra) per."""
        total, h = dispatched.shape
        per, extra = divmod(total, self.num_experts)
        split = extra * (per + 1)

        def group(t: torch.Tensor | None, rows: slice, count: int, size: int):
            return None if t is None else t[rows].view(count, size, t.shape[-1])

        parts = []
        if extra:
            head = slice(None, split)
            x, p = group(dispatched, head, extra, per + 1), group(probs, head, extra, per + 1)
            parts.append(self._run(x, p, slice(0, extra)).reshape(-1, h))
        if per:
            tail, count = slice(split, None), self.num_experts - extra
            x, p = group(dispatched, tail, count, per), group(probs, tail, count, per)
            parts.append(
                self._run(x, p, slice(extra, None) if extra else slice(None)).reshape(-1, h)
            )
        return parts[0] if len(parts) == 1 else torch.cat(parts)


MAX_TRACED_GEMMS = 8
"""Most separate expert GEMMs a SequentialExperts traces: more local experts run in this many
batched groups (tracing 128 separate experts costs half a minute per profiled shape).
ASSUMPTION: above 8 local experts the small-GEMM penalty of the loop is understated (each group
is timed at the size of its experts together)."""


class SequentialExperts(nn.Module):
    """The rank's routed experts as separate GEMMs, one expert after another (no grouped GEMM);
    more than MAX_TRACED_GEMMS local experts in that many equal groups."""

    def __init__(self, num_experts: int, hidden: int, ffn_local: int, **kwargs) -> None:
        super().__init__()
        groups = min(num_experts, MAX_TRACED_GEMMS)
        sizes = [num_experts // groups + (i < num_experts % groups) for i in range(groups)]
        self.local = nn.ModuleList(GroupedExperts(n, hidden, ffn_local, **kwargs) for n in sizes)

    @property
    def num_experts(self) -> int:
        return sum(group.num_experts for group in self.local)

    def forward(self, dispatched: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
        """dispatched [T, h] (and probs [T, 1]) grouped by expert, the first T % E experts one
        token more (balanced)."""
        per, extra = divmod(dispatched.shape[0], self.num_experts)
        sizes = [group.num_experts * per for group in self.local]
        sizes[0] += extra  # the first group's first `extra` experts get one token more
        chunks = torch.split(dispatched, sizes)
        weights = torch.split(probs, sizes) if probs is not None else (None,) * len(sizes)
        return torch.cat(
            [e(c, p) for e, c, p in zip(self.local, chunks, weights, strict=True) if c.shape[0]]
        )


class MoE(nn.Module):
    """Router + dispatch + local experts + combine (+ shared experts), input / output [s_sp, b, h]."""

    def __init__(self, dims, model, *, tp: int, sp: bool, etp: int, device, dtype) -> None:
        super().__init__()
        self.topk, self.etp = dims.topk, etp
        self.router = new_weight(dims.num_experts, dims.hidden, device=device, dtype=dtype)
        self.gshard = model.moe_gshard_dispatch
        self.num_experts = dims.num_experts
        grouped = model.moe_grouped_gemm and not self.gshard
        self.experts = (GroupedExperts if grouped else SequentialExperts)(
            dims.num_local_experts,
            dims.hidden,
            dims.expert_ffn,
            swiglu=model.swiglu,
            bias=model.add_bias_linear,
            device=device,
            dtype=dtype,
        )
        self.shared = (
            MLP(
                dims.hidden,
                dims.shared_ffn,
                swiglu=model.swiglu,
                bias=model.add_bias_linear,
                gather=tp if sp else 1,
                device=device,
                dtype=dtype,
            )
            if dims.shared_ffn
            else None
        )
        tokens = dims.seq_sp * dims.mbs * etp
        # The rank's token-expert assignments (shape.expert_tokens per sequence), grouped by local
        # expert: slot i is assignment i mod (tokens x topk) of the balanced order.
        assignments = dims.expert_tokens * dims.mbs
        if self.gshard:  # every expert's capacity C, padded: E x C slots
            assignments = -(-assignments // dims.num_experts) * dims.num_experts
        slot = torch.arange(assignments, device=device) % (tokens * self.topk)
        self.register_buffer("slot", slot, persistent=False)
        # The fixed balanced routing: choice j of token t is expert (t k + j) mod E.
        own = dims.seq_sp * dims.mbs
        choice = (
            torch.arange(own * self.topk, device=device).view(own, self.topk) % self.num_experts
        )
        self.register_buffer("choice", choice, persistent=False)
        # The True entries of the routing map [E, T], flat and in order: e T + t for each choice.
        tokens_own = torch.arange(own, device=device).unsqueeze(1)
        positions = (choice * own + tokens_own).reshape(-1).sort().values
        self.register_buffer("positions", positions, persistent=False)
        self.wraps = assignments != tokens * self.topk

    def expert_param_count(self) -> int:
        return sum(p.numel() for p in self.experts.parameters())

    def route(self, tokens: torch.Tensor) -> torch.Tensor:
        """Top-k routing weights [T, k] (softmax over the experts, in fp32 as Megatron's router)."""
        scores = torch.softmax(F.linear(tokens, self.router).float(), dim=-1)
        return scores.topk(self.topk, dim=-1).values.to(tokens.dtype)

    def permute(self, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Megatron's unfused `permute` of the fixed routing (module docstring): the rows of the
        etp group's tokens [T etp, h] each dispatched slot takes, and their probabilities.

        weights [T, k] of the rank's own tokens; the etp all-gather repeats both, and the busiest
        expert's load (or capacity padding) wraps them over the `slot` assignments."""
        own, experts = weights.shape[0], self.num_experts
        routing_map = weights.new_zeros(own, experts, dtype=torch.bool).scatter_(
            1, self.choice, True
        )
        routing_map = routing_map.t().contiguous()  # [E, T]
        probs = weights.new_zeros(own, experts).scatter(1, self.choice, weights)
        gates = MaskedSelect.apply(probs.t().contiguous(), routing_map, self.positions)
        index = self.positions % own  # sorted_indices: the tokens of each expert in turn
        if self.etp > 1:  # the etp group's copies of the tokens follow the rank's own
            index = torch.cat([index + rank * own for rank in range(self.etp)])
            gates = _repeat_dim0(gates, self.etp)
        if self.wraps:
            index, gates = index[self.slot], gates[self.slot]
        return index, gates

    def _gshard(self, gathered: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """GShard's one-hot dispatch and weighted combine as DeepSpeed runs them (sharded_moe.py
        top2gating and MOELayer): per choice k the fp32 combine tensor "se,sc->sec" of the gates
        [S, E] and the one-hot capacity slots [S, C], their sum, its bool dispatch mask, both cast
        to the input dtype, then the two dense matmuls "sec,sm->ecm" and "sec,ecm->sm"."""
        tokens, slots = gathered.shape[0], self.slot.shape[0]  # S and E*C
        experts = self.num_experts
        capacity = slots // experts
        one_hot = gathered.new_zeros(tokens, capacity, dtype=torch.float32)  # locations_sc
        weights = _repeat_dim0(weights, self.etp)  # the etp group's tokens, as `gathered`
        combine = None
        for k in range(self.topk):  # combine1_sec + combine2_sec (a top-2 router: two choices)
            gates = weights[:, k : k + 1].float().expand(tokens, experts)  # gates_k [S, E]
            part = (gates[:, :, None] * one_hot[:, None, :]).reshape(tokens, slots)
            combine = part if combine is None else combine + part
        dispatch = combine.bool().to(gathered.dtype)  # dispatch_mask.type_as(input)
        expert_out = self.experts(dispatch.t() @ gathered)  # "sec,sm->ecm"
        return combine.to(gathered.dtype) @ expert_out  # "sec,ecm->sm"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        tokens = x.reshape(s * b, h)
        weights = self.route(tokens)
        gathered = _repeat_dim0(tokens, self.etp)  # expert-tensor-parallel all-gather of the tokens
        if self.gshard:
            combined = self._gshard(gathered, weights)
        else:
            index, gates = self.permute(weights)
            dispatched = gathered.index_select(0, index)  # permutation + all-to-all
            expert_out = self.experts(dispatched, gates.reshape(-1, 1))  # probs in the activation
            rows = index.unsqueeze(1).expand(-1, h)  # unpermute: scatter_add keeps the index
            combined = torch.zeros_like(gathered).scatter_add(0, rows, expert_out)
        if self.etp > 1:
            combined = ScatterToSequence.apply(combined, self.etp)
        out = combined.view(s, b, h)
        if self.shared is not None:
            shared = self.shared(x)
            out = out + (shared if self.shared.fc2.bias is None else shared + self.shared.fc2.bias)
        return out
