"""Split coefficients: the cost of one outer configuration as integers per layer and per stage.

For one outer configuration (a Strategy without layer split and recompute count) every modelled
quantity is an integer: nanoseconds for times, bytes for memory. The iteration time of a split is
then an exact integer function of the per-stage layer counts n_s and the recompute count r, which
`CostModel.evaluate`, the exact split, the enumeration and the CP-SAT / MILP models all compute
from these same integers (ARCHITECTURE.md, "One cost model, one truth").

Axes: `layer_*` arrays are indexed by layer position 0..L-1 (a mixed dense / MoE stack has
different values per position); `stage_*` arrays by pipeline rank 0..p-1.

Pipeline (Narayanan et al. 2021, Megatron-LM): with v virtual chunks per rank and m micro-batches,
    v * T = sum_s t_s + (m*v - 1) * max_s t_s + v * max_s tail_s
which is 1F1B's `sum + (m - 1) * max` for v = 1 and gives the interleaved bubble (p - 1) / v * t for
balanced stages; `tail_s` is the stage's exposed gradient synchronisation plus its optimizer step.
The formula is written once, in costs/pipeline.py, for this module and every solver.
DualPipeV (two chunks per rank in a V) has its own bubble there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinker_opt.choices import Recompute, RecomputeMethod, Schedule
from tinker_opt.costs.pipeline import pipeline_x_v
from tinker_opt.costs.recompute import chunk_plan
from tinker_opt.costs.split_rules import SplitRules
from tinker_opt.layer_stack import num_chunks, rank_chunks
from tinker_opt.strategy import Strategy


@dataclass(eq=False)
class Memo:
    """Values derived from one SplitCoefficients, each computed on first use by the module that
    owns it: the coefficients stay frozen and this is their one mutable part."""

    prefix: dict[str, list[int]] | None = None
    """Prefix sums of the layer arrays (`_prefix_sums` below)."""
    scalars: Any = None
    """Scalar coefficients of a uniform stack (layer_split.Scalars.of)."""
    recompute_bounds: dict[int, int] | None = None
    """{r: lower bound} (bounds.recompute_bounds)."""
    range_costs: tuple[int, Any] | None = None
    """(r, tables) of the last r tabulated (mixed_split.range_costs)."""
    mixed_terms: dict[int, Any] = field(default_factory=dict)
    """Per-r bound terms of a mixed stack (mixed_split.bound_terms_for_r)."""
    even_split: tuple[Any] | None = None
    """(the even split of a virtual pipeline, or None when it does not fit,) (stacks.Stack)."""
    form_split: tuple[Any] | None = None
    """(the exact split of a mixed stack under a layer form, or None,) (stacks.MixedStack)."""
    prefix_arrays: dict[str, Any] | None = None
    """Prefix sums of the layer arrays as numpy arrays (solve/virtual_split.py)."""
    stack: Any = None
    """The solvers' view of these coefficients (solve/stacks.stack_of), made once: the presolve's
    feasibility, its bound and the walk's split each ask for it."""


