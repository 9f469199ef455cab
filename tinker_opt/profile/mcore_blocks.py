"""Megatron-core's own decoder layer as a block source (`tinker-opt profile --blocks megatron-core`).

Builds `megatron.core.transformer.TransformerLayer` from the script's arguments with the local
spec (`megatron/core/models/gpt/gpt_layer_specs.py`, `get_gpt_layer_local_spec`; the Transformer
Engine spec `get_gpt_layer_with_transformer_engine_spec` on CUDA when transformer_engine imports)
and measures it like a reference block. Embedding, final norm and head stay the reference blocks.

Megatron-core runs one shard per process inside real tensor / context / expert parallel groups, so
a layer is built here for tp = cp = ep = etp = 1 only; other shapes use the reference layer and
meta.json says so (`source`). What a local-spec layer needs on the CPU, found for megatron-core
0.16.1 by running a dense (GPT), a GQA + rope + SwiGLU (LLaMA) and a MoE layer forward and backward:

* CUDA-only allocations and the device's saved-tensor semantics, redirected on the CPU
  (profile/mcore_cpu.py, `cpu_redirects`);
* the all-to-all token dispatcher creates a `torch.cuda.Stream`: on the CPU the all-gather
  dispatcher runs instead (identical with ep = tp = 1: no tokens leave the rank);
* `te_general_gemm`, undefined without Transformer Engine in `transformer/moe/moe_utils.py`
  (every MoE forward would raise NameError): defined as None;
* the softmax keeps its 16-bit output as the fused masked-softmax kernel does
  (`attention_softmax_in_fp32` off on the CPU).

Rotary positions are computed as `GPTModel` does (its `RotaryEmbedding.get_freqs_non_repeated`,
concatenated, [s, 1, 1, d]) without its move to the CUDA device. Selective recompute is not
measured for these layers (mcore fixes it at construction): their selective columns repeat the
full-save figures.
"""

from __future__ import annotations

import socket
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tinker_opt.errors import ConfigError
from tinker_opt.profile.kernels import KernelSet
from tinker_opt.profile.mcore_cpu import cpu_redirects
from tinker_opt.profile.shape import Shape
from tinker_opt.profile.subgraphs import (
    DTYPES,
    LAYER_BLOCKS,
    Block,
    _hidden_input,
    shard_dims,
)
from tinker_opt.profile.subgraphs import (
    build_block as build_reference,
)
from tinker_opt.specs import ModelSpec

MEGATRON_PIN = "megatron-core==0.16.1"
REFERENCE_NOTE = "reference (megatron-core layers need tp = cp = ep = etp = 1 in one process)"


def megatron_version() -> str | None:
    """The installed megatron-core version, None when it does not import."""
    try:
        import importlib.metadata

        import megatron.core  # noqa: F401

        return importlib.metadata.version("megatron-core")
    except Exception:
        return None


def require_megatron() -> str:
    version = megatron_version()
    if version is None:
        raise ConfigError(
            f"--blocks megatron-core needs megatron-core: pip install '{MEGATRON_PIN}' "
            "(or the package's [megatron] extra; Python < 3.12)"
        )
    return version


def supports(block: str, shape: Shape) -> bool:
    """Whether the block is built from megatron-core at this shape (a layer of one unsharded rank)."""
    return block in LAYER_BLOCKS and (shape.tp, shape.cp, shape.ep, shape.etp) == (1, 1, 1, 1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_parallel_state(device_kind: str, seed: int = 1234) -> None:
    """A one-process world (gloo on the CPU, nccl / hccl otherwise) and megatron's tp = pp = 1 groups."""
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel

    if not dist.is_initialized():
        backend = {"cuda": "nccl", "npu": "hccl"}.get(device_kind, "gloo")
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
        )
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
        if device_kind == "cuda":
            tensor_parallel.model_parallel_cuda_manual_seed(seed)


