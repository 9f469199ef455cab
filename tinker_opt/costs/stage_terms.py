"""Per-stage terms: embedding (first stage), final norm + head (last), pipeline send/recv,
in-flight micro-batches, transient peaks and the constant part of the gradient-sync tail."""

from __future__ import annotations

import numpy as np

from tinker_opt.choices import Schedule
from tinker_opt.costs import overlap
from tinker_opt.costs.data_parallel import grad_bytes, param_bytes, sync_us, tail_slope_us
from tinker_opt.costs.layer_comm import layer_comm_us
from tinker_opt.costs.loss_terms import te_loss_saving_bytes
from tinker_opt.costs.step_costs import batch_load_us, step_fixed_us
from tinker_opt.costs.term_context import TermContext
from tinker_opt.costs.units import chunks_per_rank, head_stage, m_tokens, ns_array
from tinker_opt.costs.zero_terms import gathered_bytes, unit_exposed_us
from tinker_opt.strategy import Strategy


def inflight_x_v(p: int, v: int, num_micro: int) -> np.ndarray:
    """v times the micro-batches whose activations each rank holds at its peak.

    1F1B: rank s runs p - s forwards before its first backward, so it holds min(p - s, m).
    Interleaved (Megatron's schedule): rank s warms up 2(p - s - 1) + (v - 1)p chunk forwards and
    holds one more, each chunk holding 1/v of the rank's layers; for s = 0 that is
    p (1 + (p - 1) / (p v)) micro-batches (Korthikanti et al. 2022).
    """
    if v == 1:
        return np.array([min(p - s, num_micro) for s in range(p)], dtype=np.int64)
    return np.array(
        [min(2 * (p - s - 1) + (v - 1) * p + 1, num_micro * v) for s in range(p)], dtype=np.int64
    )


def dualpipev_inflight_x_v(p: int, num_micro: int) -> np.ndarray:
    """2 x the micro-batches each DualPipeV rank holds: PP + 1 chunk activations per device for
    PP = 2p chunks (deepseek-ai/DualPipe README, "Pipeline Bubbles and Memory Usage Comparison")."""
    return np.full(p, min(2 * p + 1, 2 * num_micro), dtype=np.int64)


def _inflight(s: Strategy, v: int, num_micro: int) -> np.ndarray:
    """In-flight micro-batches (x v) of the schedule. The fb-overlap pairs a forward with another
    micro-batch's backward; with vpp, and without a pipeline, that is one more warmup (chunk)
    micro-batch than the schedule holds alone (megatron-moe-fb-overlap.md: "warmup阶段相比于原始
    VPP多做一个warmup microbatch"); 1F1B's steady phase already pairs them."""
    if s.schedule == Schedule.DUALPIPEV:
        return dualpipev_inflight_x_v(s.pp, num_micro)
    base = inflight_x_v(s.pp, v, num_micro)
    if s.moe_fb_overlap and (v > 1 or s.pp == 1):
        return np.minimum(base + 1, num_micro * v)
    return base


def stage_terms(ctx: TermContext, s: Strategy, num_micro: int) -> dict:
    """Stage arrays of SplitCoefficients (keys are its field names) plus `estimated`."""
    p, v = s.pp, chunks_per_rank(s)
    last = head_stage(s)
    emb = ctx.cost("embedding", s)
    norm = ctx.cost("final_norm", s)
    head = ctx.cost("head", s)
    # TE's cross entropy keeps the logits in their dtype, not the fp32 softmax (loss_terms.py).
    head_act = max(head.activation_bytes - te_loss_saving_bytes(ctx.model, s, ctx.bpe), 0)
    emb_comm, head_comm = _edge_tp_comm_us(ctx, s)
    p2p_us, p2p_hidden_us = _p2p_us(ctx, s)
    # The description's fitted fixed time per micro-batch (calibrate --log; 0 unless fitted).
    time = np.full(p, p2p_us + ctx.rates.fixed_us_per_microbatch, dtype=float)
    comm = np.full(p, p2p_us, dtype=float)
    first_params, last_params = emb.param_count, norm.param_count + _head_params(ctx, s, head)
    emb_comm += unit_exposed_us(ctx, s, first_params)  # ZeRO 2/3 units (zero_terms.py)
    head_comm += unit_exposed_us(ctx, s, last_params)
    for stage in range(p):  # the data loader's batch on the first and the head's stage
        time[stage] += batch_load_us(ctx, s, stage == 0, stage == last)
    time[0] += emb.fwd_us + emb.bwd_us + emb_comm
    comm[0] += emb_comm
    mtp = _mtp_terms(ctx, s, norm, head, head_act)
    time[last] += norm.fwd_us + norm.bwd_us + head.fwd_us + head.bwd_us + head_comm + mtp["time_us"]
    comm[last] += head_comm + mtp["comm_us"]
    static, optimizer, grad = _edge_param_bytes(
        ctx,
        s,
        ((0, first_params, 0), (last, last_params, 0), (last, mtp["params"], mtp["expert_params"])),
    )
    # Tinker's attention mask: one seq^2 tensor per stage (Tinker itself adds it per layer).
    static += ctx.attention_mask_bytes
    transient = _stage_transient(ctx, s, (emb, norm, head), max(first_params, last_params))
    # The final norm, head (the loss's fp32 softmax) and MTP modules run in the rank's last chunk,
    # whose backward follows its forward at once: their activations are held for one micro-batch
    # at a time, however many chunk micro-batches the rank holds (Megatron's interleaved schedule,
    # megatron/core/pipeline_parallel/schedules.py: the last virtual stage's forward is
    # followed by its backward in the steady state). With 1F1B that one is the stage's in-flight
    # micro-batch, so only the interleaved and DualPipeV counts change.
    transient[last] += norm.activation_bytes + head_act + mtp["act_bytes"]
    act_bytes = np.zeros(p, dtype=np.int64)
    act_bytes[0] += emb.activation_bytes
    tail, tail_sync = _stage_tails(ctx, s, first_params, last_params + mtp["params"])
    return {
        "stage_time_ns": ns_array(time),
        "stage_comm_ns": ns_array(comm),
        "stage_hidden_ns": ns_array(np.full(p, p2p_hidden_us, dtype=float)),
        "stage_static_bytes": static + transient,
        "stage_optimizer_bytes": optimizer,
        "stage_grad_bytes": grad,
        "stage_transient_bytes": transient,
        "stage_act_bytes": act_bytes,
        "stage_mask_bytes": np.full(p, ctx.attention_mask_bytes, dtype=np.int64),
        "stage_inflight_x_v": _inflight(s, v, num_micro),
        "stage_tail_ns": tail,
        "stage_tail_sync_ns": tail_sync,
        "fixed_ns_per_microbatch": round(1e3 * ctx.rates.fixed_us_per_microbatch),
        "estimated": emb.estimated or norm.estimated or head.estimated,
    }