@dataclass(frozen=True, eq=False)
class SplitCoefficients:
    """Integer costs of one outer configuration (ns and bytes), per layer position and per stage."""

    outer: Strategy
    num_layers: int
    num_stages: int
    vpp: int
    num_microbatches: int
    layer_time_ns: np.ndarray
    """Forward + backward of one layer for one micro-batch, with its TP / CP / EP collectives
    (and the selective recompute when selective)."""
    layer_comm_ns: np.ndarray
    """The collective part of layer_time_ns."""
    layer_host_ns: np.ndarray
    """The exposed host part of layer_time_ns: the host's issue time above the GPU's
    (costs/fixed_costs.py; a recomputed forward's is in layer_recompute_ns)."""
    layer_recompute_ns: np.ndarray
    """Extra forward (with its collectives) of a fully recomputed layer."""
    layer_static_bytes: np.ndarray
    """Weights + gradients + optimizer states of one layer on one rank."""
    layer_optimizer_bytes: np.ndarray
    """The optimizer-state part of layer_static_bytes."""
    layer_grad_bytes: np.ndarray
    """The gradient part of layer_static_bytes (fp32 main gradients)."""
    layer_act_bytes: np.ndarray
    """Activations one layer keeps per micro-batch in flight."""
    layer_input_bytes: np.ndarray
    """What a fully recomputed layer keeps per micro-batch in flight (its input)."""
    layer_tail_ns: np.ndarray
    """The layer's share of the gradient synchronisation and optimizer step (affine in params)."""
    stage_time_ns: np.ndarray
    """Embedding (first), final norm + head (last) and pipeline send/recv, per micro-batch."""
    stage_comm_ns: np.ndarray
    stage_static_bytes: np.ndarray
    """Embedding / head parameters and states plus the transient peak of the stage's blocks."""
    stage_optimizer_bytes: np.ndarray
    """The optimizer-state part of stage_static_bytes."""
    stage_grad_bytes: np.ndarray
    """The gradient part of stage_static_bytes."""
    stage_transient_bytes: np.ndarray
    """The transient part of stage_static_bytes (largest temporary of the stage's blocks)."""
    stage_act_bytes: np.ndarray
    """Embedding / head activations per micro-batch in flight."""
    stage_inflight_x_v: np.ndarray
    """v times the micro-batches whose activations a stage holds (1F1B: min(p - s, m))."""
    stage_tail_ns: np.ndarray
    """Per-stage constant of the tail: collective latencies and embedding / head parameters."""
    stage_tail_sync_ns: np.ndarray
    """The synchronisation part of stage_tail_ns (for the breakdown)."""
    layer_tail_sync_ns: np.ndarray
    layer_hidden_ns: np.ndarray
    """Communication of one layer per micro-batch hidden behind compute (costs/overlap.py); not
    part of layer_time_ns."""
    layer_tail_hidden_ns: np.ndarray
    """Gradient reduce / parameter gather of one layer hidden behind the backward / forward."""
    stage_hidden_ns: np.ndarray
    """Pipeline send/recv per micro-batch hidden behind the interleaved schedule's next chunk."""
    stage_tail_hidden_ns: np.ndarray
    """Per-stage correction of the hidden tail (minus the last bucket, which stays exposed)."""
    work_bytes: int
    """Full activations of the largest layer: the working set of re-running one layer's forward
    when the stage recomputes (a `uniform` group of g layers holds g times this)."""
    rules: SplitRules
    """The search's rules these coefficients are split under (memory limit, layer form): handed
    in by `CostModel.under`, never part of the cost model's inputs (costs/split_rules.py)."""
    estimated: bool
    """Some block cost was interpolated in the micro-batch size."""
    uniform: bool = False
    """The model has one layer kind (then every layer costs the same by construction)."""
    fixed_ns_per_microbatch: int = 0
    """The description's fixed time per micro-batch, included in every stage_time_ns (for the
    breakdown's fixed_ms; HardwareSpec.fixed_ms_per_microbatch)."""
    stage_mask_bytes: np.ndarray | None = None
    """The attention-mask part of stage_static_bytes (Tinker folders; None: no mask)."""
    schedule: str = "1f1b"
    """Pipeline schedule (strategy.SCHEDULES); DualPipeV has vpp = 2 chunks per rank in a V."""
    recompute_all: bool = False
    """Full recompute covers every layer of a chunk or none (MindSpeed-LLM FSDP2's parallel.recompute
    wraps all decoder layers): the solvers then choose only r = the largest chunk."""
    memo: Memo = field(default_factory=Memo, repr=False, compare=False)
    """Derived values computed on first use (Memo)."""

    @property
    def memory_limit_bytes(self) -> int:
        """The memory a stage may hold under the search's rules."""
        return self.rules.memory_limit_bytes

    @property
    def layer_form(self) -> str:
        """The per-stage layer-count form every split solver keeps (rules.LAYER_FORMS)."""
        return self.rules.layer_form

    @property
    def uneven_vpp(self) -> bool:
        """With vpp > 1 the split is chosen among uneven per-virtual-stage lists too (first and
        last virtual stage free, the rest equal: solve/virtual_split.py), where the framework
        writes them."""
        return self.rules.uneven_vpp

    @property
    def homogeneous(self) -> bool:
        """All layers cost the same (one layer kind): the solvers use scalar coefficients."""
        if self.uniform:
            return True
        arrays = (
            self.layer_time_ns,
            self.layer_recompute_ns,
            self.layer_static_bytes,
            self.layer_act_bytes,
            self.layer_input_bytes,
            self.layer_tail_ns,
        )
        return all(bool((a == a[0]).all()) for a in arrays)

    @property
    def method(self) -> str | None:
        """Megatron's `--recompute-method` (`block` or `uniform`) with full recompute, else None."""
        if self.outer.recompute != Recompute.FULL:
            return None
        return self.outer.recompute_method or RecomputeMethod.BLOCK

    @property
    def checkpoint_bytes(self) -> int:
        """What one `uniform` group keeps per micro-batch: its input, the hidden state (recompute.py)."""
        return int(self.layer_input_bytes.max())

    def stage_costs(
        self, layers: tuple[int, ...], r: int, chunks: tuple[int, ...] | None = None
    ) -> list[StageCost]:
        """The per-stage integers of a split (`layers` per stage, recompute count r, 0 for none):
        the one definition of the per-stage sums, for uniform and mixed stacks alike.

        Full recompute per chunk (recompute.chunk_plan, Megatron's `_checkpointed_forward`):
        `block` recomputes the first min(r, n) layers of each chunk, which keep their inputs;
        `uniform` recomputes every layer and keeps ceil(n / r) group inputs. The working set of
        the group being recomputed is the largest over the stage's chunks. `chunks` gives each
        virtual stage's layers (Megatron's layout order, Strategy.chunk_layers) when they are
        not the even split of vpp > 1."""
        pre = _prefix_sums(self)
        method = self.method
        out = []
        for s in range(self.num_stages):
            total = dict.fromkeys(_PREFIXED, 0)
            num, num_rc, recompute_ns, rc_input, rc_act, work_layers = 0, 0, 0, 0, 0, 0
            for start, end in _chunk_bounds(self, layers, s, chunks):
                plan = chunk_plan(method, end - start, r)
                cut = start + plan.recomputed
                for name in _PREFIXED:
                    total[name] += pre[name][end] - pre[name][start]
                recompute_ns += pre["layer_recompute_ns"][cut] - pre["layer_recompute_ns"][start]
                if method == RecomputeMethod.UNIFORM:
                    rc_input += plan.checkpoints * self.checkpoint_bytes
                else:
                    rc_input += pre["layer_input_bytes"][cut] - pre["layer_input_bytes"][start]
                rc_act += pre["layer_act_bytes"][cut] - pre["layer_act_bytes"][start]
                num, num_rc = num + end - start, num_rc + cut - start
                work_layers = max(work_layers, plan.work_layers)
            out.append(
                _stage_cost(
                    self, s, total, num, num_rc, recompute_ns, rc_input, rc_act, work_layers
                )
            )
        return out

    def iteration_time_ns_x_v(self, stages: list[StageCost]) -> int:
        """The objective, v * T in ns: sum_s t_s + (m*v - 1) * max_s t_s + v * max_s tail_s
        (module docstring)."""
        times = [st.time_ns for st in stages]
        return pipeline_x_v(self, sum(times), max(times), max(st.tail_ns for st in stages))

    def time_ns_x_v(self, layers: tuple[int, ...], r: int) -> int:
        """v * T in ns of a split (layers per stage, recompute count r)."""
        return self.iteration_time_ns_x_v(self.stage_costs(layers, r))


