"""Test support: deterministic synthetic profiles from formulas (no torch, no device).

Times are proportional to FLOPs (matmuls 2*tokens*params, attention 4*tokens*s*h, backward twice
the forward) at a fixed achieved throughput; activation bytes follow Korthikanti et al. (2022)
with flash attention (34*s*b*h/t with sequence parallelism, s*b*h*(10 + 24/t) without); weights
and communication from the same sizes. This is a stand-in for `tinker-opt profile` in tests and
benchmarks, not a product feature.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd

from tinker_opt.hardware import HardwareSpec, LinkSpec, comm_table
from tinker_opt.profile.meta import ProfileMeta
from tinker_opt.profile.store import BLOCK_COLUMNS, ProfiledData
from tinker_opt.specs import ClusterSpec, ModelSpec

ACHIEVED_TFLOPS = 150.0
HARDWARE = HardwareSpec(
    name="synthetic",
    devices_per_node=8,
    memory_gb=64,
    peak_tflops={"bf16": 300.0},
    memory_bandwidth_gbs=1600.0,
    intra_node=LinkSpec(100.0, 5.0),
    inter_node=LinkSpec(20.0, 10.0),
)


def dense_model(
    num_layers: int = 8,
    hidden: int = 1024,
    heads: int = 16,
    groups: int | None = None,
    seq: int = 2048,
    vocab: int = 32000,
    ffn: int | None = None,
) -> ModelSpec:
    return ModelSpec(
        num_layers=num_layers,
        hidden_size=hidden,
        ffn_hidden_size=ffn or 4 * hidden,
        num_attention_heads=heads,
        num_query_groups=groups or heads,
        kv_channels=hidden // heads,
        seq_length=seq,
        vocab_size=vocab,
        use_flash_attn=True,
        normalization="RMSNorm",
        swiglu=True,
    )


def moe_model(
    num_layers: int = 8,
    hidden: int = 1024,
    heads: int = 16,
    experts: int = 8,
    seq: int = 2048,
    vocab: int = 32000,
    topk: int = 2,
    first_dense: int = 0,
    layer_freq: int = 1,
) -> ModelSpec:
    base = dense_model(num_layers, hidden, heads, seq=seq, vocab=vocab)
    return ModelSpec(
        **{
            **base.to_dict(),
            "noop_layers": (),
            "num_experts": experts,
            "moe_router_topk": topk,
            "moe_ffn_hidden_size": 2 * hidden,
            "first_k_dense_replace": first_dense,
            "moe_layer_freq": layer_freq,
        }
    )


def _us(flops: float) -> int:
    return max(1, round(flops / (ACHIEVED_TFLOPS * 1e6)))


def _layer_row(
    m: ModelSpec, kind: str, tp: int, sp: int, cp: int, ep: int, etp: int, mbs: int
) -> dict:
    tokens = m.seq_length // cp * mbs
    h, d = m.hidden_size, m.kv_channels
    attn_params = (h * m.num_attention_heads * d * 2 + 2 * h * m.num_query_groups * d) // tp
    if kind == "moe":
        expert_params = m.num_experts * 3 * h * m.moe_ffn_hidden_size // (ep * etp)
        active = m.moe_router_topk * 3 * h * m.moe_ffn_hidden_size // etp
        mlp_params, flops_params = expert_params + h * m.num_experts, attn_params + active
    else:
        expert_params, mlp_params = 0, 3 * h * m.ffn_hidden_size // tp
        flops_params = attn_params + mlp_params
    fwd_flops = 2 * tokens * flops_params + 4 * tokens * m.seq_length * h / tp
    act = tokens * h * 34 // tp if sp else tokens * h * (10 + 24 // tp)
    params = attn_params + mlp_params + 2 * h
    return {
        "fwd_us": _us(fwd_flops),
        "bwd_us": _us(2 * fwd_flops),
        "param_count": params,
        "expert_param_count": expert_params,
        "weight_bytes": 2 * params,
        "input_bytes": 2 * tokens * h // (tp if sp else 1),
        "output_bytes": 2 * tokens * h // (tp if sp else 1),
        "activation_bytes": act,
        "transient_bytes": 2 * tokens * m.ffn_hidden_size // tp,
        "selective_activation_bytes": act * 3 // 4,
        "selective_recompute_us": _us(0.1 * fwd_flops),
    }


def _edge_rows(m: ModelSpec, tp: int, sp: int, cp: int, mbs: int) -> dict[str, dict]:
    tokens = m.seq_length // cp * mbs
    h, vocab = m.hidden_size, m.vocab_size_for(tp)
    scattered = tokens * h * 2 // (tp if sp else 1)
    head_flops = 2 * tokens * h * vocab / tp
    base = {"expert_param_count": 0, "selective_recompute_us": 0}
    emb = {
        "fwd_us": 20 * mbs,
        "bwd_us": 40 * mbs,
        "param_count": vocab // tp * h,
        "input_bytes": tokens * 8,
        "output_bytes": scattered,
        "activation_bytes": scattered,
        "transient_bytes": scattered,
    }
    norm = {
        "fwd_us": 5 * mbs,
        "bwd_us": 10 * mbs,
        "param_count": h,
        "input_bytes": scattered,
        "output_bytes": scattered,
        "activation_bytes": scattered,
        "transient_bytes": scattered,
    }
    head = {
        "fwd_us": _us(head_flops),
        "bwd_us": _us(2 * head_flops),
        "param_count": vocab // tp * h if m.untie_embeddings_and_output_weights else 0,
        "input_bytes": scattered,
        "output_bytes": tokens * vocab // tp * 4,
        "activation_bytes": tokens * vocab // tp * 4,
        "transient_bytes": tokens * vocab // tp * 4,
    }
    out = {}
    for name, row in (("embedding", emb), ("final_norm", norm), ("head", head)):
        row = {**base, **row}
        row["weight_bytes"] = 2 * row["param_count"]
        row["selective_activation_bytes"] = row["activation_bytes"]
        out[name] = row
    return out


def synthetic_blocks(
    m: ModelSpec, *, tps=(1, 2, 4, 8), cps=(1, 2), eps=(1, 2, 4, 8), mbss=(1, 2, 4)
) -> pd.DataFrame:
    """blocks.csv rows for every (tp, sp, cp[, ep, etp], mbs) shape the model admits."""
    rows = []
    kinds = sorted(set(m.layer_kinds()))
    for tp, sp, cp, mbs in itertools.product(tps, (0, 1), cps, mbss):
        if (sp and tp == 1) or m.num_attention_heads % tp or m.seq_length % (cp * tp):
            continue
        key = {
            "tp": tp,
            "sp": sp,
            "cp": cp,
            "mbs": mbs,
            "fwd_us_spread": 0,
            "bwd_us_spread": 0,
            "status": "ok",
        }
        for name, row in _edge_rows(m, tp, sp, cp, mbs).items():
            rows.append({"block": name, "ep": 1, "etp": 1, **key, **row})
        for kind in kinds:
            block = "layer" if len(kinds) == 1 else f"layer.{kind}"
            shard = [(1, 1)]
            if kind == "moe" or (m.is_moe and block == "layer"):
                shard = [
                    (ep, etp) for ep in eps for etp in sorted({1, tp}) if m.num_experts % ep == 0
                ]
            for ep, etp in shard:
                rows.append(
                    {
                        "block": block,
                        "ep": ep,
                        "etp": etp,
                        **key,
                        **_layer_row(
                            m,
                            "moe" if m.is_moe and kind != "dense" else "dense",
                            tp,
                            sp,
                            cp,
                            ep,
                            etp,
                            mbs,
                        ),
                    }
                )
    return pd.DataFrame(rows).reindex(columns=list(BLOCK_COLUMNS), fill_value=0)


def synthetic_profile(m: ModelSpec, *, inter_node: bool = True, **shapes) -> ProfiledData:
    """A ProfiledData in memory (blocks from formulas, comm.csv from the HARDWARE links)."""
    comm = comm_table(HARDWARE, max_group_size=64)
    if not inter_node:
        comm = comm[comm["scope"] == "intra_node"].reset_index(drop=True)
    return ProfiledData(
        path=Path("synthetic"),
        blocks=synthetic_blocks(m, **shapes),
        comm=comm,
        meta=ProfileMeta(model=m.to_dict()),
    )


def cluster(num_nodes: int = 1, devices_per_node: int = 8, memory_mb: float = 60000) -> ClusterSpec:
    return ClusterSpec(
        num_nodes=num_nodes, devices_per_node=devices_per_node, memory_limit_mb=memory_mb
    )


def solvers_agree(cost_model, space, *, reference=None, top_k: int = 3) -> dict:
    """Search with cpsat, milp and enum and assert that each finds brute force's optimum over the
    outer configurations of `reference` (default: `cost_model`), and nothing exactly when brute
    force finds nothing; every returned strategy re-evaluates to its own objective. Returns
    {solver: SearchResult} of the solvers that found a strategy, for the caller's own checks."""
    import pytest

    from tinker_opt.errors import InfeasibleError
    from tinker_opt.solve.enumerate import brute_force
    from tinker_opt.solve.search import _outers, search

    reference = reference or cost_model
    brute = brute_force(reference, _outers(reference, space))
    expected = brute[0].time_ns / 1e6 if brute else None
    results = {}
    for solver in ("cpsat", "milp", "enum"):
        try:
            result = search(
                cost_model, solver=solver, cpus=1, top_k=top_k, space=space, time_limit_s=30
            )
        except InfeasibleError:
            assert expected is None, solver
            continue
        assert expected is not None and result.objective_ms == pytest.approx(expected, rel=1e-12), (
            solver
        )
        assert result.status == "optimal", (solver, result.status)
        for evaluation in result.top:
            again = cost_model.evaluate(evaluation.strategy)
            assert again.time_ns_x_vpp == evaluation.time_ns_x_vpp and again.fits, solver
        results[solver] = result
    return results
