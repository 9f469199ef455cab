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

import numpy as np

from tinker_opt.costs import overlap
from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.costs.comm_model import CommModel, GroupPlacement
from tinker_opt.costs.cp_terms import (
    cp_fwd_bwd_us,
    cp_groups,
    ring_hop_us,
    ulysses_a2a_us,
    unaligned_extra,
)
from tinker_opt.costs.data_parallel import grad_bytes, param_bytes, tail_parts_us
from tinker_opt.costs.fp8_terms import fp8_gather_factor, fp8_weight_extra_bytes
from tinker_opt.costs.job import JOB_DEFAULTS, JobOptions
from tinker_opt.costs.moe_terms import moe_comm_us
from tinker_opt.costs.profile_table import BlockCost, BlockTable
from tinker_opt.costs.recompute import activation_function_terms
from tinker_opt.costs.stage_terms import stage_terms
from tinker_opt.costs.swap_terms import swap_attention_bytes, swap_exposed_us
from tinker_opt.costs.units import chunks_per_rank, data_groups, m_tokens, to_ns
from tinker_opt.costs.zero_terms import layer_exposed_us
from tinker_opt.hardware import DEFAULT_HOST_LINK_GBS
from tinker_opt.strategy import OVERLAP_KEYS, Strategy

DEFAULT_MEMORY_BANDWIDTH_GBS = 1600.0
"""HBM bandwidth when no hardware file is given (Ascend 910B / A100-40GB class, ~1.6 TB/s)."""