@dataclass(frozen=True)
class StageCost:
    """Integer cost of one stage under a split (ns per micro-batch, bytes times v)."""

    layers: int
    recompute_layers: int
    time_ns: int
    comm_ns: int
    recompute_ns: int
    tail_ns: int
    tail_sync_ns: int
    static_bytes_x_v: int
    optimizer_bytes_x_v: int
    grad_bytes_x_v: int
    transient_bytes_x_v: int
    act_bytes_x_v: int
    other_bytes_x_v: int
    memory_bytes_x_v: int
    mask_bytes_x_v: int = 0
    """The attention-mask part of static_bytes_x_v."""
    hidden_comm_ns: int = 0
    """Communication per micro-batch hidden behind compute (not in time_ns)."""
    hidden_sync_ns: int = 0
    """Gradient reduce / parameter gather hidden behind the last backward / first forward."""
    host_ns: int = 0
    """The exposed host part of time_ns (costs/fixed_costs.py)."""


_PREFIXED = (
    "layer_time_ns",
    "layer_comm_ns",
    "layer_host_ns",
    "layer_hidden_ns",
    "layer_tail_hidden_ns",
    "layer_recompute_ns",
    "layer_tail_ns",
    "layer_tail_sync_ns",
    "layer_static_bytes",
    "layer_optimizer_bytes",
    "layer_grad_bytes",
    "layer_act_bytes",
    "layer_input_bytes",
)


