"""Running the reference sub-graphs on the meta device as the CPU would run them.

The analytic device traces each block on meta tensors (shapes, strides and dtypes, no data; run by
torch's meta kernels in C++), about four times faster than fake CPU tensors under
`FakeTensorMode`, which dispatches every op in Python. Meta and CPU differ where torch chooses by
device type; the two places the sub-graphs reach are made as the CPU makes them here:

* the attention backend: the composite SDPA asks the tensors' device type, and the meta device
  always answers the math path (aten/src/ATen/native/transformers/attention.cpp,
  `_fused_sdp_choice_meta`); `sdpa` asks the CPU's choice (`_fused_sdp_choice_cpp`, which reads
  only shapes, strides and flags) and calls its flash kernel as the composite does;
* the statistics of `native_layer_norm`: the CPU kernel returns mean and rstd in the input's dtype,
  the meta kernel in fp32 (torch/_refs/__init__.py `native_layer_norm`: cast back only for a
  "cpu" device); `CpuOnMeta` casts them.

tests/test_analytic_meta.py checks that fixture blocks trace to the same ops and bytes both ways.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def sdpa(q, k, v, *, is_causal: bool, dropout_p: float, scale: float, enable_gqa: bool):
    """`F.scaled_dot_product_attention` on meta tensors with the backend the CPU would pick."""
    choice = aten._fused_sdp_choice.default._op_dk(
        torch._C.DispatchKey.CPU,
        q,
        k,
        v,
        None,
        dropout_p,
        is_causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )
    if choice == SDPBackend.FLASH_ATTENTION.value:
        flash = aten._scaled_dot_product_flash_attention_for_cpu
        return flash(q, k, v, dropout_p, is_causal, scale=scale)[0]
    return F.scaled_dot_product_attention(
        q, k, v, is_causal=is_causal, dropout_p=dropout_p, scale=scale, enable_gqa=enable_gqa
    )


class CpuOnMeta(TorchDispatchMode):
    """Dispatch mode, entered below any tracing mode: meta results with the CPU kernels' dtypes."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is aten.native_layer_norm.default:
            dtype = args[0].dtype
            return out[0], out[1].to(dtype), out[2].to(dtype)
        return out
