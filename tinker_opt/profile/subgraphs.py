"""Reference sub-graphs: the per-rank shard of each block of a Megatron-style model.

`build_block(model, block, shape, device=..., dtype=...)` is a pure function from a ModelSpec, a
block name of blocks.csv (`embedding`, `layer`, `layer.dense`, `layer.moe`, `final_norm`, `head`)
and a per-rank Shape to a `Block`: the module, a factory of fresh inputs and the metadata the
measurements need. It allocates through `device` / `dtype` only, so it also runs under
the meta device or `FakeTensorMode` (the analytic device) where nothing is allocated.

Style follows the script's flags: normalization (LayerNorm | RMSNorm), swiglu, rope, flash
attention, dropouts, GQA, multi-head latent attention (`mla`), MoE. Sequence parallel shards the
tokens of norms, dropouts and
residuals (seq/tp); context parallel shards the sequence (seq/cp).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from tinker_opt.errors import ConfigError
from tinker_opt.profile.kernels import KernelSet, install_kernels
from tinker_opt.profile.layers import (
    MLP,
    Attention,
    bias_dropout_add,
    dropout,
    make_norm,
    new_weight,
)
from tinker_opt.profile.mla import LatentAttention
from tinker_opt.profile.moe import MoE
from tinker_opt.profile.shape import Shape, ShardDims, shard_dims
from tinker_opt.profile.tp_emulation import (
    GatherLinear,
    ScatterToSequence,
    VocabParallelCrossEntropy,
)
from tinker_opt.specs import ModelSpec

LAYER_BLOCKS = ("layer", "layer.dense", "layer.moe")
BLOCKS = ("embedding",) + LAYER_BLOCKS + ("final_norm", "head")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class Embedding(nn.Module):
    """Vocab-parallel word embedding (+ learned positions), [b, s] ids -> [s_sp, b, h], dropout."""

    def __init__(self, model: ModelSpec, dims: ShardDims, shape: Shape, *, device, dtype) -> None:
        super().__init__()
        self.word = new_weight(dims.vocab, dims.hidden, device=device, dtype=dtype)
        self.position = (
            new_weight(model.seq_length, dims.hidden, device=device, dtype=dtype)
            if model.position_embedding_type == "learned_absolute"
            else None
        )
        self.vocab_start = 0  # rank 0's shard; ids outside it are masked as on any rank
        self.scatter = shape.tp if shape.sp else 1
        self.p = model.hidden_dropout

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        outside = (ids < self.vocab_start) | (ids >= self.vocab_start + self.word.shape[0])
        local = (ids - self.vocab_start).masked_fill(outside, 0)
        out = torch.nn.functional.embedding(local, self.word).masked_fill(
            outside.unsqueeze(-1), 0.0
        )
        if self.position is not None:  # all-reduce of the word part happens before in Megatron
            out = out + self.position[: ids.shape[1]]
        out = out.transpose(0, 1).contiguous()  # [s, b, h]
        if self.scatter > 1:
            out = ScatterToSequence.apply(out, self.scatter)
        return dropout(out, self.p)


class DecoderLayer(nn.Module):
    """norm -> attention -> bias-dropout-add -> norm -> MLP or MoE -> bias-dropout-add."""

    def __init__(
        self, model: ModelSpec, dims: ShardDims, shape: Shape, *, moe: bool, device, dtype
    ) -> None:
        super().__init__()
        gather = shape.tp if shape.sp else 1
        self.norm1 = make_norm(model.normalization, dims.hidden, device=device, dtype=dtype)
        attention = LatentAttention if model.multi_latent_attention else Attention
        self.attention = attention(
            dims, model, gather=gather, cp=shape.cp, device=device, dtype=dtype
        )
        self.norm2 = make_norm(model.normalization, dims.hidden, device=device, dtype=dtype)
        self.mlp = (
            MoE(dims, model, tp=shape.tp, sp=shape.sp, etp=shape.etp, device=device, dtype=dtype)
            if moe
            else MLP(
                dims.hidden,
                dims.ffn,
                swiglu=model.swiglu,
                bias=model.add_bias_linear,
                gather=gather,
                device=device,
                dtype=dtype,
            )
        )
        self.p = model.hidden_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = bias_dropout_add(self.attention(self.norm1(x)), self.attention.proj.bias, x, self.p)
        bias = self.mlp.fc2.bias if isinstance(self.mlp, MLP) else None
        return bias_dropout_add(self.mlp(self.norm2(x)), bias, x, self.p)


class FinalNorm(nn.Module):
    def __init__(self, model: ModelSpec, dims: ShardDims, *, device, dtype) -> None:
        super().__init__()
        self.norm = make_norm(model.normalization, dims.hidden, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class Head(nn.Module):
    """Output layer (column parallel over the vocabulary) + vocab-parallel cross entropy, mean loss."""

    def __init__(self, dims: ShardDims, shape: Shape, *, device, dtype) -> None:
        super().__init__()
        self.weight = new_weight(dims.vocab, dims.hidden, device=device, dtype=dtype)
        self.gather = shape.tp if shape.sp else 1

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = GatherLinear.apply(x, self.weight, None, self.gather)  # [s, b, V/t]
        losses = VocabParallelCrossEntropy.apply(logits, labels.transpose(0, 1), 0)
        return losses.mean()


@dataclass(frozen=True)
class Block:
    """One block's per-rank sub-graph, ready to run: `module(*make_inputs())`."""

    name: str
    shape: Shape
    module: nn.Module
    make_inputs: Callable[[], tuple[torch.Tensor, ...]]
    """Fresh inputs; floating ones require grad (the gradient the previous block receives)."""
    expert_param_count: int
    attention: Attention | None
    """The attention whose core selective recompute recomputes; None for non-layer blocks."""
    kernels: dict[str, str] = field(default_factory=dict)
    """The implementation each fusable op of the block runs ({op: name}, kernels.py)."""

    @property
    def param_count(self) -> int:
        return sum(p.numel() for p in self.module.parameters())

    @property
    def weight_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.module.parameters())

    def constants(self) -> list[torch.Tensor]:
        """Parameters and buffers: not activations."""
        return list(self.module.parameters()) + list(self.module.buffers())


