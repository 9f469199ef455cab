"""Trace the aten ops a sub-graph runs, with each op's FLOPs and bytes moved, without running it.

The analytic device (analytic.py) and calibration (calibrate.py) time a block from this trace.
Run the block's forward and backward inside `trace_ops()`, with its tensors created under
the meta device or `torch._subclasses.FakeTensorMode` (shapes and dtypes only, no memory, no arithmetic), so a
175B-parameter layer traces in milliseconds.

Per op:
* FLOPs from `torch.utils.flop_counter.FlopCounterMode`'s formulas (2 FLOPs per multiply-add),
  extended here for the CPU attention kernel that the reference sub-graphs dispatch to under a
  CPU fake device (`_scaled_dot_product_flash_attention_for_cpu` and its backward).
* Bytes moved: the sizes of the tensor inputs and outputs, counting an expanded (stride-0)
  tensor by its storage, and nothing for views and allocations (they move no data). This is the
  unfused traffic; fused device kernels move less, which the memory-efficiency curve absorbs.
* The modules it ran in (torch.utils.module_tracker.ModuleTracker), so a region such as the core
  attention can be timed on its own (selective recompute).
* Whether it ran inside `unfused_kernels()`: a framework's eager fallback whose ops the device
  runs one kernel each, never fused with their neighbours (op_timing.py; the unfused softmax,
  profile/softmax.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count
from torch.utils.module_tracker import ModuleTracker

from tinker_opt.profile.accounting import EagerDispatchMode, tensor_leaves

aten = torch.ops.aten
PHASES = ("fwd", "bwd")
PRECISION_OF_DTYPE = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.float64: "fp32",
}
NO_TRAFFIC_OPS = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "detach",
        "alias",
        "lift_fresh",
        "_local_scalar_dense",
        "set_",
        "resize_",
        "_has_compatible_shallow_copy_type",
        "_unsafe_view",
    }
)
"""Ops that allocate or re-label memory without reading or writing tensor data."""


def _causal_fraction(is_causal: bool) -> float:
    # A causal kernel skips the score blocks above the diagonal: about half the work
    # (Dao, "FlashAttention-2", 2023, section 3.1.1).
    return 0.5 if is_causal else 1.0


def _cpu_sdpa_flop(
    query, key, value, dropout_p=0.0, is_causal=False, *args, out_shape=None, **kwargs
) -> int:
    """FLOPs the CPU flash-attention kernel executes: QK^T and PV, halved under a causal mask."""
    return int(sdpa_flop_count(query, key, value) * _causal_fraction(is_causal))


def _cpu_sdpa_backward_flop(
    grad_out,
    query,
    key,
    value,
    out,
    logsumexp,
    dropout_p=0.0,
    is_causal=False,
    *args,
    out_shape=None,
    **kwargs,
) -> int:
    """FLOPs of the CPU flash-attention backward (five matmuls of the score size), causal halved."""
    return int(sdpa_backward_flop_count(grad_out, query, key, value) * _causal_fraction(is_causal))


def _shape_formula(formula):
    """Wrap a formula written on shapes the way flop_counter.register_flop_formula does."""

    def wrapped(*args, out_val=None, **kwargs):
        to_shape = lambda x: x.shape if isinstance(x, torch.Tensor) else x
        args = [to_shape(a) for a in args]
        kwargs = {k: to_shape(v) for k, v in kwargs.items()}
        return formula(*args, **kwargs)

    return wrapped


EXTRA_FLOP_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _shape_formula(_cpu_sdpa_flop),
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _shape_formula(
        _cpu_sdpa_backward_flop
    ),
}
"""Formulas FlopCounterMode lacks, keyed like its registry (by op overload packet)."""
FLOP_FORMULAS = {**flop_registry, **EXTRA_FLOP_FORMULAS}
"""FlopCounterMode's formulas (torch.utils.flop_counter.flop_registry) and ours, looked up
directly: the recorder counts each op itself, without a FlopCounterMode in the dispatch stack."""


@dataclass(frozen=True)
class OpRecord:
    """One aten op as the block ran it."""

    name: str
    phase: str
    """`fwd` or `bwd`."""
    flops: int
    bytes_moved: int
    precision: str
    """`bf16`, `fp16` or `fp32`: the dtype of the op's first floating-point input."""
    modules: frozenset[str] = frozenset()
    """Fully qualified names of the modules the op ran in (ModuleTracker's parents)."""
    reads: tuple[tuple[int, int], ...] = ()
    """(storage id, bytes) of each tensor input: ids are unique within one trace."""
    writes: tuple[tuple[int, int], ...] = ()
    """(storage id, bytes) of each tensor output (an in-place op writes its input's storage)."""
    unfused: bool = False
    """Ran inside `unfused_kernels()`: its own kernel on the device, not fused with neighbours."""


