"""What a megatron-core local-spec layer needs to run on the CPU with the device's saved bytes.

Found for megatron-core 0.16.1 by running a dense (GPT), a GQA + rope + SwiGLU (LLaMA) and a MoE
layer forward and backward (profile/mcore_blocks.py builds them; `cpu_redirects` is active around
their construction and every forward):

* three CUDA-only allocations, redirected to the CPU: the default causal mask
  (`megatron/core/transformer/utils.py`, `get_default_causal_mask`, `device="cuda"`), the global
  memory buffer that the local `DotProductAttention` uses for its baddbmm output
  (`megatron/core/utils.py`, `GlobalMemoryBuffer.get_tensor`), the model-parallel RNG tracker that
  forks CUDA generator states around the attention dropout (`megatron/core/tensor_parallel/random.py`:
  a tracker whose `fork` keeps the CPU generator);
* the router's move of its weight to the CUDA device (`megatron/core/transformer/moe/router.py`,
  `Router.gating`): the same gating without the move;
* device semantics rather than allocations, so that saved bytes are the device's: `F.dropout`
  keeps a 1-byte mask as the device kernels do (torch's CPU dropout keeps a 4-byte one), and the
  rotary embedding keeps only its angles as Transformer Engine's fused kernel does
  (`transformer_engine/pytorch/attention/rope.py`, `FusedRoPEFunc`: `save_for_backward(freqs,
  cu_seqlens)`), which Megatron-LM runs by default (`--apply-rope-fusion`; megatron-core calls it
  from `models/common/embeddings/rope_utils.py`, `apply_rotary_pos_emb`), where the unfused
  `_apply_rotary_pos_emb_bshd` that runs without Transformer Engine keeps a cos and a sin table per
  call. (The softmax's 16-bit output is set in the config: `attention_softmax_in_fp32` off.)
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager, nullcontext

import torch
import torch.nn.functional as F


class _CpuRngTracker:
    """Stands in for CudaRNGStatesTracker on the CPU: forks keep the CPU generator."""

    def fork(self, name: str = "model-parallel-rng"):
        return nullcontext()

    def add(self, name: str, seed: int) -> None:
        pass

    def get_states(self) -> dict:
        return {}

    def set_states(self, states: dict) -> None:
        pass

    def is_initialized(self) -> bool:
        return True


class _FusedRope(torch.autograd.Function):
    """megatron-core's unfused rotary embedding computed as it is, keeping only `freqs` for the
    backward as Transformer Engine's FusedRoPEFunc (module docstring). The rotation is linear in
    its input, so the backward is the vector-Jacobian product of the same function at zero."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, freqs: torch.Tensor, unfused: Callable, kwargs: dict):
        ctx.save_for_backward(freqs)
        ctx.unfused, ctx.kwargs = unfused, kwargs
        return unfused(t, freqs, **kwargs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (freqs,) = ctx.saved_tensors
        with torch.enable_grad():
            x = torch.zeros_like(grad, requires_grad=True)
            (grad_t,) = torch.autograd.grad(ctx.unfused(x, freqs, **ctx.kwargs), x, grad)
        return grad_t, None, None, None


def _replacements(device: torch.device) -> list[tuple[object, str, object]]:
    """(owner, attribute, stand-in) of every redirect in the module docstring."""
    from megatron.core import parallel_state, utils
    from megatron.core.fusions import fused_softmax
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.tensor_parallel import random
    from megatron.core.transformer.moe import router

    def gating(self, x):  # Router.gating without its move of the weights to the CUDA device
        dtype = {"fp32": torch.float32, "fp64": torch.float64}.get(
            self.config.moe_router_dtype, x.dtype
        )
        return router.router_gating_linear(x, self.weight, self.bias, dtype)

    def fused_dropout(x, p=0.5, training=True, inplace=False):
        return torch.native_dropout(x, p, True)[0] if training and p > 0 else x

    def causal_mask(sq: int) -> torch.Tensor:
        return torch.triu(torch.ones(sq, sq, device=device), diagonal=1).bool()

    def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):
        numel = 1
        for size in tensor_shape:
            numel *= size
        key = (name, dtype)
        if key not in self.buffer or self.buffer[key].numel() < numel:
            self.buffer[key] = torch.empty(numel, dtype=dtype, device=device, requires_grad=False)
        return self.buffer[key][:numel].view(*tensor_shape)

    unfused_rope = rope_utils._apply_rotary_pos_emb_bshd

    def fused_rope(t, freqs, **kwargs):
        return _FusedRope.apply(t, freqs, unfused_rope, kwargs)

    buffer = parallel_state._GLOBAL_MEMORY_BUFFER or utils.GlobalMemoryBuffer()
    return [
        (fused_softmax, "get_default_causal_mask", causal_mask),
        (utils.GlobalMemoryBuffer, "get_tensor", get_tensor),
        (random, "_CUDA_RNG_STATE_TRACKER", _CpuRngTracker()),
        (random, "_CUDA_RNG_STATE_TRACKER_INITIALIZED", True),
        (parallel_state, "_GLOBAL_MEMORY_BUFFER", buffer),  # before initialize_model_parallel
        (F, "dropout", fused_dropout),
        (router.Router, "gating", gating),
        (rope_utils, "_apply_rotary_pos_emb_bshd", fused_rope),
    ]


@contextmanager
def cpu_redirects(device: torch.device):
    """The redirects of the module docstring, active inside the context and undone after it."""
    replacements = _replacements(device)
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in replacements]
    for owner, name, value in replacements:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