def _edge_tp_comm_us(ctx: TermContext, s: Strategy) -> tuple[float, float]:
    """The tensor-parallel collectives of the embedding and the output layer (us a micro-batch)."""
    if s.tp == 1 or ctx.tp_comm_in_times:  # Tinker's block times include them
        return 0.0, 0.0
    act = m_tokens(ctx.model, s) * ctx.model.hidden_size * ctx.bpe
    # Vocab-parallel embedding: all-reduce (reduce-scatter with SP) of its output, forward only.
    # Column-parallel output layer: all-gather of its input forward + reduce-scatter backward with
    # SP, else an all-reduce of the input gradient backward: one pair either way.
    return ctx.tp_pair_us(s, act) / (2 if s.sp else 1), ctx.tp_pair_us(s, act)


def _stage_transient(ctx: TermContext, s: Strategy, edges, edge_params: int) -> np.ndarray:
    """Per stage the largest transient of its blocks (the layers' everywhere, the embedding's on
    the first stage, the final norm's and head's on the head stage; `edges` is those three) plus
    the ZeRO 2/3 gathered unit and its gradient (zero_terms.gathered_bytes)."""
    emb, norm, head = edges
    last = head_stage(s)
    layer_costs = [ctx.cost(ctx.layer_block[k], s, *ctx.layer_shape(k, s)) for k in set(ctx.kinds)]
    transient = np.full(s.pp, max(cost.transient_bytes for cost in layer_costs), dtype=np.int64)
    transient[0] = max(transient[0], emb.transient_bytes)
    transient[last] = max(transient[last], norm.transient_bytes, head.transient_bytes)
    unit = max([cost.param_count for cost in layer_costs] + [edge_params])
    return transient + gathered_bytes(s, unit, ctx.bpe)


def _edge_param_bytes(ctx: TermContext, s: Strategy, parts) -> tuple[np.ndarray, ...]:
    """(weights + gradients + states, states, gradients) per stage of the (stage, dense params,
    expert params) parts that are not decoder layers (embedding, head, MTP modules)."""
    static, optimizer, grad = (np.zeros(s.pp, dtype=np.int64) for _ in range(3))
    for index, params, experts in parts:
        weights, opt = param_bytes(ctx, s, params, experts)  # weights include the gradients
        static[index] += weights + opt
        optimizer[index] += opt
        grad[index] += grad_bytes(ctx, s, params, experts)
    return static, optimizer, grad