_UNFUSED: ContextVar[bool] = ContextVar("unfused_kernels", default=False)


@contextlib.contextmanager
def unfused_kernels() -> Iterator[None]:
    """Ops run inside are recorded `unfused`: the framework issues them as separate eager
    kernels (a fallback such as Megatron's unfused softmax), so the analytic device times each
    alone even where the hardware description fuses elementwise runs (op_timing._runs)."""
    token = _UNFUSED.set(True)
    try:
        yield
    finally:
        _UNFUSED.reset(token)


@dataclass
class OpTrace:
    """The ops of one traced run, in order."""

    records: list[OpRecord] = field(default_factory=list)
    _storage_ids: dict[int, tuple[StorageWeakRef, int]] = field(default_factory=dict, repr=False)
    """Storage address -> (a weak reference to the storage, its id). The storages are not kept
    alive (a memory pass may run in the same trace, measure.memory_pass): a new storage at a
    freed one's address is told apart by the expired reference and gets a new id."""
    _num_ids: int = 0

    def storage_id(self, tensor: torch.Tensor) -> int:
        storage = tensor.untyped_storage()
        key = storage._cdata
        known = self._storage_ids.get(key)
        if known is None or known[0].expired():
            known = (StorageWeakRef(storage), self._num_ids)
            self._storage_ids[key] = known
            self._num_ids += 1
        return known[1]

    def reserve(self, tensors: Any) -> frozenset[int]:
        """Ids for these tensors' storages before tracing (a block's parameters: the FP8 rewrite,
        profile/fp8.py, tells weights from activations by them)."""
        return frozenset(self.storage_id(t) for t in tensors)

    def release(self) -> None:
        """Forget the storages seen (a later trace numbers from 0 again)."""
        self._storage_ids.clear()
        self._num_ids = 0

    def of_phase(self, phase: str) -> list[OpRecord]:
        return [r for r in self.records if r.phase == phase]

    def total_flops(self, phase: str | None = None) -> int:
        return sum(r.flops for r in self.records if phase is None or r.phase == phase)


def _tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel touches for one tensor: its elements, but no more than its storage holds."""
    logical = t.numel() * t.element_size()
    try:
        return min(logical, t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return logical


def _moves_data(func: Any) -> bool:
    return not (func.is_view or func.overloadpacket.__name__ in NO_TRAFFIC_OPS)


def _touched(trace: OpTrace, values: Any) -> tuple[tuple[int, int], ...]:
    return tuple((trace.storage_id(x), _tensor_bytes(x)) for x in tensor_leaves(values))


def _op_precision(args: Any) -> str:
    for x in tensor_leaves(args):
        if x.is_floating_point():
            return PRECISION_OF_DTYPE.get(x.dtype, "fp32")
    return "fp32"


class _OpRecorder(EagerDispatchMode):
    """Records every aten op that reaches it, then passes it on unchanged."""

    def __init__(self, modules: ModuleTracker, trace: OpTrace) -> None:
        super().__init__()
        self.modules = modules
        self.trace = trace
        self.phase = "fwd"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace != "aten":  # prim.device and other metadata queries run no kernel
            return out
        formula = FLOP_FORMULAS.get(func.overloadpacket)
        flops = int(formula(*args, **kwargs, out_val=out)) if formula else 0
        moves = _moves_data(func)
        reads = _touched(self.trace, (args, kwargs)) if moves else ()
        writes = _touched(self.trace, out) if moves else ()
        self.trace.records.append(
            OpRecord(
                name=str(func.overloadpacket.__name__),
                phase=self.phase,
                flops=flops,
                bytes_moved=sum(b for _, b in reads + writes),
                precision=_op_precision(args),
                modules=frozenset(self.modules.parents),
                reads=reads,
                writes=writes,
                unfused=_UNFUSED.get(),
            )
        )
        return out


class OpTracer:
    """Handle inside `trace_ops()`: switch the phase label between forward and backward."""

    def __init__(self, recorder: _OpRecorder) -> None:
        self._recorder = recorder

    @contextlib.contextmanager
    def phase(self, phase: str) -> Iterator[None]:
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        previous, self._recorder.phase = self._recorder.phase, phase
        try:
            yield
        finally:
            self._recorder.phase = previous


@contextlib.contextmanager
def trace_ops(trace: OpTrace) -> Iterator[OpTracer]:
    """Record the ops run inside the block into `trace` (on meta tensors, or inside FakeTensorMode)."""
    try:
        with ModuleTracker() as modules, _OpRecorder(modules, trace) as recorder:
            yield OpTracer(recorder)
    finally:
        trace.release()
