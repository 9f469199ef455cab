"""A ModelSpec from a Hugging Face `config.json` (the FSDP2 backend's model description).

MindSpeed-LLM's FSDP2 backend builds the model from `model.model_name_or_path` (a Hugging Face
checkpoint folder; MindSpeed-LLM docs/en/pytorch/features/fsdp2/arguments.md), so its shape is in
that folder's `config.json`, not in launch flags. The keys read here are the transformers names
(`num_hidden_layers`, `intermediate_size`, `num_key_value_heads`, `head_dim`, ...) with each
model family's MoE spellings: Qwen2/3-MoE (`num_experts`, `moe_intermediate_size`,
`decoder_sparse_step`, `shared_expert_intermediate_size`), Mixtral / GPT-OSS (`num_local_experts`,
`experts_per_token`), DeepSeek (`n_routed_experts`, `n_shared_experts`, `first_k_dense_replace`,
`moe_layer_freq`, MLA's `q_lora_rank` / `kv_lora_rank` / `qk_rope_head_dim`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tinker_opt.errors import ConfigError, ScriptError
from tinker_opt.specs import ModelSpec

_GATED_ACTIVATIONS = ("silu", "swiglu", "swish")
"""transformers' Llama-family MLPs gate with these (gate_proj * act(up_proj)): SwiGLU in Megatron terms."""