def _mtp_terms(ctx: TermContext, s: Strategy, norm, head, head_act: int) -> dict:
    """The multi-token-prediction modules on the stage of the output layer (`--mtp-num-layers`).

    Each MTP module is one more decoder layer (of the model's last layer kind), two norms, a
    projection h x 2h of the concatenated embedding and hidden state, and the shared output head
    run again (DeepSeek-V3 technical report, arXiv:2412.19437, section 2.2; Megatron-LM
    megatron/core/transformer/multi_token_prediction.py places them on the last pipeline stage).
    ASSUMPTION: the projection's compute is left out (2 h^2 per token, small beside the layer).

    A stage with MTP modules that is not the first holds its own copy of the word embeddings
    (vocab/tp x h, tied to the first stage's): megatron/core/models/gpt/gpt_model.py builds
    `self.embedding` when `pre_process or mtp_process` (megatron-core 0.16.1, GPTModel.__init__;
    its sharded_state_dict ties the copy). With tied embeddings that copy is the head's
    (_head_params), so it is added for untied models only."""
    k = ctx.model.mtp_num_layers
    if not k:
        return {"time_us": 0.0, "comm_us": 0.0, "params": 0, "expert_params": 0, "act_bytes": 0}
    kind = ctx.kinds[-1]
    layer = ctx.cost(ctx.layer_block[kind], s, *ctx.layer_shape(kind, s))
    fwd_comm, bwd_comm, _ = layer_comm_us(ctx, kind, s, layer)
    comm = fwd_comm + bwd_comm
    per_module = layer.fwd_us + layer.bwd_us + 2 * (norm.fwd_us + norm.bwd_us)
    per_module += head.fwd_us + head.bwd_us + comm
    h = ctx.model.hidden_size
    dense = layer.param_count - layer.expert_param_count + 2 * norm.param_count + 2 * h * h // s.tp
    embedding = 0
    if ctx.model.untie_embeddings_and_output_weights and head_stage(s) != 0:
        embedding = ctx.model.vocab_size_for(s.tp) // s.tp * h
    return {
        "time_us": k * per_module,
        "comm_us": k * comm,
        "params": k * dense + embedding,
        "expert_params": k * layer.expert_param_count,
        "act_bytes": k * (layer.activation_bytes + head_act),
    }


def _head_params(ctx: TermContext, s: Strategy, head) -> int:
    """Output-layer parameters held by the last stage.

    Untied: the head's own weights. Tied (Megatron's default): one stage shares the embedding;
    with pp > 1 the last stage keeps a copy of the word embeddings (vocab/tp x h).
    """
    if ctx.model.untie_embeddings_and_output_weights:
        return head.param_count
    if s.pp == 1 or head_stage(s) == 0:
        return 0
    return ctx.model.vocab_size_for(s.tp) // s.tp * ctx.model.hidden_size


def _p2p_us(ctx: TermContext, s: Strategy) -> tuple[float, float]:
    """(exposed, hidden) pipeline send/recv per micro-batch: one activation forward and one
    gradient backward per chunk (v per rank); with SP the tensor crossing stages is the scattered
    one (1/tp). The interleaved schedule with p2p overlap hides each hop behind the next chunk's
    forward (backward), timed with the cheapest layer kind (costs/overlap.py)."""
    if s.pp == 1:
        return 0.0, 0.0
    nbytes = m_tokens(ctx.model, s) * ctx.model.hidden_size * ctx.bpe // (s.tp if s.sp else 1)
    scope = ctx.scope(s.tp * s.cp * s.dp, s.pp)
    hop = ctx.comm.time_us("send_recv", 2, scope, nbytes)
    v = chunks_per_rank(s)
    # DualPipeV hides its p2p behind the other micro-batch's compute with the fb-overlap only
    # (dualpipev.md: with it "All2All通信和P2P通信都可以被没有依赖关系的计算掩盖").
    hides = s.moe_fb_overlap if s.schedule == Schedule.DUALPIPEV else ctx.job.overlap_p2p_comm
    if v == 1 or not hides:
        return 2 * v * hop, 0.0
    # ASSUMPTION: with uneven virtual stages (a layout) the hop hides behind the mean chunk.
    chunk = max(ctx.model.num_layers // (s.pp * v), 1)
    costs = [ctx.cost(ctx.layer_block[k], s, *ctx.layer_shape(k, s)) for k in ctx.kind_names]
    fwd = overlap.exposed(hop, chunk * min(c.fwd_us for c in costs))
    bwd = overlap.exposed(hop, chunk * min(c.bwd_us for c in costs))
    exposed = v * (fwd + bwd)
    return exposed, 2 * v * hop - exposed


def _stage_tails(ctx: TermContext, s: Strategy, first_params: int, last_params: int):
    """Constant tail per stage: collective latencies, embedding / head parameters and, with tied
    embeddings and pp > 1, the all-reduce of the word-embedding gradients between first and last."""
    p = s.pp
    latency = sum(
        (sync_us(ctx, s, size, scope, 0.0, False) for size, scope in ctx.sync_groups(s)), 0.0
    )
    sync = np.full(p, latency, dtype=float)
    # The optimizer step's scalar all-reduces, host syncs and launches (costs/step_costs.py).
    total = np.full(p, latency + step_fixed_us(ctx, s), dtype=float)
    for index, params in ((0, first_params), (head_stage(s), last_params)):
        sync_part, opt_us = tail_slope_us(ctx, s, params, 0)
        sync[index] += sync_part
        total[index] += sync_part + opt_us
    if p > 1 and head_stage(s) > 0 and not ctx.model.untie_embeddings_and_output_weights:
        words = ctx.model.vocab_size_for(s.tp) // s.tp * ctx.model.hidden_size
        scope = ctx.scope(s.tp * s.cp * s.dp * (p - 1), 2)
        shared = ctx.comm.time_us("all_reduce", 2, scope, ctx.grad_bytes * words)
        for index in (0, p - 1):
            sync[index] += shared
            total[index] += shared
    return ns_array(total), ns_array(sync)
