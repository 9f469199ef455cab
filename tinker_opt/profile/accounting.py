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
    `torch.utils._pytree.tree_leaves` finds in them, without its per-node registry lookups (and
    without a call per number of a shape argument: this runs several times per traced op)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if not isinstance(value, (list, tuple)):
        return []
    leaves = []
    for item in value:
        if isinstance(item, torch.Tensor):
            leaves.append(item)
        elif isinstance(item, (list, tuple, dict)):
            leaves.extend(tensor_leaves(item))
    return leaves


_expired = torch.UntypedStorage._expired
"""The C check behind `StorageWeakRef.expired` (called on its `cdata`), without its two Python
wrappers: the tracker below asks it for every live storage after many ops."""


class EagerDispatchMode(TorchDispatchMode):
    """A dispatch mode that is never compiled: torch wraps every mode's `__torch_dispatch__` in
    `torch._disable_dynamo` unless `_should_skip_dynamo` says False (torch/utils/_python_dispatch.py,
    `TorchDispatchMode.__init_subclass__`). The wrapper costs a few microseconds an op and imports
    torch._dynamo (about a second) on the first op; the profile's modes run eagerly only."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


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


class LiveBytesTracker(EagerDispatchMode):
    """Dispatch mode: peak bytes of the storages created inside it that are still alive.

    Storages that existed before (weights, inputs) are the baseline and are not counted. Liveness is
    checked after an op through weak references, so a freed intermediate stops counting at once.
    `_total` is the bytes of the storages tracked, freed ones included until the next check: an
    upper bound of the live bytes. Only where it is above the peak can the live bytes be (the
    live set only grows by the op's new storages), so only then are the freed ones dropped and the
    peak compared with the exact sum: the same peak as a check after every op.
    """

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        """Storage address -> (a weak reference to the storage, its bytes)."""
        self.peak_bytes = 0
        self._total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # Views and in-place results share an input's storage: not a new allocation.
        inputs = {t.untyped_storage()._cdata for t in tensor_leaves((args, kwargs))}
        for leaf in tensor_leaves(out):
            storage = leaf.untyped_storage()
            key = storage._cdata
            known = self._live.get(key)
            if key in inputs or (known is not None and not _expired(known[0].cdata)):
                continue
            if known is not None:  # a freed storage not dropped yet, its address reused
                self._total -= known[1]
            nbytes = int(storage.nbytes())
            self._live[key] = (StorageWeakRef(storage), nbytes)
            self._total += nbytes
        if self._total > self.peak_bytes:
            freed = [k for k, (ref, _) in self._live.items() if _expired(ref.cdata)]
            for key in freed:
                self._total -= self._live.pop(key)[1]
            self.peak_bytes = max(self.peak_bytes, self._total)
        return out

    @property
    def live_bytes(self) -> int:
        return sum(n for ref, n in self._live.values() if not _expired(ref.cdata))