def transformer_config(model: ModelSpec, *, moe: bool, dtype: torch.dtype, device_kind: str):
    """megatron-core's TransformerConfig for one layer of `model` (the script's arguments, tp = 1)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    rms = model.normalization == "RMSNorm"
    kw: dict[str, Any] = dict(
        num_layers=1,
        hidden_size=model.hidden_size,
        ffn_hidden_size=model.ffn_hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.num_query_groups,
        kv_channels=model.kv_channels,
        normalization=model.normalization,
        layernorm_epsilon=1e-6 if rms else 1e-5,  # the reference blocks' epsilons (layers.py)
        gated_linear_unit=model.swiglu,
        activation_func=F.silu if model.swiglu else F.gelu,
        add_bias_linear=model.add_bias_linear,
        hidden_dropout=model.hidden_dropout,
        attention_dropout=model.attention_dropout,
        params_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu_initialization=True,
        masked_softmax_fusion=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        # The device's fused masked softmax keeps its 16-bit output; the unfused CPU path would keep fp32.
        attention_softmax_in_fp32=device_kind != "cpu",
        bias_activation_fusion=model.swiglu,  # Megatron's default --bias-swiglu-fusion (an autograd function)
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
    )
    if moe:
        kw.update(
            num_moe_experts=model.num_experts,
            moe_router_topk=model.moe_router_topk,
            moe_ffn_hidden_size=model.moe_ffn_hidden_size or model.ffn_hidden_size,
            moe_shared_expert_intermediate_size=model.moe_shared_expert_intermediate_size,
            moe_token_dispatcher_type="alltoall" if device_kind != "cpu" else "allgather",
            moe_router_pre_softmax=True,
            moe_aux_loss_coeff=0.0,
            moe_router_load_balancing_type="none",
            moe_grouped_gemm=False,
        )
    return TransformerConfig(**kw)


def layer_spec(model: ModelSpec, *, moe: bool, device_kind: str):
    """The Transformer Engine spec on CUDA when TE imports, else the local (pure megatron-core) spec."""
    from megatron.core.models.gpt import gpt_layer_specs as specs

    experts = model.num_experts if moe else None
    if device_kind == "cuda" and getattr(specs, "HAVE_TE", False):
        return specs.get_gpt_layer_with_transformer_engine_spec(
            num_experts=experts
        ), "transformer-engine spec"
    return specs.get_gpt_layer_local_spec(
        num_experts=experts, normalization=model.normalization
    ), "local spec"


class McoreLayer(nn.Module):
    """A TransformerLayer with the rotary table GPTModel would pass it: [s, b, h] -> [s, b, h]."""

    def __init__(self, layer: nn.Module, rotary: torch.Tensor | None, redirects) -> None:
        super().__init__()
        self.layer = layer
        self.redirects = redirects
        self.register_buffer("rotary", rotary, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.redirects():
            out, _ = self.layer(x, attention_mask=None, rotary_pos_emb=self.rotary)
        return out


def _rotary(model: ModelSpec, seq: int, device) -> torch.Tensor | None:
    if model.position_embedding_type != "rope":
        return None
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    freqs = RotaryEmbedding(
        kv_channels=model.kv_channels, rotary_percent=1.0, use_cpu_initialization=True
    ).get_freqs_non_repeated(seq)
    return torch.cat((freqs, freqs), dim=-1)[:, None, None, :].to(device)


def _patch_missing_te_gemm() -> None:
    """megatron-core 0.16.1's router gating (`transformer/moe/moe_utils.py`,
    RouterGatingLinearFunction) reads `te_general_gemm`, which is defined only when Transformer
    Engine imports: without TE every MoE forward raises NameError. Define it as None (its own
    non-TE branch then runs)."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def build_mcore_layer(
    model: ModelSpec, *, moe: bool, seq: int, device, dtype
) -> tuple[McoreLayer, str]:
    """One megatron-core decoder layer of `model` (tp = 1) on `device`, and the spec's name."""
    from megatron.core.transformer.spec_utils import build_module

    _patch_missing_te_gemm()

    device = torch.device(device)
    ensure_parallel_state(device.type)
    redirects = (lambda: cpu_redirects(device)) if device.type == "cpu" else nullcontext
    spec, spec_name = layer_spec(model, moe=moe, device_kind=device.type)
    with redirects():
        layer = build_module(
            spec,
            config=transformer_config(model, moe=moe, dtype=dtype, device_kind=device.type),
            layer_number=1,
        )
    layer = layer.to(
        device=device, dtype=dtype
    )  # as Megatron's Float16Module casts the whole model
    return McoreLayer(layer, _rotary(model, seq, device), redirects), spec_name


def build_block(
    model: ModelSpec,
    block: str,
    shape: Shape,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    kernels: KernelSet | None = None,
) -> Block:
    """`subgraphs.build_block` with megatron-core's layer where `supports` says so."""
    version = require_megatron()
    if not supports(block, shape):
        reference = build_reference(
            model, block, shape, device=device, dtype=dtype, kernels=kernels
        )
        return Block(
            name=reference.name,
            shape=shape,
            module=reference.module,
            make_inputs=reference.make_inputs,
            expert_param_count=reference.expert_param_count,
            attention=reference.attention,
            kernels=source_record(block, shape, reference.kernels, torch.device(device).type),
        )
    dtype = dtype or DTYPES[model.precision]
    moe = block == "layer.moe" or (block == "layer" and model.is_moe)
    dims = shard_dims(model, shape)
    module, spec_name = build_mcore_layer(model, moe=moe, seq=dims.seq, device=device, dtype=dtype)
    module.train()
    experts = sum(p.numel() for n, p in module.named_parameters() if ".experts." in n)
    return Block(
        name=block,
        shape=shape,
        module=module,
        make_inputs=_hidden_input(dims, device, dtype),
        expert_param_count=experts,
        attention=None,
        kernels={"source": f"megatron-core {version} {spec_name}"},
    )


def source_record(
    block: str, shape: Shape, reference_kernels: dict[str, str], device_kind: str
) -> dict[str, str]:
    """meta.json's record of a block under `--blocks megatron-core`: the megatron-core spec for
    the layers it builds, the reference kernels (and why) for the layers it cannot, as they are else."""
    if block not in LAYER_BLOCKS:
        return reference_kernels
    if not supports(block, shape):
        return {**reference_kernels, "source": REFERENCE_NOTE}
    from megatron.core.models.gpt import gpt_layer_specs as specs

    spec_name = (
        "transformer-engine spec"
        if device_kind == "cuda" and getattr(specs, "HAVE_TE", False)
        else "local spec"
    )
    return {"source": f"megatron-core {megatron_version()} {spec_name}"}