def _prefix_sums(c: SplitCoefficients) -> dict[str, list[int]]:
    """Prefix sums of the layer arrays (Python ints), so a range of layers sums in O(1)."""
    if c.memo.prefix is None:
        c.memo.prefix = {name: [0] + np.cumsum(getattr(c, name)).tolist() for name in _PREFIXED}
    return c.memo.prefix


def _chunk_bounds(
    c: SplitCoefficients, layers: tuple[int, ...], s: int, chunks: tuple[int, ...] | None = None
) -> list[tuple[int, int]]:
    """(start, end) layer positions of stage s's chunks: v per rank in the schedule's order
    (layer_stack.rank_chunks: Megatron's interleaving, virtual stage j * p + s; DualPipeV's V,
    chunks s and 2p - 1 - s), from the per-chunk counts `chunks` or the even split."""
    if c.vpp == 1:
        start = sum(layers[:s])
        return [(start, start + layers[s])]
    dualpipev = c.schedule == Schedule.DUALPIPEV
    indices = rank_chunks(c.num_stages, c.vpp, dualpipev, s)
    if chunks is None:
        size = c.num_layers // num_chunks(c.num_stages, c.vpp, dualpipev)
        chunks = (size,) * num_chunks(c.num_stages, c.vpp, dualpipev)
    ends = np.cumsum(chunks).tolist()
    return [(ends[k] - chunks[k], ends[k]) for k in indices]


def _stage_cost(c, s, total, num, num_rc, recompute_ns, rc_input, rc_act, work_layers) -> StageCost:
    v = c.vpp
    time_ns = total["layer_time_ns"] + recompute_ns + int(c.stage_time_ns[s])
    comm_ns = total["layer_comm_ns"] + int(c.stage_comm_ns[s])
    tail_ns = total["layer_tail_ns"] + int(c.stage_tail_ns[s])
    tail_sync_ns = total["layer_tail_sync_ns"] + int(c.stage_tail_sync_ns[s])
    static = v * (total["layer_static_bytes"] + int(c.stage_static_bytes[s]))
    mask = v * int(c.stage_mask_bytes[s]) if c.stage_mask_bytes is not None else 0
    optimizer = v * (total["layer_optimizer_bytes"] + int(c.stage_optimizer_bytes[s]))
    grad = v * (total["layer_grad_bytes"] + int(c.stage_grad_bytes[s]))
    transient = v * int(c.stage_transient_bytes[s])
    # In flight: kept layers hold their activations, recomputed ones only their checkpoints.
    per_micro = total["layer_act_bytes"] - rc_act + rc_input + int(c.stage_act_bytes[s])
    act = int(c.stage_inflight_x_v[s]) * per_micro
    other = v * work_layers * c.work_bytes  # the group being recomputed (recompute.py)
    hidden = total["layer_hidden_ns"] + int(c.stage_hidden_ns[s])
    hidden_sync = total["layer_tail_hidden_ns"] + int(c.stage_tail_hidden_ns[s])
    return StageCost(
        num,
        num_rc,
        time_ns,
        comm_ns,
        recompute_ns,
        tail_ns,
        tail_sync_ns,
        static,
        optimizer,
        grad,
        transient,
        act,
        other,
        static + act + other,
        mask,
        hidden,
        hidden_sync,
        total["layer_host_ns"],
    )
