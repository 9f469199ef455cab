"""Per-rank shard shapes: which slice of the model one device holds under a strategy shape.

A `Shape` is the key of one blocks.csv row (without the block name): tp, sp, cp, ep, etp, mbs.
`shard_dims` turns a ModelSpec and a Shape into the per-rank tensor sizes that Megatron-LM /
MindSpeed-LLM use (heads/tp, ffn/tp, vocab/tp, tokens/(cp*tp) under sequence parallel, local
experts num_experts/ep, expert ffn/etp). No torch here: the profile space and the analytic device
both use these sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tinker_opt.errors import ConfigError
from tinker_opt.specs import ModelSpec


@dataclass(frozen=True, order=True)
class Shape:
    """One per-rank shard: tensor, sequence, context, expert and expert-tensor parallel sizes, micro-batch."""

    tp: int = 1
    sp: bool = False
    """Sequence parallel: norms, dropouts and residuals hold seq/(cp*tp) tokens."""
    cp: int = 1
    ep: int = 1
    etp: int = 1
    """Expert tensor-parallel size (1 for dense blocks)."""
    mbs: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "cp", "ep", "etp", "mbs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"shape {name} must be a positive integer, got {value!r}")
        if self.sp and self.tp == 1:
            raise ConfigError("sequence parallel needs tp > 1; got sp with tp = 1")

    def key(self, block: str) -> tuple:
        """The blocks.csv key (store.BLOCK_KEY order): block, tp, sp, cp, ep, etp, mbs."""
        return (block, self.tp, int(self.sp), self.cp, self.ep, self.etp, self.mbs)

    def needs_at_least_memory_of(self, other: Shape) -> bool:
        """True when this shard is at least as large as `other` in every dimension (Tinker's OOM order)."""
        return (
            self.tp <= other.tp
            and int(self.sp) <= int(other.sp)
            and self.cp <= other.cp
            and self.ep <= other.ep
            and self.etp <= other.etp
            and self.mbs >= other.mbs
        )


@dataclass(frozen=True)
class ShardDims:
    """Per-rank tensor sizes of one shard (elements, not bytes)."""

    seq: int
    """Sequence length of the attention core on this rank: seq_length / cp."""
    seq_sp: int
    """Tokens per sequence in norms, dropouts and residuals: seq / tp with sequence parallel, else seq."""
    mbs: int
    hidden: int
    heads: int
    """Attention heads on this rank: num_attention_heads / tp."""
    groups: int
    """Key/value groups on this rank: num_query_groups / tp."""
    head_dim: int
    ffn: int
    """Dense MLP width on this rank: ffn_hidden_size / tp."""
    vocab: int
    """Vocabulary rows on this rank: padded vocabulary / tp."""
    num_local_experts: int = 0
    expert_ffn: int = 0
    """Routed-expert MLP width on this rank: moe_ffn_hidden_size / etp."""
    shared_ffn: int = 0
    """Shared-expert MLP width on this rank: shared size / tp."""
    expert_tokens: int = 0
    """Token-expert assignments this rank computes per sequence, with balanced routing:
    seq_sp x etp x topk (tokens are all-gathered across the etp group before the experts)."""
    topk: int = 0
    num_experts: int = 0


def _divide(total: int, parts: int, what: str, knob: str) -> int:
    if total % parts:
        raise ConfigError(
            f"{what} ({total}) is not divisible by {knob} ({parts}); pick a {knob} that divides it"
        )
    return total // parts


def shard_dims(model: ModelSpec, shape: Shape) -> ShardDims:
    """Per-rank sizes of `shape` for `model` (Megatron's divisibility rules, each a ConfigError)."""
    tp, cp = shape.tp, shape.cp
    seq = _divide(model.seq_length, cp, "seq_length", "cp")
    seq_sp = _divide(seq, tp, "seq_length / cp", "tp (sequence parallel)") if shape.sp else seq
    dims = dict(
        seq=seq,
        seq_sp=seq_sp,
        mbs=shape.mbs,
        hidden=model.hidden_size,
        heads=_divide(model.num_attention_heads, tp, "num_attention_heads", "tp"),
        groups=_divide(model.num_query_groups, tp, "num_query_groups", "tp"),
        head_dim=model.kv_channels,
        ffn=_divide(model.ffn_hidden_size, tp, "ffn_hidden_size", "tp"),
        vocab=model.vocab_size_for(tp) // tp,
    )
    if model.is_moe:
        moe_ffn = model.moe_ffn_hidden_size or model.ffn_hidden_size
        shared = model.moe_shared_expert_intermediate_size or 0
        dims.update(
            num_local_experts=_divide(model.num_experts, shape.ep, "num_experts", "ep"),
            expert_ffn=_divide(moe_ffn, shape.etp, "moe_ffn_hidden_size", "etp"),
            shared_ffn=_divide(shared, tp, "moe_shared_expert_intermediate_size", "tp")
            if shared
            else 0,
            # Each rank receives its etp group's tokens x topk assignments, times the load of the
            # busiest rank (expert_load), which sets the pace of the EP group.
            expert_tokens=math.ceil(
                seq_sp * shape.etp * model.moe_router_topk * expert_load(model)
            ),
            topk=model.moe_router_topk,
            num_experts=model.num_experts,
        )
    return ShardDims(**dims)


def expert_load(model: ModelSpec) -> float:
    """Tokens the busiest EP rank's experts compute / the balanced share.

    Dropless routing: the busiest rank sets the pace of its EP group (the all-to-all waits for
    it), `moe_load_imbalance` x the mean. A capacity factor c drops the tokens above c x the mean
    before the exchange (NVIDIA/Megatron-LM megatron/core/transformer/moe/README.md: "capacity =
    num_tokens_per_rank * topk * capacity_factor / num_experts"), so the load is at most c; with
    `--moe-pad-expert-input-to-capacity` (and ModelLink's legacy GShard MoE, which always pads:
    DeepSpeed sharded_moe top2gating) every expert computes exactly c.
    The imbalance is the rank's, whatever its number of local experts: measured production MoE
    training (106B to 671B models) has an inter-rank imbalance of 1.30 to 4.01 without a
    balancer (Wei et al., "UltraEP", arXiv:2606.04101, abstract), and an EP scan from 4 to 32
    ranks on H100s changes the max / mean token ratio by at most 5 %: "the straggler is
    intrinsic to the routing decision the model makes, not to how its experts land on ranks"
    (Ma et al., "DODOCO", arXiv:2605.20982, abstract). (An earlier rule divided the excess by
    the square root of the local experts, assuming independent expert loads; those sources
    contradict it.)
    The profile setting's default imbalance, 1.25, is an ASSUMPTION (below UltraEP's measured
    range; the largest training capacity factor of Switch Transformers, Fedus et al., 2022, the
    headroom an auxiliary-loss-balanced router is provisioned with). Megatron's MoE README warns
    that dropless routing is imbalanced."""
    capacity = model.moe_expert_capacity_factor
    if capacity and model.moe_pad_expert_input_to_capacity:
        return capacity
    busiest = model.moe_load_imbalance or 1.0
    return min(busiest, capacity) if capacity else busiest