class TermBuilder:
    """Builds the integer coefficients of outer configurations."""

    def __init__(
        self,
        model,
        cluster,
        global_batch_size: int,
        blocks: BlockTable,
        comm: CommModel,
        *,
        job: JobOptions = JOB_DEFAULTS,
        memory_bandwidth_gbs: float | None = None,
        host_link_gbs: float = DEFAULT_HOST_LINK_GBS,
        times_include_tp_comm: bool = False,
        times_include_ep_comm: bool = False,
        attention_mask_bytes: int = 0,
        layer_form: str = "free",
    ) -> None:
        self.model = model
        self.job = job
        """The script's job flags (costs/job.py)."""
        self.tp_comm_in_times = times_include_tp_comm
        """The block times already include the TP / SP collectives (Tinker folders): add none."""
        self.ep_comm_in_times = times_include_ep_comm
        """The block times already include the expert all-to-all and etp collectives."""
        self.attention_mask_bytes = int(attention_mask_bytes or 0)
        """A mask every stage holds once (Tinker's seq^2 bytes), 0 for our own profiles."""
        self.layer_form = layer_form
        self.uneven_vpp = False
        """Splits with virtual stages may be uneven (SplitCoefficients.uneven_vpp)."""
        self.cluster = cluster
        self.gbs = global_batch_size
        self.blocks = blocks
        self.comm = comm
        self.mem_bw_gbs = memory_bandwidth_gbs or DEFAULT_MEMORY_BANDWIDTH_GBS
        self.bpe = model.bytes_per_element
        # Optimizer states per parameter: fp32 master + two Adam moments (12 B), or the dtypes of
        # Megatron's precision-aware optimizer (specs.OptimizerPrecision); --reuse-fp32-param
        # (bf16 only) saves sizeof(bf16) of the master copy; fp32 training keeps no master (8 B).
        # All divided by the optimizer's sharding with dist_opt.
        precision = job.optimizer_precision
        self.opt_state_bytes = (
            (precision.state_bytes - (self.bpe if job.reuse_fp32_param else 0))
            if self.bpe == 2
            else 8
        )
        self.grad_bytes = precision.grad_bytes
        """Gradient-buffer bytes per parameter (fp32 main gradients unless --main-grads-dtype)."""
        self.host_link_gbs = host_link_gbs
        self.kinds = model.layer_kinds()
        self.layer_block = {
            k: ("layer" if len(set(self.kinds)) == 1 else f"layer.{k}") for k in set(self.kinds)
        }
        self.kind_names = sorted(set(self.kinds))
        self.kind_index = np.array([self.kind_names.index(k) for k in self.kinds])
        self._layer_cache: dict[tuple, dict[str, np.ndarray]] = {}
        self._stage_cache: dict[tuple, dict] = {}

    # -- shapes --------------------------------------------------------------------------------
    def layer_shape(self, kind: str, s: Strategy) -> tuple[int, int]:
        """(ep, etp) of a layer block row: experts only in MoE layers (dense rows use 1, 1)."""
        if self.model.is_moe and (kind == "moe" or self.layer_block[kind] == "layer"):
            return s.ep, s.expert_tp
        return 1, 1

    def available(self, tp: int, sp: bool, cp: int, ep: int, etp: int) -> bool:
        for kind, block in self.layer_block.items():
            kep, ketp = (
                (ep, etp) if self.model.is_moe and (kind == "moe" or block == "layer") else (1, 1)
            )
            if not self.blocks.has(block, tp, sp, cp, kep, ketp):
                return False
        return all(self.blocks.has(b, tp, sp, cp) for b in ("embedding", "final_norm", "head"))

    def cost(self, block: str, s: Strategy, ep: int = 1, etp: int = 1) -> BlockCost:
        return self.blocks.cost(block, tp=s.tp, sp=s.sp, cp=s.cp, ep=ep, etp=etp, mbs=s.mbs)

    def scope(self, stride: int, size: int) -> GroupPlacement:
        cluster = self.cluster
        return self.comm.placement(stride, size, cluster.devices_per_node, cluster.num_devices)

    # -- collectives per layer (us) ------------------------------------------------------------
    def tp_pair_us(self, s: Strategy, nbytes: float) -> float:
        """One TP exchange of a layer part: all-gather + reduce-scatter with SP, else all-reduce
        (Korthikanti et al. 2022, Megatron's g / g-bar operators)."""
        scope = self.scope(1, s.tp)
        if s.sp:
            return self.comm.time_us("all_gather", s.tp, scope, nbytes) + self.comm.time_us(
                "reduce_scatter", s.tp, scope, nbytes
            )
        return self.comm.time_us("all_reduce", s.tp, scope, nbytes)

    def _layer_comm_us(self, kind: str, s: Strategy, cost: BlockCost) -> tuple[float, float, float]:
        """(forward, backward) exposed collectives of one layer and the hidden rest (costs/overlap.py);
        the backward mirrors the forward."""
        m = self.model
        tokens = m_tokens(m, s)
        act = tokens * m.hidden_size * self.bpe
        parts = 2 if kind == "dense" else 1 + bool(m.moe_shared_expert_intermediate_size)
        # Tinker folders' block times include the TP and expert collectives: none added.
        pair = self.tp_pair_us(s, act) if s.tp > 1 and not self.tp_comm_in_times else 0.0
        share = overlap.matmul_share(m, s.tp, tokens, cost.param_count - cost.expert_param_count)
        fwd_tp = bwd_tp = parts * pair
        if s.tp_comm_overlap and pair:
            # MoE layers: only the attention pair is fused (MindSpeed mc2.md: no MC2 in the MoE MLP).
            fused = parts if kind == "dense" else 1
            fwd_tp = (parts - fused) * pair + overlap.chunked_exposed(
                fused * pair, cost.fwd_us * share, s.tp
            )
            bwd_tp = (parts - fused) * pair + overlap.chunked_exposed(
                fused * pair, cost.bwd_us * share, s.tp
            )
        moe = moe_comm_us(self, s) if kind == "moe" and not self.ep_comm_in_times else 0.0
        moe_fwd = moe
        moe_bwd = overlap.exposed(moe, cost.bwd_us / 2) if moe and s.overlap_moe_comm else moe
        if moe and s.moe_fb_overlap:
            num_micro = max(self.gbs // (s.mbs * s.dp), 1)
            edge = min(1.0, max(s.pp - 1, 1) / num_micro)
            moe_fwd = overlap.fb_overlap_exposed(moe, cost.bwd_us, edge)
            moe_bwd = overlap.fb_overlap_exposed(moe, cost.fwd_us, edge)
        cp_fwd, cp_bwd = cp_fwd_bwd_us(self, s)
        u, r = cp_groups(self, s)
        if r > 1:
            # Ring hops hide behind one block's attention (1/r of the rank's attention core);
            # hybrid's Ulysses all-to-all stays exposed (costs/overlap.py).
            a2a, hop = ulysses_a2a_us(self, s, u), ring_hop_us(self, s, u, r)
            cp_fwd = a2a + (r - 1) * overlap.exposed(hop, cost.fwd_us * (1 - share) / r)
            cp_bwd = a2a + 2 * (r - 1) * overlap.exposed(hop, cost.bwd_us * (1 - share) / r)
        full = 2 * parts * pair + 2 * moe + sum(cp_fwd_bwd_us(self, s))
        fwd, bwd = fwd_tp + moe_fwd + cp_fwd, bwd_tp + moe_bwd + cp_bwd
        return fwd, bwd, max(full - fwd - bwd, 0.0)

    # -- building ------------------------------------------------------------------------------
    def build(self, s: Strategy) -> SplitCoefficients:
        L, p, v = self.model.num_layers, s.pp, chunks_per_rank(s)
        num_micro = self.gbs // (s.mbs * s.dp)
        knobs = (*(bool(getattr(s, key)) for key in OVERLAP_KEYS), s.schedule, s.moe_fb_overlap)
        # The per-layer terms do not depend on pp / vpp (but the fb-overlap's warmup share does),
        # the per-stage ones not on the recompute.
        shape = (s.tp, s.sp, s.cp, s.cp_algo, s.ep, s.etp, s.mbs, s.dp, s.dist_opt, s.zero, knobs)
        layer_key = (*shape, s.recompute, s.pp if s.moe_fb_overlap else 0)
        layer = self._layer_cache.get(layer_key)
        if layer is None:
            layer = self._layer_cache[layer_key] = self._layer_arrays(s)
        stage_key = (*shape, s.pp, s.vpp)
        stage = self._stage_cache.get(stage_key)
        if stage is None:
            stage = self._stage_cache[stage_key] = self._stage_terms(s, num_micro)
        stage = dict(stage)
        estimated = stage.pop("estimated") or bool(layer["estimated"].any())
        last_bucket = self._last_bucket_ns(s, layer)
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
            memory_limit_bytes=int(self.cluster.memory_limit_mb * 2**20),
            estimated=bool(estimated),
            uniform=len(self.kind_names) == 1,
            layer_form=self.layer_form,
            uneven_vpp=self.uneven_vpp,
            schedule=s.schedule,
            recompute_all=self.job.recompute_all,
            **stage,
        )

    def _last_bucket_ns(self, s: Strategy, layer: dict[str, np.ndarray]) -> int:
        """The gradient bucket reduced after the last backward (and the parameter bucket gathered
        before the first forward), exposed on every stage (costs/overlap.py). In integer ns, at
        most the smallest layer's hidden tail, so a stage (>= 1 layer) never pays more than
        without overlap."""
        if not (s.overlap_grad_reduce or s.overlap_param_gather):
            return 0
        grad, gather, _ = tail_parts_us(
            self, s, overlap.bucket_params(data_groups(s, self.model.is_moe)[0]), 0
        )
        bucket = (grad if s.overlap_grad_reduce else 0.0) + (
            gather if s.overlap_param_gather else 0.0
        )
        return int(min(to_ns(bucket), int(layer["tail_hidden"].min())))

    def _layer_arrays(self, s: Strategy) -> dict[str, np.ndarray]:
        """Per-position arrays of the layer terms (one row per layer kind, indexed by position)."""
        per_kind = [self._layer_terms(kind, s) for kind in self.kind_names]
        return {
            name: np.array([terms[name] for terms in per_kind], dtype=np.int64)[self.kind_index]
            for name in per_kind[0]
        }

    def _layer_terms(self, kind: str, s: Strategy) -> dict[str, int]:
        ep, etp = self.layer_shape(kind, s)
        cost = self.cost(self.layer_block[kind], s, ep, etp)
        fwd_comm, bwd_comm, hidden = self._layer_comm_us(kind, s, cost)
        selective = s.recompute == "selective"
        dense_params = cost.param_count - cost.expert_param_count
        share = overlap.matmul_share(self.model, s.tp, m_tokens(self.model, s), dense_params)
        pace_fwd, pace_bwd, pace_bytes = unaligned_extra(self, s, cost, share)
        compute = cost.fwd_us + cost.bwd_us + (cost.selective_recompute_us if selective else 0.0)
        compute += pace_fwd + pace_bwd
        bwd_comm += layer_exposed_us(
            self, s, dense_params, cost.expert_param_count, cost.fwd_us, cost.bwd_us
        )
        weights, optimizer = param_bytes(self, s, dense_params, cost.expert_param_count)
        weights += fp8_weight_extra_bytes(self.model, cost.param_count)  # costs/fp8_terms.py
        grad_us, gather_us, opt_us = tail_parts_us(self, s, dense_params, cost.expert_param_count)
        gather_us *= fp8_gather_factor(self.model)
        sync_us = (overlap.exposed(grad_us, cost.bwd_us) if s.overlap_grad_reduce else grad_us) + (
            overlap.exposed(gather_us, cost.fwd_us) if s.overlap_param_gather else gather_us
        )
        act = (cost.selective_activation_bytes if selective else cost.activation_bytes) + pace_bytes
        recompute_us = cost.fwd_us + pace_fwd + fwd_comm if s.recompute == "full" else 0.0
        if self.job.recompute_activation:
            # MindSpeed's activation-function recompute (costs/recompute.py): layers that keep
            # their activations drop the activation output and re-run it; a fully recomputed
            # layer does not (should_recompute), so its recompute term gives that time back.
            saved, extra_us = activation_function_terms(
                self.model, kind, m_tokens(self.model, s), s.tp, self.bpe, self.mem_bw_gbs
            )
            act, compute = act - saved, compute + extra_us
            recompute_us = recompute_us - extra_us if s.recompute == "full" else 0.0
        if self.job.swap_attention:
            saved, extra_us = self._swap_attention(s, act, cost)
            act, compute = act - saved, compute + extra_us
        return {
            "time": to_ns(compute + fwd_comm + bwd_comm),
            "comm": to_ns(fwd_comm + bwd_comm),
            "hidden": to_ns(hidden),
            "tail_hidden": to_ns(grad_us + gather_us + opt_us) - to_ns(sync_us + opt_us),
            "recompute": to_ns(recompute_us) if s.recompute == "full" else 0,
            "static": weights + optimizer,
            "optimizer": optimizer,
            "grad": grad_bytes(self, s, dense_params, cost.expert_param_count),
            "act": act,
            "act_full": cost.activation_bytes + pace_bytes,
            "input": cost.input_bytes,
            "tail": to_ns(sync_us + opt_us),
            "tail_sync": to_ns(sync_us),
            "estimated": cost.estimated,
        }

    def _swap_attention(self, s: Strategy, act: int, cost: BlockCost) -> tuple[int, float]:
        """(bytes moved to the host, exposed copy microseconds) of one layer under MindSpeed's
        --swap-attention (costs/swap_terms.py); never more than the layer keeps."""
        moved = min(
            act, swap_attention_bytes(self.model, m_tokens(self.model, s), s.tp, s.sp, self.bpe)
        )
        return moved, swap_exposed_us(moved, self.host_link_gbs, cost.fwd_us, cost.bwd_us)

    def sync_groups(self, s: Strategy) -> list[tuple[int, GroupPlacement]]:
        """(size, scope) of the dense and expert gradient groups."""
        dp_cp, edp = data_groups(s, self.model.is_moe)
        groups = [(dp_cp, self.scope(s.tp, dp_cp))]
        if self.model.is_moe:
            groups.append((edp, self.scope(s.ep * s.expert_tp, edp)))
        return groups

    def left_out(self) -> tuple[str, ...]:
        """The terms not added because the profile's block times include them (for the breakdown)."""
        return (("tp_comm",) if self.tp_comm_in_times else ()) + (
            ("ep_comm",) if self.ep_comm_in_times else ()
        )

    def _stage_terms(self, s: Strategy, num_micro: int) -> dict:
        return stage_terms(self, s, num_micro)
