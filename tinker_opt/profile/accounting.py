"""Memory accounting of a block: bytes saved for backward and the live-tensor peak.

`SavedTensorCounter` counts what autograd keeps for the backward pass, through
`torch.autograd.graph.saved_tensors_hooks`: every saved tensor's storage once (views of one buffer,
such as q, k and v split from one QKV projection, count once), parameters and buffers excluded
(they are weights, counted apart). 1-byte dropout masks count as 1 byte because the sub-graphs
use `torch.native_dropout`, which keeps a bool mask as the fused device kernels do. It touches only
tensor metadata, so it works on the meta device and under `FakeTensorMode` as well (the analytic
device relies on that).

`LiveBytesTracker` follows every storage that the ops create while it is active and records the
peak of the bytes still alive: the CPU's stand-in for the allocator statistics of npu / cuda.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode


def tensor_leaves(value: Any) -> list[torch.Tensor]:
    """The tensors in an op's arguments or results (tuples, lists and dicts, in order): what
    `torch.utils._pytree.tree_leaves` finds in them, without its per-node registry lookups."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in tensor_leaves(item)]
    return []


def storage_key(tensor: torch.Tensor) -> StorageWeakRef:
    """Identity of a tensor's storage (views of one buffer share it)."""
    return StorageWeakRef(tensor.untyped_storage())


def storage_nbytes(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage().nbytes())


class SavedTensorCounter:
    """Context manager: bytes of the distinct storages autograd saves for backward inside it.

    `exclude`: tensors whose storages are not activations (parameters, buffers, constants).
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()) -> None:
        self._excluded = {storage_key(t) for t in exclude}
        self._seen: dict[StorageWeakRef, int] = {}
        self._by_dtype: dict[str, int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key = storage_key(tensor)
        if key not in self._excluded and key not in self._seen:
            nbytes = storage_nbytes(tensor)
            self._seen[key] = nbytes
            name = str(tensor.dtype).removeprefix("torch.")
            self._by_dtype[name] = self._by_dtype.get(name, 0) + nbytes
        return tensor

    @staticmethod
    def _unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def __enter__(self) -> SavedTensorCounter:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)

    @property
    def saved_bytes(self) -> int:
        """Bytes of the distinct saved storages."""
        return sum(self._seen.values())

    @property
    def num_storages(self) -> int:
        return len(self._seen)

    @property
    def bytes_by_dtype(self) -> dict[str, int]:
        return dict(self._by_dtype)


class LiveBytesTracker(TorchDispatchMode):
    """Dispatch mode: peak bytes of the storages created inside it that are still alive.

    Storages that existed before (weights, inputs) are the baseline and are not counted. Liveness is
    checked after every op through weak references, so a freed intermediate stops counting at once.
    """

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        """Storage address -> (a weak reference to the storage, its bytes)."""
        self.peak_bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # Views and in-place results share an input's storage: not a new allocation.
        inputs = {t.untyped_storage()._cdata for t in tensor_leaves((args, kwargs))}
        for leaf in tensor_leaves(out):
            storage = leaf.untyped_storage()
            key = storage._cdata
            if key not in self._live and key not in inputs:
                self._live[key] = (StorageWeakRef(storage), int(storage.nbytes()))
        self._live = {k: v for k, v in self._live.items() if not v[0].expired()}
        self.peak_bytes = max(self.peak_bytes, sum(n for _, n in self._live.values()))
        return out

    @property
    def live_bytes(self) -> int:
        return sum(n for ref, n in self._live.values() if not ref.expired())
