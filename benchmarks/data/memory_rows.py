"""What the memory-run rows share (make_memory_runs.py and the row modules beside it): the
hardware objects, the H100 row builder with NeMo's settings as defaults, and the model shapes."""

from llama_shapes import llama
from run_devices import H100, nemo_strategy


def _time_from(measured) -> str:
    if not isinstance(measured, dict):
        return "step time"
    return "tokens/s" if "tokens_per_s_per_device" in measured else "none (ran, no time)"


def row(run_id, src, model, n, gbs, mbs, tp, pp, cp, vp, measured, precision, note, extra=(), **kw):
    """One H100 row: the run's layout and what was measured (`measured`: a step time in s, or the
    row's `measured` object); `kw` sets strategy fields (moe ones, recompute, optimizer text)."""
    fp8 = precision == "fp8"
    strategy = {
        **nemo_strategy(n, gbs, mbs, tp, pp, cp, vp, precision, extra),
        "fp8_param_gather": fp8,
        **kw,
    }
    return {
        "id": run_id,
        "category": "memory_h100",
        "source": src,
        "hardware": H100,
        "model": model,
        "strategy": strategy,
        "n_devices": n,
        "measured": measured if isinstance(measured, dict) else {"step_time_s": measured},
        "stated_vs_inferred": note,
        "flags": {
            "moe": "moe" in model,
            "cp_gt_1": cp > 1,
            "fp8": fp8,
            "iteration_time_from": _time_from(measured),
        },
    }


def llama31(key, kv_heads=None):
    m = llama(key)
    m["name"] = m["name"].replace("LLaMA-3-", "LLaMA-3.1-")
    if kv_heads:
        m["kv_heads"] = kv_heads
    return m


NEMOTRON_FLAGS = [
    "--position-embedding-type rope",
    "--disable-bias-linear",
    "--untie-embeddings-and-output-weights",
    "--attention-dropout 0.0",
    "--hidden-dropout 0.0",
    "--cross-entropy-loss-fusion",
]
"""Nemotron-4: LayerNorm, squared-ReLU MLP (not gated: the GPT-style writer's GeLU MLP has the
same shapes and saved tensors), rotary positions, no biases, untied output, no dropout
(Parmar et al. 2024, "Nemotron-4 15B Technical Report"; NeMo-Framework-Launcher
nemotron_15b.yaml / nemotron_340b.yaml: bias false, position_embedding_type rope,
share_embeddings_and_output_weights false, hidden_dropout 0.0). The last occurrence of a flag wins
(script/launch.py Launch.value), so these override the GPT-style dropout 0.1."""


def nemotron(name, layers, hidden, heads, ffn):
    return {
        "name": name,
        "arch": "gpt",
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": 8,
        "head_dim": hidden // heads,
        "ffn": ffn,
        "vocab": 256000,
        "seq": 4096,
    }
