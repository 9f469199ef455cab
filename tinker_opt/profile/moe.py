"""Mixture-of-experts MLP of one rank: router, top-k dispatch, num_experts/ep local experts, shared experts.

Mirrors Megatron-core's MoELayer with the all-to-all token dispatcher. The all-to-all and the
expert-tensor-parallel all-gather / reduce-scatter are collectives the cost model adds; here the
rank receives, with balanced routing, its etp group's tokens x topk assignments, split evenly over
its local experts (a fixed permutation, so timings do not depend on random routing).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tinker_opt.profile.layers import MLP, new_weight
from tinker_opt.profile.tp_emulation import ScatterToSequence, _repeat_dim0


class Expert(nn.Module):
    """One routed expert's MLP shard (width moe_ffn / etp); no collectives inside."""

    def __init__(self, hidden: int, ffn_local: int, *, swiglu: bool, bias: bool, device, dtype) -> None:
        super().__init__()
        self.mlp = MLP(hidden, ffn_local, swiglu=swiglu, bias=bias, gather=1, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.mlp(x)
        return out if self.mlp.fc2.bias is None else out + self.mlp.fc2.bias


class MoE(nn.Module):
    """Router + dispatch + local experts + combine (+ shared experts), input / output [s_sp, b, h]."""

    def __init__(self, dims, model, *, tp: int, sp: bool, etp: int, device, dtype) -> None:
        super().__init__()
        self.topk, self.etp = dims.topk, etp
        self.router = new_weight(dims.num_experts, dims.hidden, device=device, dtype=dtype)
        self.experts = nn.ModuleList(
            Expert(dims.hidden, dims.expert_ffn, swiglu=model.swiglu, bias=model.add_bias_linear,
                   device=device, dtype=dtype) for _ in range(dims.num_local_experts))
        self.shared = (MLP(dims.hidden, dims.shared_ffn, swiglu=model.swiglu, bias=model.add_bias_linear,
                           gather=tp if sp else 1, device=device, dtype=dtype) if dims.shared_ffn else None)
        tokens = dims.seq_sp * dims.mbs * etp
        # Balanced dispatch: every gathered token goes to topk experts; the rank's share is one
        # token-expert assignment per (token, k), grouped by local expert.
        self.register_buffer("order", torch.arange(tokens, device=device).repeat_interleave(self.topk),
                             persistent=False)

    def expert_param_count(self) -> int:
        return sum(p.numel() for p in self.experts.parameters())

    def route(self, tokens: torch.Tensor) -> torch.Tensor:
        """Top-k routing weights [T, k] (softmax over the experts, in fp32 as Megatron's router)."""
        scores = torch.softmax(F.linear(tokens, self.router).float(), dim=-1)
        return scores.topk(self.topk, dim=-1).values.to(tokens.dtype)

    def run_experts(self, dispatched: torch.Tensor) -> torch.Tensor:
        total, num = dispatched.shape[0], len(self.experts)
        sizes = [total // num + (1 if i < total % num else 0) for i in range(num)]
        return torch.cat([expert(part) for expert, part in zip(self.experts, dispatched.split(sizes))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        tokens = x.reshape(s * b, h)
        weights = self.route(tokens)
        gathered = _repeat_dim0(tokens, self.etp)  # expert-tensor-parallel all-gather of the tokens
        dispatched = gathered.index_select(0, self.order)  # permutation + all-to-all
        expert_out = self.run_experts(dispatched)
        weighted = expert_out * _repeat_dim0(weights, self.etp).reshape(-1, 1)
        combined = torch.zeros_like(gathered).index_add(0, self.order, weighted)  # unpermute
        if self.etp > 1:
            combined = ScatterToSequence.apply(combined, self.etp)
        out = combined.view(s, b, h)
        if self.shared is not None:
            shared = self.shared(x)
            out = out + (shared if self.shared.fc2.bias is None else shared + self.shared.fc2.bias)
        return out