def _first(config: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return default


def _positive(config: dict[str, Any], source: str, *keys: str) -> int:
    value = _first(config, *keys)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ScriptError(
            f"{source}: '{keys[0]}' is {value!r}; a Hugging Face config.json gives it "
            "as a positive integer"
        )
    return value


def _moe_fields(config: dict[str, Any], source: str, warn: Callable[[str], None]) -> dict[str, Any]:
    """The ModelSpec MoE fields (empty for a dense model)."""
    experts = _first(config, "num_experts", "num_local_experts", "n_routed_experts")
    if not experts or experts <= 1:
        return {}
    moe_ffn = _first(config, "moe_intermediate_size", default=config.get("intermediate_size"))
    shared = config.get("shared_expert_intermediate_size")
    if shared is None and config.get("n_shared_experts"):
        shared = config["n_shared_experts"] * moe_ffn
    if config.get("mlp_only_layers"):
        warn(
            f"{source}: mlp_only_layers {config['mlp_only_layers']} are read as MoE layers "
            "(a dense layer list is not modelled)"
        )
    return {
        "num_experts": experts,
        "moe_router_topk": _first(config, "num_experts_per_tok", "experts_per_token", default=2),
        "moe_ffn_hidden_size": moe_ffn,
        "moe_shared_expert_intermediate_size": shared or None,
        "first_k_dense_replace": config.get("first_k_dense_replace") or 0,
        "moe_layer_freq": _first(config, "decoder_sparse_step", "moe_layer_freq", default=1),
    }


def _mla_fields(config: dict[str, Any]) -> dict[str, Any]:
    """Multi-head latent attention (DeepSeek-V2/V3 names), empty without `kv_lora_rank`."""
    if not config.get("kv_lora_rank"):
        return {}
    return {
        "multi_latent_attention": True,
        "q_lora_rank": config.get("q_lora_rank"),
        "kv_lora_rank": config["kv_lora_rank"],
        "qk_head_dim": config.get("qk_nope_head_dim"),
        "qk_pos_emb_head_dim": config.get("qk_rope_head_dim"),
        "v_head_dim": config.get("v_head_dim"),
    }


def _warn_other_attention(config: dict[str, Any], source: str, warn: Callable[[str], None]) -> None:
    """Attention kinds the reference layer does not have are modelled as full causal attention:
    sliding-window layers (GPT-OSS `layer_types`, `sliding_window`) and linear-attention layers
    (Qwen3-Next's Gated DeltaNet, `full_attention_interval` / `linear_*` keys)."""
    kinds = sorted({str(k) for k in config.get("layer_types") or []} - {"full_attention"})
    if config.get("full_attention_interval") or any(key.startswith("linear_") for key in config):
        kinds.append("linear_attention")
    if kinds:
        warn(
            f"{source}: {', '.join(kinds)} layers are modelled as full attention (an upper bound on their "
            "time and activations)"
        )


def model_from_hf_config(
    config: dict[str, Any],
    *,
    seq_length: int,
    source: str = "config.json",
    use_flash_attn: bool = False,
    precision: str = "bf16",
    warn: Callable[[str], None] = lambda _: None,
) -> ModelSpec:
    """The ModelSpec of a transformers config; `seq_length` comes from the training data settings.

    The vocabulary is not padded (transformers uses `vocab_size` as is); embeddings are tied
    unless `tie_word_embeddings` is false (transformers' default is tied); a config with
    `rms_norm_eps` uses RMSNorm; `hidden_act` silu means a gated (SwiGLU) MLP.
    """
    heads = _positive(config, source, "num_attention_heads")
    hidden = _positive(config, source, "hidden_size")
    vocab = _positive(config, source, "vocab_size")
    act = str(config.get("hidden_act", "silu")).lower()
    fields = {
        "num_layers": _positive(config, source, "num_hidden_layers"),
        "hidden_size": hidden,
        "ffn_hidden_size": _positive(config, source, "intermediate_size"),
        "num_attention_heads": heads,
        "num_query_groups": _first(config, "num_key_value_heads", default=heads),
        "kv_channels": _first(config, "head_dim", default=hidden // heads),
        "seq_length": seq_length,
        "vocab_size": vocab,
        "padded_vocab_size": vocab,
        "untie_embeddings_and_output_weights": not config.get("tie_word_embeddings", True),
        "swiglu": act in _GATED_ACTIVATIONS,
        "normalization": "RMSNorm" if "rms_norm_eps" in config else "LayerNorm",
        "position_embedding_type": "rope"
        if ("rope_theta" in config or "rope_scaling" in config)
        else "learned_absolute",
        "use_flash_attn": use_flash_attn,
        "attention_dropout": float(config.get("attention_dropout") or 0.0),
        "hidden_dropout": float(_first(config, "hidden_dropout", "resid_pdrop", default=0.0)),
        "add_bias_linear": bool(config.get("mlp_bias", False)),
        "precision": precision,
    }
    _warn_other_attention(config, source, warn)
    try:
        return ModelSpec(**fields, **_moe_fields(config, source, warn), **_mla_fields(config))
    except ConfigError as exc:
        raise ScriptError(f"{source}: {exc}") from None


def load_hf_config(
    model_path: str | None, model_config: str | Path | None, base_dirs: Sequence[Path]
) -> tuple[dict[str, Any], Path]:
    """The parsed config.json and where it was found.

    `model_config` (the `--model-config FILE` option) wins; otherwise `model_path/config.json`,
    a relative path tried against each of `base_dirs` (the working directory, then the script's).
    """
    if model_config is not None:
        candidates = [Path(model_config)]
    elif not model_path:
        raise ScriptError(
            "the FSDP2 config gives no model.model_name_or_path; pass --model-config "
            "FILE (the model's Hugging Face config.json)"
        )
    else:
        path = Path(model_path)
        roots = [path] if path.is_absolute() else [base / path for base in base_dirs]
        candidates = [root / "config.json" if root.suffix != ".json" else root for root in roots]
    for candidate in candidates:
        if candidate.is_file():
            return _parse(candidate), candidate
    if model_config is not None:
        raise ScriptError(f"--model-config {model_config} not found; give the model's config.json")
    raise ScriptError(
        f"the model's config.json is not at {Path(model_path or '') / 'config.json'} "
        "(model.model_name_or_path, not on this machine); pass --model-config FILE"
    )


def _parse(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScriptError(
            f"cannot read the model config {path}: {exc}; give a valid config.json"
        ) from None
    if not isinstance(data, dict):
        raise ScriptError(
            f"the model config {path} is not a JSON object; give a Hugging Face config.json"
        )
    return data
