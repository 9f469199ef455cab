"""The terms of the cost model, each with its source: blocks + collectives -> SplitCoefficients.

Conventions. Block times in blocks.csv are the compute of one rank's shard for one micro-batch,
measured alone on one device (no collective inside); every collective is added here from the
communication model. A Tinker folder is the exception (profile/tinker_compat.py): its blocks ran on
real tp x ep ranks, so `times_include_tp_comm` / `times_include_ep_comm` leave out the TP / SP
collectives of the layers, embedding and head, and the expert all-to-all (forward, backward and
the recompute forward alike), and its attention mask (seq^2 bytes) is charged once per stage.
Sizes: s sequence, b micro-batch, h hidden, a heads, g query groups, d head
dim, t tp, c cp, e ep, bpe bytes per element (2 for bf16 / fp16).

Memory per parameter, the gradient sync and the optimizer step (with ZeRO, the swap optimizer and
reuse-fp32-param): costs/data_parallel.py.

Communication overlap (tp / MoE / ring attention / gradient reduce / parameter gather / pipeline
p2p): costs/overlap.py states each rule and its source; the terms below charge the exposed part.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from tinker_opt.choices import Recompute, RecomputeModule
from tinker_opt.costs import overlap
from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.costs.cp_terms import unaligned_extra
from tinker_opt.costs.data_parallel import grad_bytes, param_bytes, tail_parts_us
from tinker_opt.costs.deterministic import deterministic_backward_us
from tinker_opt.costs.fixed_costs import layer_host_time
from tinker_opt.costs.fp8_activation import fp8_saved_input_bytes
from tinker_opt.costs.fp8_terms import fp8_gather_factor, fp8_weight_extra_bytes
from tinker_opt.costs.grad_accumulation import unfused_accumulation_us
from tinker_opt.costs.layer_comm import layer_comm_us
from tinker_opt.costs.moe_terms import chunk_sort_us, moe_comm_us
from tinker_opt.costs.profile_table import BlockCost
from tinker_opt.costs.recompute import activation_function_terms
from tinker_opt.costs.recompute_modules import LayerDims, layer_module_terms
from tinker_opt.costs.split_rules import SplitRules
from tinker_opt.costs.stage_terms import stage_terms
from tinker_opt.costs.swap_terms import swap_attention_bytes, swap_exposed_us
from tinker_opt.costs.term_context import TermContext
from tinker_opt.costs.units import chunks_per_rank, data_groups, m_tokens, to_ns
from tinker_opt.costs.zero_terms import layer_exposed_us
from tinker_opt.strategy import OVERLAP_KEYS, Strategy

_OVERLAPS = attrgetter(*OVERLAP_KEYS)
"""The overlap switches of a strategy, in OVERLAP_KEYS order, in one call."""


class TermBuilder:
    """Builds the integer coefficients of outer configurations from one TermContext, caching the
    per-layer and per-stage terms that several outers share."""

    def __init__(self, ctx: TermContext) -> None:
        self.ctx = ctx
        """The inputs of the terms (costs/term_context.py)."""
        self._layer_cache: dict[tuple, dict[str, np.ndarray]] = {}
        self._stage_cache: dict[tuple, dict] = {}
        self._static_cache: dict[tuple, int] = {}

    # -- building ------------------------------------------------------------------------------
    @staticmethod
    def _keys(s: Strategy) -> tuple[tuple, tuple]:
        """(layer key, stage key): the fields of `s` the per-layer and the per-stage terms read.
        The per-layer terms do not depend on pp / vpp (but the fb-overlap's warmup share does),
        the per-stage ones not on the recompute."""
        knobs = (*map(bool, _OVERLAPS(s)), s.schedule, s.moe_fb_overlap)
        shape = (s.tp, s.sp, s.cp, s.cp_algo, s.ep, s.etp, s.mbs, s.dp, s.dist_opt, s.zero, knobs)
        return (*shape, s.recompute, s.pp if s.moe_fb_overlap else 0), (*shape, s.pp, s.vpp)

    def build(self, s: Strategy, rules: SplitRules) -> SplitCoefficients:
        """The coefficients of outer `s`, split under the search's `rules`."""
        L, p, v = self.ctx.model.num_layers, s.pp, chunks_per_rank(s)
        num_micro = self.ctx.gbs // (s.mbs * s.dp)
        layer_key, stage_key = self._keys(s)
        layer = self._layer_cache.get(layer_key)
        if layer is None:
            layer = self._layer_cache[layer_key] = self._layer_arrays(s)
        stage = self._stage_cache.get(stage_key)
        if stage is None:
            stage = self._stage_cache[stage_key] = self._stage_terms(s, num_micro)
        stage = dict(stage)
        estimated = stage.pop("estimated") or bool(layer["estimated"].any())
        last_bucket = _last_bucket_ns(stage.pop("bucket_us"), layer)
        stage["stage_tail_ns"] = stage["stage_tail_ns"] + last_bucket
        stage["stage_tail_sync_ns"] = stage["stage_tail_sync_ns"] + last_bucket
        stage["stage_tail_hidden_ns"] = np.full(p, -last_bucket, dtype=np.int64)
        return SplitCoefficients(
            outer=s,
            num_layers=L,
            num_stages=p,
            vpp=v,
            num_microbatches=num_micro,
            layer_time_ns=layer["time"],
            layer_comm_ns=layer["comm"],
            layer_host_ns=layer["host"],
            layer_recompute_ns=layer["recompute"],
            layer_static_bytes=layer["static"],
            layer_optimizer_bytes=layer["optimizer"],
            layer_grad_bytes=layer["grad"],
            layer_act_bytes=layer["act"],
            layer_input_bytes=layer["input"],
            layer_tail_ns=layer["tail"],
            layer_tail_sync_ns=layer["tail_sync"],
            layer_hidden_ns=layer["hidden"],
            layer_tail_hidden_ns=layer["tail_hidden"],
            work_bytes=int(layer["act_full"].max()),
            rules=rules,
            estimated=bool(estimated),
            uniform=len(self.ctx.kind_names) == 1,
            schedule=s.schedule,
            recompute_all=self.ctx.job.recompute_all,
            **stage,
        )

    def _bucket_us(self, s: Strategy) -> float:
        """The gradient bucket reduced after the last backward (and the parameter bucket gathered
        before the first forward), exposed on every stage (costs/overlap.py); 0 without either
        overlap. Kept with the stage terms (their key holds every field it reads)."""
        if not (s.overlap_grad_reduce or s.overlap_param_gather):
            return 0.0
        grad, gather, _ = tail_parts_us(
            self.ctx, s, overlap.bucket_params(data_groups(s, self.ctx.model.is_moe)[0]), 0
        )
        return (grad if s.overlap_grad_reduce else 0.0) + (
            gather if s.overlap_param_gather else 0.0
        )

    def _layer_arrays(self, s: Strategy) -> dict[str, np.ndarray]:
        """Per-position arrays of the layer terms (one row per layer kind, indexed by position)."""
        per_kind = [self._layer_terms(kind, s) for kind in self.ctx.kind_names]
        names = list(per_kind[0])
        # one table (kinds x terms) indexed by position at once; a row per term, contiguous
        table = np.array([[terms[name] for name in names] for terms in per_kind], dtype=np.int64)
        rows = np.ascontiguousarray(table[self.ctx.kind_index].T)
        return dict(zip(names, rows, strict=True))

    def _layer_terms(self, kind: str, s: Strategy) -> dict[str, int]:
        ctx = self.ctx
        ep, etp = ctx.layer_shape(kind, s)
        cost = ctx.cost(ctx.layer_block[kind], s, ep, etp)
        fwd_comm, bwd_comm, hidden = layer_comm_us(ctx, kind, s, cost)
        selective = (
            s.recompute == Recompute.SELECTIVE
            and RecomputeModule.CORE_ATTN in ctx.job.recompute_modules
        )
        dense_params = cost.param_count - cost.expert_param_count
        share = overlap.matmul_share(ctx.model, s.tp, m_tokens(ctx.model, s), dense_params)
        extra_fwd, extra_bwd, pace_bytes = self._extra_us(kind, s, cost, share)
        compute = cost.fwd_us + cost.bwd_us + (cost.selective_recompute_us if selective else 0.0)
        compute += extra_fwd + extra_bwd
        gpu_fwd = cost.fwd_us + extra_fwd + fwd_comm
        recompute_us = gpu_fwd if s.recompute == Recompute.FULL else 0.0
        # ZeRO-2/3 traffic hides behind the layer's time on the compute stream (zero_terms.py):
        # its compute, its exposed collectives and, under full recompute, the rerun forward.
        window_bwd = cost.bwd_us + extra_bwd + bwd_comm + recompute_us
        bwd_comm += layer_exposed_us(
            ctx, s, dense_params, cost.expert_param_count, gpu_fwd, window_bwd
        )
        weights, optimizer = self._static_terms(s, cost)
        grad_us, gather_us, opt_us, sync_us = self._tail_us(s, cost, dense_params)
        act = (cost.selective_activation_bytes if selective else cost.activation_bytes) + pace_bytes
        gpu_bwd = cost.bwd_us + extra_bwd + bwd_comm
        # The host's issue time above the GPU's, dense and MoE layers (costs/fixed_costs.py).
        host = layer_host_time(ctx, kind, s, cost, gpu_fwd, gpu_bwd)
        compute += host.exposed_us
        recompute_us += host.recompute_exposed_us
        dims = self._layer_dims(s)
        act -= min(act, fp8_saved_input_bytes(ctx.model, kind, dims, etp))
        if s.recompute == Recompute.SELECTIVE:
            saved, extra_us = self._module_recompute(kind, s, dims, act)
            act, compute = act - saved, compute + extra_us
        if ctx.job.recompute_activation:
            saved, extra_us = self._activation_recompute(kind, s)
            act, compute = act - saved, compute + extra_us
            recompute_us = recompute_us - extra_us if s.recompute == Recompute.FULL else 0.0
        if ctx.job.swap_attention:
            saved, extra_us = self._swap_attention(s, act, cost)
            act, compute = act - saved, compute + extra_us
        return {
            "time": to_ns(compute + fwd_comm + bwd_comm),
            "comm": to_ns(fwd_comm + bwd_comm),
            "host": to_ns(host.exposed_us),
            "hidden": to_ns(hidden),
            "tail_hidden": to_ns(grad_us + gather_us + opt_us) - to_ns(sync_us + opt_us),
            "recompute": to_ns(recompute_us) if s.recompute == Recompute.FULL else 0,
            "static": weights + optimizer,
            "optimizer": optimizer,
            "grad": grad_bytes(ctx, s, dense_params, cost.expert_param_count),
            "act": act,
            "act_full": cost.activation_bytes + pace_bytes,
            "input": cost.input_bytes,
            "tail": to_ns(sync_us + opt_us),
            "tail_sync": to_ns(sync_us),
            "estimated": cost.estimated,
        }

    def _activation_recompute(self, kind: str, s: Strategy) -> tuple[int, float]:
        """MindSpeed's activation-function recompute (costs/recompute.py): layers that keep their
        activations drop the activation output and re-run it; a fully recomputed layer does not
        (should_recompute), so its recompute term gives that time back."""
        ctx = self.ctx
        return activation_function_terms(
            ctx.model, kind, m_tokens(ctx.model, s), s.tp, ctx.bpe, ctx.mem_bw_gbs
        )

    def _tail_us(self, s: Strategy, cost, dense_params: int) -> tuple[float, float, float, float]:
        """The data-parallel tail of one layer (us): its gradient reduce, parameter gather and
        optimizer step, and the sync part of the first two left exposed by their overlaps."""
        grad_us, gather_us, opt_us = tail_parts_us(
            self.ctx, s, dense_params, cost.expert_param_count
        )
        gather_us *= fp8_gather_factor(self.ctx.model)
        sync_us = (overlap.exposed(grad_us, cost.bwd_us) if s.overlap_grad_reduce else grad_us) + (
            overlap.exposed(gather_us, cost.fwd_us) if s.overlap_param_gather else gather_us
        )
        return grad_us, gather_us, opt_us, sync_us

    def _extra_us(
        self, kind: str, s: Strategy, cost: BlockCost, share: float
    ) -> tuple[float, float, int]:
        """(forward, backward) microseconds a layer adds to its profiled block per micro-batch,
        and the bytes the pacing keeps: the unaligned-pace extra (unaligned_extra), the
        all-to-all dispatcher's local sort / unsort copies (moe_terms.chunk_sort_us) and,
        backward, the weight-gradient add of --no-gradient-accumulation-fusion: GPU work, so it
        also hides the host (fixed_costs.layer_host_time)."""
        ctx = self.ctx
        pace_fwd, pace_bwd, pace_bytes = unaligned_extra(ctx, s, cost, share)
        sort_fwd, sort_bwd = chunk_sort_us(ctx, s) if kind == "moe" else (0.0, 0.0)
        fwd, bwd = pace_fwd + sort_fwd, pace_bwd + sort_bwd
        bwd += deterministic_backward_us(ctx, s)
        if not ctx.job.gradient_accumulation_fusion:
            bwd += unfused_accumulation_us(
                cost.param_count, ctx.bpe, ctx.grad_bytes, ctx.mem_bw_gbs
            )
        return fwd, bwd, pace_bytes

    def _layer_dims(self, s: Strategy) -> LayerDims:
        """The per-rank sizes of the analytic activation rules (one micro-batch, one cp rank)."""
        ctx = self.ctx
        return LayerDims(
            tokens=m_tokens(ctx.model, s),
            tp=s.tp,
            sp=s.sp,
            bpe=ctx.bpe,
            linear_bpe=1 if ctx.model.is_fp8 else ctx.bpe,
        )

    def _module_recompute(
        self, kind: str, s: Strategy, dims: LayerDims, act: int
    ) -> tuple[int, float]:
        """(bytes not kept, extra forward microseconds) of one layer under the listed
        `--recompute-modules` other than core_attn (costs/recompute_modules.py); never more
        than the layer keeps. `moe` reruns the dispatch and combine (moe_terms.moe_comm_us) and the
        dispatcher's local sorts (moe_terms.chunk_sort_us)."""
        ctx = self.ctx
        terms = layer_module_terms(
            ctx.model, kind, ctx.job.recompute_modules, dims, ctx.layer_shape(kind, s)[1]
        )
        extra_us = terms.extra_us(ctx.rates.matmul_tflops, ctx.mem_bw_gbs)
        if terms.reruns_dispatch:  # and the all-to-all dispatcher's forward sorts
            extra_us += moe_comm_us(ctx, s) + chunk_sort_us(ctx, s)[0]
        return min(terms.saved_bytes, act), extra_us

    def _swap_attention(self, s: Strategy, act: int, cost: BlockCost) -> tuple[int, float]:
        """(bytes moved to the host, exposed copy microseconds) of one layer under MindSpeed's
        --swap-attention (costs/swap_terms.py); never more than the layer keeps."""
        ctx = self.ctx
        moved = min(
            act, swap_attention_bytes(ctx.model, m_tokens(ctx.model, s), s.tp, s.sp, ctx.bpe)
        )
        return moved, swap_exposed_us(moved, ctx.host_link_gbs, cost.fwd_us, cost.bwd_us)

    def _static_terms(self, s: Strategy, cost: BlockCost) -> tuple[int, int]:
        """(weights + gradients, optimizer states) bytes of one layer on one rank
        (costs/data_parallel.py, the FP8 copies of costs/fp8_terms.py)."""
        dense = cost.param_count - cost.expert_param_count
        weights, optimizer = param_bytes(self.ctx, s, dense, cost.expert_param_count)
        return weights + fp8_weight_extra_bytes(self.ctx.model, cost.param_count), optimizer

    def layers_static_bytes(self, s: Strategy) -> int:
        """The sum over every layer of build's layer_static_bytes, without building the rest;
        kept per layer key (the layer terms read no other field of `s`)."""
        key = self._keys(s)[0]
        total = self._static_cache.get(key)
        if total is not None:
            return total
        ctx = self.ctx
        total = 0
        for index, kind in enumerate(ctx.kind_names):
            ep, etp = ctx.layer_shape(kind, s)
            cost = ctx.cost(ctx.layer_block[kind], s, ep, etp)
            total += sum(self._static_terms(s, cost)) * int((ctx.kind_index == index).sum())
        self._static_cache[key] = total
        return total

    def _stage_terms(self, s: Strategy, num_micro: int) -> dict:
        return {**stage_terms(self.ctx, s, num_micro), "bucket_us": self._bucket_us(s)}


def _last_bucket_ns(bucket_us: float, layer: dict[str, np.ndarray]) -> int:
    """The exposed last bucket (TermBuilder._bucket_us) in integer ns, at most the smallest
    layer's hidden tail, so a stage (>= 1 layer) never pays more than without overlap."""
    if not bucket_us:
        return 0
    return int(min(to_ns(bucket_us), int(layer["tail_hidden"].min())))
