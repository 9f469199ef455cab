"""Multi-head latent attention (DeepSeek-V2/V3) of one tensor-parallel rank.

Mirrors Megatron-core's `MLASelfAttention` per-rank shapes (n = heads / tp, dq = qk_head_dim +
qk_pos_emb_head_dim, r = qk_pos_emb_head_dim):

* query: `linear_q_down_proj` h -> q_lora_rank (duplicated on every rank, not split), q norm,
  `linear_q_up_proj` q_lora_rank -> n * dq (column parallel); without q_lora_rank a single
  column-parallel `linear_q_proj` h -> n * dq;
* key / value: `linear_kv_down_proj` h -> kv_lora_rank + r (duplicated), kv norm on the first
  kv_lora_rank columns, `linear_kv_up_proj` kv_lora_rank -> n * (qk_head_dim + v_head_dim)
  (column parallel); the last r columns are the shared rotary key, one head broadcast to n;
* rotary on the r-wide parts of q and k, core attention with key dim dq and value dim v_head_dim,
  softmax scale 1 / sqrt(dq), `linear_proj` n * v_head_dim -> h (row parallel).

Under sequence parallel the down projections and norms run on the s/tp shard; the up projections
all-gather it (as the column-parallel linears do) and so does the rotary key part
(`gather_from_sequence_parallel_region` in Megatron).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tinker_opt.errors import ConfigError
from tinker_opt.profile.layers import (
    Attention,
    ColumnParallelLinear,
    RotaryEmbedding,
    RowParallelLinear,
    make_norm,
    new_weight,
)
from tinker_opt.profile.tp_emulation import GatherFromSequence
from tinker_opt.specs import ModelSpec

MLA_FIELDS = ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")


def check_mla(model: ModelSpec) -> None:
    """Raise ConfigError when an MLA model lacks one of the sizes the attention needs."""
    missing = [name for name in MLA_FIELDS if not getattr(model, name)]
    if missing:
        flags = ", ".join("--" + name.replace("_", "-") for name in missing)
        raise ConfigError(f"--multi-latent-attention needs {flags}; add them to the script")
    if model.qk_pos_emb_head_dim % 2:
        raise ConfigError(
            f"qk_pos_emb_head_dim ({model.qk_pos_emb_head_dim}) must be even for rotary"
        )


class DuplicatedLinear(nn.Module):
    """A linear held whole on every tensor-parallel rank (Megatron's 'duplicated' mode): no collective."""

    def __init__(self, in_features: int, out_features: int, *, device, dtype) -> None:
        super().__init__()
        self.weight = new_weight(out_features, in_features, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class LatentAttention(Attention):
    """MLA self-attention of one rank; `split_qkv` / `core_forward` keep Attention's interface."""

    def __init__(self, dims, model: ModelSpec, *, gather: int, cp: int, device, dtype) -> None:
        check_mla(model)
        nn.Module.__init__(self)
        kw = dict(device=device, dtype=dtype)
        self.heads = self.groups = dims.heads
        self.nope_dim, self.rope_dim, self.v_dim = (
            model.qk_head_dim,
            model.qk_pos_emb_head_dim,
            model.v_head_dim,
        )
        self.head_dim = self.nope_dim + self.rope_dim
        self.kv_lora_rank, self.gather = model.kv_lora_rank, gather
        self._build_query(dims, model, **kw)
        self.kv_down = DuplicatedLinear(dims.hidden, self.kv_lora_rank + self.rope_dim, **kw)
        self.kv_norm = make_norm(model.normalization, self.kv_lora_rank, **kw)
        self.kv_up = ColumnParallelLinear(
            self.kv_lora_rank,
            self.heads * (self.nope_dim + self.v_dim),
            bias=False,
            gather=gather,
            **kw,
        )
        self.proj = RowParallelLinear(
            self.heads * self.v_dim, dims.hidden, bias=model.add_bias_linear, scatter=gather, **kw
        )
        self.rotary = RotaryEmbedding(dims.seq, self.rope_dim, **kw)
        self.flash, self.attention_dropout, self.cp = (
            model.use_flash_attn,
            model.attention_dropout,
            cp,
        )
        self.softmax_scale = 1.0 / math.sqrt(
            self.head_dim
        )  # mcore: 1 / sqrt(qk_head_dim + rope dim)
        self.recompute_core = False

    def _build_query(self, dims, model: ModelSpec, *, device, dtype) -> None:
        """q_lora_rank set: down (duplicated) -> norm -> up (column parallel); else one column-parallel linear."""
        width = self.heads * self.head_dim
        if model.q_lora_rank:
            self.q_down = DuplicatedLinear(
                dims.hidden, model.q_lora_rank, device=device, dtype=dtype
            )
            self.q_norm = make_norm(
                model.normalization, model.q_lora_rank, device=device, dtype=dtype
            )
            self.q_up = ColumnParallelLinear(
                model.q_lora_rank, width, bias=False, gather=self.gather, device=device, dtype=dtype
            )
        else:
            self.q_down = self.q_norm = None
            self.q_up = ColumnParallelLinear(
                dims.hidden, width, bias=False, gather=self.gather, device=device, dtype=dtype
            )

    def query(self, x: torch.Tensor) -> torch.Tensor:
        """[s_sp, b, h] -> q [s, b, n, dq] with rotary applied to its last rope_dim columns."""
        q = self.q_up(self.q_norm(self.q_down(x))) if self.q_down is not None else self.q_up(x)
        q = q.view(q.shape[0], q.shape[1], self.heads, self.head_dim)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
        return torch.cat((q_nope, self.rotary(q_rope)), dim=-1)

    def split_qkv(self, x: torch.Tensor):
        """q, k [s, b, n, dq]; v [s, b, n, v_head_dim], as mcore's get_query_key_value_tensors."""
        q = self.query(x)
        compressed, k_rope = self.kv_down(x).split([self.kv_lora_rank, self.rope_dim], dim=-1)
        if self.gather > 1:  # the rotary key is all-gathered along the sequence
            k_rope = GatherFromSequence.apply(k_rope, self.gather)
        kv = self.kv_up(self.kv_norm(compressed))
        kv = kv.view(kv.shape[0], kv.shape[1], self.heads, self.nope_dim + self.v_dim)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)
        k_rope = self.rotary(k_rope.unsqueeze(2)).expand(-1, -1, self.heads, -1)
        k = torch.cat((k_nope, k_rope), dim=-1)
        return q, k, v.contiguous()

    def core(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
    ) -> torch.Tensor:
        """Flash kernels need one head dim for q, k and v: v is zero-padded to dq and the output cut
        back to v_head_dim (MindSpeed-LLM's default; `--mla-fa-without-pad` skips it on the NPU).
        Unpadded, torch falls back to the math kernel and materialises the scores."""
        if not self.flash or v.shape[-1] == q.shape[-1]:
            return super().core(q, k, v, causal=causal)
        s, b = q.shape[0], q.shape[1]
        out = super().core(q, k, F.pad(v, (0, q.shape[-1] - v.shape[-1])), causal=causal)
        return out.view(s, b, self.heads, q.shape[-1])[..., : self.v_dim].reshape(
            s, b, self.heads * self.v_dim
        )