@contextmanager
def selective_recompute(block: Block, enabled: bool = True) -> Iterator[Block]:
    """Run the block with Megatron's selective (core attention) recompute switched on."""
    if block.attention is None:
        yield block
        return
    before = block.attention.recompute_core
    block.attention.recompute_core = enabled
    try:
        yield block
    finally:
        block.attention.recompute_core = before


def _hidden_input(dims: ShardDims, device, dtype) -> Callable[[], tuple[torch.Tensor, ...]]:
    def make() -> tuple[torch.Tensor, ...]:
        return (
            torch.randn(
                dims.seq_sp, dims.mbs, dims.hidden, device=device, dtype=dtype
            ).requires_grad_(),
        )

    return make


def _ids(dims: ShardDims, vocab_size: int, device) -> torch.Tensor:
    return torch.randint(0, vocab_size, (dims.mbs, dims.seq), device=device)


def _head_inputs(
    dims: ShardDims, model: ModelSpec, device, dtype
) -> Callable[[], tuple[torch.Tensor, ...]]:
    hidden = _hidden_input(dims, device, dtype)

    def make() -> tuple[torch.Tensor, ...]:
        return hidden() + (_ids(dims, model.vocab_size, device),)

    return make


def check_block(model: ModelSpec, block: str, shape: Shape) -> None:
    """Raise ConfigError when `block` cannot be built for `model` at `shape`."""
    if block not in BLOCKS:
        raise ConfigError(f"unknown block '{block}'; expected one of {list(BLOCKS)}")
    is_moe_block = block == "layer.moe" or (
        block == "layer" and model.is_moe and "dense" not in model.layer_kinds()
    )
    if (shape.ep > 1 or shape.etp > 1) and not is_moe_block:
        raise ConfigError(
            f"block '{block}' has no experts: build it with ep = etp = 1, got ep {shape.ep}, etp {shape.etp}"
        )


def build_block(
    model: ModelSpec,
    block: str,
    shape: Shape,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    kernels: KernelSet | None = None,
) -> Block:
    """The per-rank sub-graph of `block` at `shape`, with parameters in `dtype` (default: the model's
    precision), running the implementations of `kernels` (default: the reference ops)."""
    check_block(model, block, shape)
    dtype = dtype or DTYPES[model.precision]
    dims = shard_dims(model, shape)
    kw = dict(device=device, dtype=dtype)
    attention, experts = None, 0
    if block == "embedding":
        module = Embedding(model, dims, shape, **kw)
        make_inputs = lambda: (_ids(dims, model.vocab_size, device),)
    elif block in LAYER_BLOCKS:
        moe = block == "layer.moe" or (block == "layer" and model.is_moe)
        module = DecoderLayer(model, dims, shape, moe=moe, **kw)
        attention, make_inputs = module.attention, _hidden_input(dims, device, dtype)
        experts = module.mlp.expert_param_count() if moe else 0
    elif block == "final_norm":
        module, make_inputs = FinalNorm(model, dims, **kw), _hidden_input(dims, device, dtype)
    else:
        module, make_inputs = Head(dims, shape, **kw), _head_inputs(dims, model, device, dtype)
    module.train()
    return Block(
        name=block,
        shape=shape,
        module=module,
        make_inputs=make_inputs,
        expert_param_count=experts,
        attention=attention,
        kernels=install_kernels(module, kernels),
    )


def saved_activation_bytes(block: Block, *, selective: bool = False) -> int:
    """Bytes the block's forward saves for backward (each storage once, weights excluded).

    Runs one forward on fresh inputs; works under FakeTensorMode too."""
    from tinker_opt.profile.accounting import SavedTensorCounter

    inputs = block.make_inputs()
    with (
        selective_recompute(block, selective),
        SavedTensorCounter(exclude=block.constants()) as counter,
    ):
        block.module(*inputs)
    return counter.saved_bytes
