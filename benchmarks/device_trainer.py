"""The training side of benchmarks/validate_device.py: real steps of a whole model on one device.

Megatron's mixed-precision Adam (bf16 weights, fp32 `main_grad`, fp32 master weights and moments)
over either megatron-core's GPTModel with the Transformer Engine spec or tinker_opt's reference
blocks stacked into a model with the same kernels; `train_row` returns the median step time after
warm-up and the peak allocated memory.
"""

from __future__ import annotations

import functools
import gc
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tinker_opt.profile.device import Device
from tinker_opt.profile.kernels import KernelSet, requested_ops, select_kernels
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.subgraphs import build_block
from tinker_opt.specs import ModelSpec

MIB = 2**20


class MixedPrecisionAdam:
    """Megatron's mixed precision: bf16 weights, fp32 `main_grad` (gradients accumulated into it
    and the bf16 gradient freed), fp32 master weights stepped by Adam and copied back."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float = 1e-5) -> None:
        self.params = params
        self.master = [p.detach().float().clone() for p in params]
        for p in params:
            p.main_grad = torch.zeros_like(p, dtype=torch.float32)
            p.register_post_accumulate_grad_hook(self._accumulate)
        self.adam = torch.optim.Adam(self.master, lr=lr, betas=(0.9, 0.95))

    @staticmethod
    def _accumulate(p: torch.Tensor) -> None:
        p.main_grad.add_(p.grad)
        p.grad = None

    def step(self) -> None:
        for p, m in zip(self.params, self.master, strict=True):
            m.grad = p.main_grad
        self.adam.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.master, strict=True):
                p.copy_(m)
                p.main_grad.zero_()


class ReferenceModel(torch.nn.Module):
    """embedding -> layers -> final norm -> head + loss, from tinker_opt's reference blocks."""

    def __init__(
        self, model: ModelSpec, mbs: int, device: Device, kernels: KernelSet, recompute: str
    ) -> None:
        super().__init__()
        shape, kw = Shape(mbs=mbs), dict(device=device.torch_device, kernels=kernels)
        self.embedding = build_block(model, "embedding", shape, **kw).module
        blocks = [build_block(model, "layer", shape, **kw) for _ in range(model.num_layers)]
        self.layers = torch.nn.ModuleList(b.module for b in blocks)
        self.final_norm = build_block(model, "final_norm", shape, **kw).module
        self.head = build_block(model, "head", shape, **kw).module
        self.recompute = recompute
        for layer in self.layers:
            layer.attention.recompute_core = recompute == "selective"

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embedding(ids)
        for layer in self.layers:
            x = (
                torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)
                if self.recompute == "full"
                else layer(x)
            )
        return self.head(self.final_norm(x), labels)


def mcore_model(model: ModelSpec, recompute: str, device: Device) -> torch.nn.Module:
    """megatron-core's GPTModel with the Transformer Engine spec (flash attention, fused norms)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec

    from tinker_opt.profile.mcore_blocks import ensure_parallel_state, transformer_config

    ensure_parallel_state(device.kind)
    config = transformer_config(model, moe=False, dtype=torch.bfloat16, device_kind=device.kind)
    config = replace(
        config,
        num_layers=model.num_layers,
        use_cpu_initialization=device.kind == "cpu",
        recompute_granularity=None if recompute == "none" else recompute,
        recompute_method="uniform" if recompute == "full" else None,
        recompute_num_layers=1 if recompute == "full" else None,
    )
    gpt = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_with_transformer_engine_spec(),
        vocab_size=model.vocab_size,
        max_sequence_length=model.seq_length,
        position_embedding_type="rope",
        share_embeddings_and_output_weights=False,
    )
    return gpt.to(device=device.torch_device, dtype=torch.bfloat16)


def pick_trainer(requested: str, device: Device) -> str:
    if requested != "auto":
        return requested
    if device.kind != "cuda":
        return "reference"
    try:
        from megatron.core.models.gpt import gpt_layer_specs

        return "megatron-core" if getattr(gpt_layer_specs, "HAVE_TE", False) else "reference"
    except Exception:
        return "reference"


def train_row(
    model: ModelSpec,
    mbs: int,
    recompute: str,
    device: Device,
    steps: tuple[int, int],
    trainer: str,
    flags: tuple[str, ...],
) -> tuple[float, float]:
    """(median step ms after warm-up, peak allocated MiB) of `steps` = (warm-up, timed) steps;
    `flags` are the launch's fused-kernel flags the reference model's kernels come from."""
    warmup_steps, timed_steps = steps
    from tinker_opt.profile.accounting import LiveBytesTracker

    torch.manual_seed(0)
    gc.collect()  # the previous row's model and optimizer
    device.empty_cache()
    device.reset_peak_memory()
    ids = torch.randint(0, model.vocab_size, (mbs, model.seq_length), device=device.torch_device)
    if trainer == "megatron-core":
        net = mcore_model(model, recompute, device)
        positions = (
            torch.arange(model.seq_length, device=device.torch_device).unsqueeze(0).expand(mbs, -1)
        )
        loss_fn = functools.partial(_mcore_loss, net, ids, positions)
    else:
        kernels = select_kernels(requested_ops(flags, flash_attn=True), device.kind)
        net = ReferenceModel(model, mbs, device, kernels, recompute)
        loss_fn = functools.partial(net, ids, ids)
    optimizer = MixedPrecisionAdam([p for p in net.parameters() if p.requires_grad])
    times = []
    tracker = LiveBytesTracker() if device.kind == "cpu" else None
    for step in range(warmup_steps + timed_steps):
        if tracker is not None and step == warmup_steps:
            tracker.__enter__()
        device.synchronize()
        start = time.perf_counter()
        loss_fn().backward()
        optimizer.step()
        device.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
        if tracker is not None and step == warmup_steps:
            tracker.__exit__(None, None, None)
    if tracker is not None:  # the model's weights and states were alive before the tracked step
        state = sum(t.numel() * t.element_size() for t in _state_tensors(net, optimizer))
        peak = state + tracker.peak_bytes
    else:
        peak = device.peak_allocated_bytes()
    del loss_fn, net, optimizer
    return statistics.median(times[warmup_steps:]), peak / MIB


def _mcore_loss(net, ids, positions):
    """megatron-core GPTModel's loss of one micro-batch (labels = inputs)."""
    return net(ids, positions, None, labels=ids).float().mean()


def _state_tensors(net: torch.nn.Module, optimizer: MixedPrecisionAdam) -> list[torch.Tensor]:
    tensors = list(net.parameters()) + list(net.buffers()) + optimizer.master
    tensors += [p.main_grad for p in optimizer.params]
    tensors += [
        v
        for s in optimizer.adam.state.values()
        for v in s.values()
        if torch.is_tensor(v) and v.dim()
    ]
    return tensors
