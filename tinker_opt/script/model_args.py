"""Building the ModelSpec from a launch's arguments (Megatron / MindSpeed-LLM names and defaults)."""

from __future__ import annotations

from collections.abc import Callable
from typing import overload

from tinker_opt.choices import Dispatcher
from tinker_opt.errors import ConfigError, ScriptError
from tinker_opt.knobs import CHOICES
from tinker_opt.script.launch import Launch
from tinker_opt.script.layer_pattern import parse_layer_freq, pattern_for_layers
from tinker_opt.specs import FUSED_KERNEL_FLAGS, NORMALIZATIONS, ModelSpec

REQUIRED_MODEL_FLAGS = ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length")
DEFAULT_VOCAB_SIZE = 32000
"""Assumed when neither --vocab-size nor --padded-vocab-size is given (the tokenizer decides)."""


@overload
def int_value(launch: Launch, flag: str, default: int) -> int: ...
@overload
def int_value(launch: Launch, flag: str, default: None = None) -> int | None: ...
def int_value(launch: Launch, flag: str, default: int | None = None) -> int | None:
    """The flag's integer value (last occurrence), `default` when absent; ScriptError when not an integer."""
    arg = launch.last(flag)
    if arg is None:
        return default
    text = arg.value_text
    try:
        return int(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        shown = "no value" if not text else f"value {text!r}"
        raise ScriptError(
            f"{flag} has {shown}; give it an integer (is the variable it uses set?)"
        ) from None


def float_value(launch: Launch, flag: str, default: float) -> float:
    text = launch.value(flag)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise ScriptError(f"{flag} has value {text!r}; give it a number") from None


def int_list(launch: Launch, flag: str) -> tuple[int, ...] | None:
    """A comma-separated integer list such as `--noop-layers 61,62,63`, None when absent."""
    text = launch.value(flag)
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise ScriptError(
            f"{flag} has value {text!r}; give comma-separated integers like 4,4,4"
        ) from None


def script_num_layers(launch: Launch) -> int:
    """`--num-layers` as the script writes it (noop layers included)."""
    value = int_value(launch, "--num-layers")
    if value is None:
        raise ScriptError(
            "missing model argument --num-layers; add --num-layers N to the launch arguments"
        )
    return value


def _require(launch: Launch) -> None:
    missing = [flag for flag in REQUIRED_MODEL_FLAGS if not launch.has(flag)]
    if missing:
        raise ScriptError(
            f"missing model argument(s) {', '.join(missing)} on the launch line; add them "
            "(e.g. --hidden-size 4096 --num-attention-heads 32 --seq-length 4096)"
        )


def _ffn_hidden_size(launch: Launch, hidden: int) -> int:
    given = int_value(launch, "--ffn-hidden-size")
    if given is not None:
        return given
    if launch.has("--swiglu"):
        return int((4 * hidden * 2 / 3) / 64) * 64  # Megatron's swiglu default, a multiple of 64
    return 4 * hidden  # Megatron's default


def _vocab(launch: Launch, warn: Callable[[str], None]) -> tuple[int, int | None]:
    padded = int_value(launch, "--padded-vocab-size")
    vocab = int_value(launch, "--vocab-size")
    if vocab is None and padded is None:
        warn(
            f"the vocabulary size is not in the script (the tokenizer sets it); assuming "
            f"{DEFAULT_VOCAB_SIZE}: add --vocab-size N for exact embedding and head sizes"
        )
        vocab = DEFAULT_VOCAB_SIZE
    return (vocab or padded), padded  # type: ignore[return-value]


def _normalization(launch: Launch, warn: Callable[[str], None]) -> str:
    value = launch.value("--normalization")
    if value is None:
        rms = launch.has("--use-fused-rmsnorm") or launch.has("--use-rmsnorm")
        return "RMSNorm" if rms else "LayerNorm"
    if value not in NORMALIZATIONS:
        warn(f"--normalization {value} is modelled as LayerNorm")
        return "LayerNorm"
    return value


def _layer_freq(launch: Launch, noop: tuple[int, ...]) -> dict:
    """`--moe-layer-freq` as an integer frequency or a pattern over the computing layers."""
    text = launch.value("--moe-layer-freq")
    if not text:
        return {"moe_layer_freq": 1}
    value = parse_layer_freq(text)
    pattern = pattern_for_layers(value, script_num_layers(launch), noop)
    return {"moe_layer_freq": value if isinstance(value, int) else 1, "moe_layer_pattern": pattern}


_DISPATCHER = CHOICES["moe_token_dispatcher_type"]
DISPATCHER_FLAG = _DISPATCHER.flag
DEEPEP_FLAG = "--moe-enable-deepep"
FLEX_BACKEND_FLAG = "--moe-flex-dispatcher-backend"
"""Megatron-Core 0.15+ names DeepEP as the flex dispatcher's backend (`deepep`, the default, or
`hybridep`) instead of `--moe-enable-deepep` (megatron/core/transformer/moe/README.md, v0.15)."""


def _moe_fields(launch: Launch, noop: tuple[int, ...]) -> dict:
    experts = int_value(launch, "--num-experts")
    if not experts:
        return {}
    moe_ffn = int_value(launch, "--moe-ffn-hidden-size") or int_value(
        launch, "--moe-intermediate-size"
    )
    shared = int_value(launch, "--moe-shared-expert-intermediate-size")
    n_shared = int_value(launch, "--n-shared-experts")
    if shared is None and n_shared and moe_ffn:
        shared = n_shared * moe_ffn
    return {
        "num_experts": experts,
        "moe_router_topk": int_value(launch, "--moe-router-topk", 2),
        "moe_ffn_hidden_size": moe_ffn,
        "moe_shared_expert_intermediate_size": shared,
        "first_k_dense_replace": max(int_value(launch, "--first-k-dense-replace", 0), 0),
        **_layer_freq(launch, noop),
        **_routing_fields(launch),
        "moe_enable_deepep": launch.has(DEEPEP_FLAG) or launch.value(FLEX_BACKEND_FLAG) == "deepep",
    }


def _routing_fields(launch: Launch) -> dict:
    """How tokens reach the experts (Megatron's MoE flags; ModelLink's legacy GShard MoE is
    recognised by its `--moe-train-capacity-factor`, versions.py)."""
    gshard = launch.has("--moe-train-capacity-factor")
    flag = "--moe-train-capacity-factor" if gshard else "--moe-expert-capacity-factor"
    capacity = float_value(launch, flag, 0.0)
    dispatcher = launch.value(DISPATCHER_FLAG) or _DISPATCHER.default
    return {
        "moe_token_dispatcher_type": Dispatcher.ALLTOALL if gshard else dispatcher,
        "moe_grouped_gemm": launch.has("--moe-grouped-gemm"),
        "moe_expert_capacity_factor": capacity if capacity > 0 else None,
        "moe_pad_expert_input_to_capacity": gshard
        or launch.has("--moe-pad-expert-input-to-capacity"),
        "moe_gshard_dispatch": gshard,
        **({"moe_load_imbalance": 1.0} if launch.has("--moe-router-force-load-balancing") else {}),
    }


def _mla_fields(launch: Launch) -> dict:
    if not (launch.has("--multi-latent-attention") or launch.has("--multi-head-latent-attention")):
        return {}
    return {
        "multi_latent_attention": True,
        "q_lora_rank": int_value(launch, "--q-lora-rank"),
        "kv_lora_rank": int_value(launch, "--kv-lora-rank"),
        "qk_head_dim": int_value(launch, "--qk-head-dim")
        or int_value(launch, "--qk-nope-head-dim"),
        "qk_pos_emb_head_dim": (
            int_value(launch, "--qk-pos-emb-head-dim") or int_value(launch, "--qk-rope-head-dim")
        ),
        "v_head_dim": int_value(launch, "--v-head-dim"),
    }


def _fp8_fields(launch: Launch) -> dict:
    """FP8 flags (megatron/training/arguments.py _add_transformer_engine_args; MindSpeed-LLM
    has none): read only with `--fp8-format`, which switches FP8 on."""
    fp8_format = launch.value(CHOICES["fp8_format"].flag)
    if not fp8_format:
        return {}
    return {
        "fp8_format": fp8_format,
        "fp8_recipe": launch.value("--fp8-recipe") or "delayed",
        "fp8_param_gather": launch.has("--fp8-param-gather"),
        "fp8_amax_history_len": int_value(launch, "--fp8-amax-history-len", 1),
    }


def _precision(launch: Launch) -> str:
    if launch.has("--bf16"):
        return "bf16"
    return "fp16" if launch.has("--fp16") else "fp32"


def read_model(launch: Launch, warn: Callable[[str], None]) -> ModelSpec:
    """The network the launch arguments describe; ScriptError for missing or bad values."""
    _require(launch)  # present, so the defaults below are never used
    hidden = int_value(launch, "--hidden-size", 0)
    heads = int_value(launch, "--num-attention-heads", 0)
    noop = int_list(launch, "--noop-layers") or ()
    groups = (
        int_value(launch, "--num-query-groups") if launch.has("--group-query-attention") else None
    )
    vocab, padded = _vocab(launch, warn)
    position = launch.value("--position-embedding-type") or (
        "rope" if launch.has("--use-rotary-position-embeddings") else "learned_absolute"
    )
    values = dict(
        num_layers=script_num_layers(launch) - len(noop),
        hidden_size=hidden,
        ffn_hidden_size=_ffn_hidden_size(launch, hidden),
        num_attention_heads=heads,
        num_query_groups=groups or heads,
        kv_channels=int_value(launch, "--kv-channels") or (hidden // heads if heads else 0),
        seq_length=int_value(launch, "--seq-length"),
        vocab_size=vocab,
        padded_vocab_size=padded,
        make_vocab_size_divisible_by=int_value(launch, "--make-vocab-size-divisible-by", 128),
        untie_embeddings_and_output_weights=launch.has("--untie-embeddings-and-output-weights"),
        swiglu=launch.has("--swiglu"),
        normalization=_normalization(launch, warn),
        position_embedding_type=position,
        use_flash_attn=launch.has("--use-flash-attn")
        or launch.value("--attention-backend") == "flash",
        fused_kernels=tuple(op for flag, op in FUSED_KERNEL_FLAGS.items() if launch.has(flag)),
        te_cross_entropy=launch.has("--cross-entropy-loss-fusion")
        and launch.value("--cross-entropy-fusion-impl") == "te",
        attention_dropout=float_value(launch, "--attention-dropout", 0.1),
        hidden_dropout=float_value(launch, "--hidden-dropout", 0.1),
        add_bias_linear=not launch.has("--disable-bias-linear"),
        mtp_num_layers=int_value(launch, "--mtp-num-layers", 0),
        precision=_precision(launch),
        noop_layers=tuple(noop),
        **_moe_fields(launch, tuple(noop)),
        **_mla_fields(launch),
        **_fp8_fields(launch),
    )
    try:
        return ModelSpec(**values)
    except ConfigError as exc:
        raise ScriptError(f"the script's model arguments are inconsistent: {exc}") from None


def unpriced_model_warnings(model: ModelSpec) -> list[str]:
    """Model settings that are read (inspect reports them, apply keeps them) but not priced as
    written. Every dispatcher is priced by its own traffic (costs/moe_terms.py) and the MTP modules
    on the output stage (costs/stage_terms.py); DeepEP is priced as the flex dispatcher it needs."""
    if (
        model.is_moe
        and model.moe_enable_deepep
        and model.moe_token_dispatcher_type != Dispatcher.FLEX
    ):
        return [
            f"{DEEPEP_FLAG} with {DISPATCHER_FLAG} {model.moe_token_dispatcher_type}: DeepEP "
            "runs under the flex dispatcher only; priced as the dispatcher named"
        ]
    return []
