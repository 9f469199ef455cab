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

from tinker_opt.profile.accounting import EagerDispatchMode

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


Spec = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]
"""A fresh output tensor's shape, strides and dtype."""
_MISSING = object()
_PLAIN = (
    int,
    float,
    bool,
    str,
    type(None),
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)
_FRESH_OUTPUTS: dict[tuple, tuple[type, tuple[Spec, ...]] | None] = {}
"""Memo of the meta kernels: op and inputs' metadata -> the fresh outputs' specs (None: the op
returns a view, an input or a non-tensor, and is always run)."""


_PLAIN_TYPES = frozenset(_PLAIN)


def _key(value):
    """A hashable key of an op argument's metadata (tensors by shape, strides, offset, dtype)."""
    kind = type(value)
    if kind in _PLAIN_TYPES:  # the numbers of a shape argument: the common case, first
        return (kind, value)
    if isinstance(value, torch.Tensor):
        return (value.shape, value.stride(), value.storage_offset(), value.dtype, value.device)
    if isinstance(value, (list, tuple)):
        return (kind, *map(_key, value))
    if isinstance(value, _PLAIN):
        return (kind, value)
    raise TypeError(kind)


def _storage_bytes(spec: Spec) -> int:
    shape, stride, dtype = spec
    if 0 in shape:
        return 0
    return (1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))) * dtype.itemsize


def _fresh_specs(out, args, kwargs) -> tuple[type, tuple[Spec, ...]] | None:
    """The outputs' specs when every output is a new tensor that `empty_strided` reproduces."""
    outputs = out if isinstance(out, (list, tuple)) else (out,)
    if not all(isinstance(t, torch.Tensor) for t in outputs):
        return None
    inputs = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
    seen = {t.untyped_storage()._cdata for t in inputs}
    specs = []
    for t in outputs:
        spec = (tuple(t.shape), t.stride(), t.dtype)
        storage = t.untyped_storage()
        if storage._cdata in seen or t.storage_offset() or storage.nbytes() != _storage_bytes(spec):
            return None
        seen.add(storage._cdata)
        specs.append(spec)
    return type(out), tuple(specs)


def _rebuild(kind: type, specs: tuple[Spec, ...]):
    made = [
        torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        for shape, stride, dtype in specs
    ]
    return made[0] if kind is torch.Tensor else kind(made)


class CpuOnMeta(EagerDispatchMode):
    """Dispatch mode, entered below any tracing mode: meta results with the CPU kernels' dtypes.

    A meta kernel is a pure function of its inputs' metadata; many are Python (torch._refs), some
    hundred microseconds an op. Outputs that are new tensors are memoised by op and inputs'
    metadata and made again with `empty_strided` (same shape, strides, dtype and storage size),
    so a shape traced once (in another pass, another block) costs microseconds the next time."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            key = (func, _key(args), _key(tuple(kwargs.items())))
        except TypeError:
            return self._run(func, args, kwargs)
        known = _FRESH_OUTPUTS.get(key, _MISSING)
        if known is not _MISSING and known is not None:
            return _rebuild(*known)
        out = self._run(func, args, kwargs)
        if known is _MISSING:
            _FRESH_OUTPUTS[key] = _fresh_specs(out, args, kwargs)
        return out

    @staticmethod
    def _run(func, args, kwargs):
        out = func(*args, **kwargs)
        if func is aten.native_layer_norm.default:
            dtype = args[0].dtype
            return out[0], out[1].to(dtype), out[2].to(dtype)
        return out
