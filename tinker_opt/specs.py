"""The domain descriptions that every stage shares: the model, the training job and the cluster.

Three separate frozen dataclasses (as Calculon separates system, application and execution):
`ModelSpec` is what the launch script says about the network, `TrainSpec` what it says about the
job (batch sizes, nodes, the strategy it currently uses, the framework flavour), `ClusterSpec` the
target the search plans for. Field names follow Megatron's argument names in snake_case so that
`inspect --json` and `meta.json` can print them as they are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tinker_opt.choices import Dispatcher, choice
from tinker_opt.errors import ConfigError
from tinker_opt.knobs import CHOICES
from tinker_opt.optimizer_precision import OptimizerPrecision
from tinker_opt.strategy import Strategy

NORMALIZATIONS = ("LayerNorm", "RMSNorm")
FUSED_KERNEL_OPS = ("rmsnorm", "rope", "swiglu")
"""Ops a launch can run as fused kernels besides attention (profile/kernels.py OPS)."""
FUSED_KERNEL_FLAGS = {
    "--use-fused-rmsnorm": "rmsnorm",
    "--use-fused-swiglu": "swiglu",
    "--use-fused-rotary-pos-emb": "rope",
}
"""MindSpeed-LLM's flags that ask for a fused kernel, and the op each one fuses."""
PRECISIONS = ("bf16", "fp16", "fp32")
FP8_FORMATS: tuple[str, ...] = CHOICES["fp8_format"].choices
FP8_RECIPES = ("delayed", "tensorwise", "blockwise", "mxfp8")
"""Megatron-LM's `--fp8-format` and `--fp8-recipe` choices (megatron/training/arguments.py,
_add_transformer_engine_args; recipe default `delayed`)."""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """The network as the launch script defines it (sizes in elements, not bytes)."""

    num_layers: int
    """Decoder layers that compute, net of `--noop-layers`."""
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    """Key/value head groups; equals num_attention_heads without grouped-query attention."""
    kv_channels: int
    """Per-head dimension (`--kv-channels`, default hidden_size / num_attention_heads)."""
    seq_length: int
    vocab_size: int
    """Vocabulary before padding (`--vocab-size`, or the tokenizer's size)."""
    padded_vocab_size: int | None = None
    """`--padded-vocab-size` when the script fixes it; otherwise padding follows Megatron's rule."""
    make_vocab_size_divisible_by: int = 128
    untie_embeddings_and_output_weights: bool = False
    swiglu: bool = False
    normalization: str = "LayerNorm"
    position_embedding_type: str = "learned_absolute"
    use_flash_attn: bool = False
    fused_kernels: tuple[str, ...] = ()
    """Ops besides attention the launch runs as fused kernels (`rmsnorm`, `swiglu`, `rope`; sorted):
    MindSpeed's `--use-fused-*` flags, or Megatron-Core's Transformer Engine defaults
    (script/reader.py `_te_kernels`). They save fewer tensors than the reference ops
    (profile/kernels.py FUSED_SAVES)."""
    te_cross_entropy: bool = False
    """The loss is Transformer Engine's cross entropy (`--cross-entropy-loss-fusion
    --cross-entropy-fusion-impl te`): it keeps the logits in their own dtype, not an fp32 softmax
    (costs/loss_terms.py)."""
    attention_dropout: float = 0.1
    hidden_dropout: float = 0.1
    add_bias_linear: bool = True
    # Mixture of experts (num_experts None or 0 means a dense model).
    num_experts: int | None = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    moe_shared_expert_intermediate_size: int | None = None
    """Total width of the shared experts (n_shared_experts x moe_ffn_hidden_size), None if none."""
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    """Every k-th layer is MoE (Megatron's integer `--moe-layer-freq`); unused with a pattern."""
    moe_layer_pattern: tuple[int, ...] | None = None
    """Megatron's list form of `--moe-layer-freq` over the computing layers: 1 = MoE, 0 = dense
    (script/layer_pattern.py); None when the frequency is an integer."""
    moe_token_dispatcher_type: Dispatcher = Dispatcher.ALLGATHER
    """`--moe-token-dispatcher-type` (allgather | alltoall | alltoall_seq | flex); Megatron-LM's
    default is allgather (megatron/training/arguments.py)."""
    moe_enable_deepep: bool = False
    """`--moe-enable-deepep`: DeepEP's fused dispatch (with the flex dispatcher)."""
    moe_grouped_gemm: bool = False
    """`--moe-grouped-gemm`: the local experts run as one grouped GEMM, else one GEMM per expert."""
    moe_expert_capacity_factor: float | None = None
    """`--moe-expert-capacity-factor` (legacy `--moe-train-capacity-factor`): tokens above
    capacity x the mean load of an expert are dropped; None is dropless."""
    moe_pad_expert_input_to_capacity: bool = False
    """`--moe-pad-expert-input-to-capacity`: every expert computes exactly its capacity."""
    moe_gshard_dispatch: bool = False
    """The legacy GShard / DeepSpeed MoE of ModelLink (`--moe-train-capacity-factor`): one-hot
    einsum dispatch and combine, every expert padded to its capacity, a loop over the experts."""
    moe_load_imbalance: float | None = None
    """Busiest EP rank's routed tokens / the mean under dropless routing (profile/shape.py expert_load);
    None when the script does not say (the profile's `--moe-load-imbalance` then decides; 1 with
    `--moe-router-force-load-balancing`)."""
    # Multi-head latent attention and multi-token prediction (DeepSeek style).
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None
    qk_pos_emb_head_dim: int | None = None
    v_head_dim: int | None = None
    mtp_num_layers: int = 0
    precision: str = "bf16"
    noop_layers: tuple[int, ...] = ()
    """Indices of `--noop-layers` (they count in `--num-layers` of the script but do not compute)."""
    # FP8 training (Transformer Engine; the linear layers' GEMMs in FP8, the rest in `precision`).
    fp8_format: str | None = None
    """`--fp8-format` (`e4m3` or `hybrid`: E4M3 forward, E5M2 gradients); None: no FP8."""
    fp8_recipe: str = "delayed"
    """`--fp8-recipe`: delayed (amax history), tensorwise (current per-tensor scale), blockwise, mxfp8."""
    fp8_param_gather: bool = False
    """`--fp8-param-gather`: the compute weights are kept in FP8 and all-gathered in FP8."""
    fp8_amax_history_len: int = 1
    """`--fp8-amax-history-len` (Megatron's default 1): amax values kept per FP8 tensor (delayed)."""

    def __post_init__(self) -> None:
        for name in (
            "num_layers",
            "hidden_size",
            "ffn_hidden_size",
            "num_attention_heads",
            "num_query_groups",
            "kv_channels",
            "seq_length",
            "vocab_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"model {name} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_query_groups:
            raise ConfigError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_query_groups ({self.num_query_groups})"
            )
        if self.normalization not in NORMALIZATIONS:
            raise ConfigError(
                f"normalization must be one of {NORMALIZATIONS}, got {self.normalization!r}"
            )
        if self.moe_layer_pattern is not None and len(self.moe_layer_pattern) != self.num_layers:
            raise ConfigError(
                f"moe_layer_pattern has {len(self.moe_layer_pattern)} entries but the model has "
                f"{self.num_layers} computing layers"
            )
        dispatcher = choice(
            Dispatcher, self.moe_token_dispatcher_type, "moe_token_dispatcher_type", ConfigError
        )
        object.__setattr__(self, "moe_token_dispatcher_type", dispatcher)
        unknown = sorted(set(self.fused_kernels) - set(FUSED_KERNEL_OPS))
        if unknown:
            raise ConfigError(f"fused_kernels must be among {FUSED_KERNEL_OPS}, got {unknown}")
        object.__setattr__(self, "fused_kernels", tuple(sorted(set(self.fused_kernels))))
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.moe_load_imbalance is not None and self.moe_load_imbalance < 1:
            raise ConfigError(f"moe_load_imbalance must be >= 1, got {self.moe_load_imbalance}")
        self._check_fp8()

    def _check_fp8(self) -> None:
        if self.fp8_format not in (None, *FP8_FORMATS):
            raise ConfigError(f"fp8_format must be one of {FP8_FORMATS}, got {self.fp8_format!r}")
        if self.fp8_recipe not in FP8_RECIPES:
            raise ConfigError(f"fp8_recipe must be one of {FP8_RECIPES}, got {self.fp8_recipe!r}")
        if self.fp8_format and self.precision == "fp32":
            raise ConfigError("FP8 training (fp8_format) needs --bf16 or --fp16 besides, got fp32")
        if self.fp8_amax_history_len < 1:
            raise ConfigError(f"fp8_amax_history_len must be >= 1, got {self.fp8_amax_history_len}")

    @property
    def is_fp8(self) -> bool:
        """The linear layers run their GEMMs in FP8 (Transformer Engine's fp8_autocast)."""
        return self.fp8_format is not None

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None and self.num_experts > 1

    @property
    def bytes_per_element(self) -> int:
        """Bytes of one activation / weight element in the training precision."""
        return 4 if self.precision == "fp32" else 2

    def vocab_size_for(self, tp: int) -> int:
        """Vocabulary after Megatron's padding: a multiple of make_vocab_size_divisible_by x tp."""
        if self.padded_vocab_size:
            return self.padded_vocab_size
        multiple = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab_size // multiple) * multiple

    def with_load_imbalance(self, imbalance: float) -> ModelSpec:
        """This model with `imbalance` as its expert load when the script does not fix one."""
        if not self.is_moe or self.moe_load_imbalance is not None:
            return self
        return dataclasses.replace(self, moe_load_imbalance=imbalance)

    def layer_kinds(self) -> tuple[str, ...]:
        """'dense' or 'moe' for each computing layer, in order (Megatron's first-k-dense and layer-freq rules)."""
        if not self.is_moe:
            return ("dense",) * self.num_layers
        freq = self.moe_layer_freq if self.moe_layer_freq and self.moe_layer_freq > 0 else 1
        pattern = self.moe_layer_pattern or tuple(
            int(i % freq == 0) for i in range(self.num_layers)
        )
        first_dense = max(self.first_k_dense_replace, 0)
        return tuple(
            "moe" if (i >= first_dense and pattern[i]) else "dense" for i in range(self.num_layers)
        )

    def layer_block_names(self) -> tuple[str, ...]:
        """Block names of blocks.csv for the decoder layers: `layer`, or `layer.dense` / `layer.moe`."""
        kinds = sorted(set(self.layer_kinds()))
        if len(kinds) == 1:
            return ("layer",)
        return tuple(f"layer.{kind}" for kind in kinds)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["noop_layers"] = list(self.noop_layers)
        out["fused_kernels"] = list(self.fused_kernels)
        out["moe_token_dispatcher_type"] = str(self.moe_token_dispatcher_type)
        if self.moe_layer_pattern is not None:
            out["moe_layer_pattern"] = list(self.moe_layer_pattern)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown model key(s) {unknown}; expected some of {sorted(known)}")
        values = dict(data)
        values["noop_layers"] = tuple(values.get("noop_layers") or ())
        if values.get("moe_layer_pattern") is not None:
            values["moe_layer_pattern"] = tuple(values["moe_layer_pattern"])
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class StepFlags:
    """The launch's flags that add per-iteration or per-micro-batch work outside the layers
    (priced by costs/step_costs.py)."""

    clip_grad: bool = True
    """Gradient clipping: `--clip-grad` above 0 (Megatron-LM's default 1.0)."""
    log_params_norm: bool = False
    """`--log-params-norm`: the parameters' L2 norm every iteration."""
    log_num_zeros_in_grad: bool = False
    """`--log-num-zeros-in-grad`: the gradients' zero count every iteration."""
    load_batch: bool = False
    """Price the data loader's batch per micro-batch: set for every launch the script reader reads;
    a cost model built without one (JOB_DEFAULTS: Tinker folders set beside Tinker's own formula,
    synthetic tests) prices no loader."""
    batch_attention_mask: bool = False
    """The data loader's batch holds the [b, 1, s, s] attention mask (Megatron-LM's
    `--create-attention-mask-in-dataloader` default; off with `--no-create-attention-mask-in-dataloader`
    and for MindSpeed-LLM launches)."""
    deterministic: bool = False
    """Megatron-LM's `--deterministic-mode`: the fused attention's deterministic backward
    (costs/deterministic.py)."""


@dataclass(frozen=True, kw_only=True)
class FrameworkInfo:
    """Which framework and version the script is written for, and how it launches."""

    flavour: str = "mcore"
    """`legacy` (ModelLink / MindSpeed-LLM legacy models), `mcore` (MindSpeed-LLM mcore) or `megatron` (NVIDIA)."""
    version: str | None = None
    """Framework version (Tinker's values 1.0, 1.1, 1.2, 1.0.0, 2.0.0, 2.3.0, ...), None if unknown."""
    launcher: str = "torchrun"
    """torchrun | torch.distributed.launch | torch.distributed.run | msrun | deepspeed."""
    entry: str = "pretrain_gpt.py"
    """The training entry script as written in the launch line."""


@dataclass(frozen=True, kw_only=True)
class TrainSpec:
    """The training job as the launch script runs it today."""

    micro_batch_size: int
    global_batch_size: int
    nnodes: int
    nproc_per_node: int
    strategy: Strategy
    """The strategy the script currently uses."""
    framework: FrameworkInfo = field(default_factory=FrameworkInfo)
    is_full_tune: bool = False
    loads_checkpoint: bool = False
    """The script passes `--load`: changing tp / pp / ep then needs a checkpoint conversion."""
    swap_optimizer_times: int | None = None
    """MindSpeed `--swap-optimizer`: optimizer states kept on the host and swapped to the device in
    this many chunks (`--swap-optimizer-times`, default 16) at the step; None when not swapping."""
    overlap_p2p_comm: bool = True
    """The interleaved schedule overlaps pipeline send/recv with compute (`--[no-]overlap-p2p-communication`,
    default by framework version: script/versions.py p2p_overlap_default)."""
    reuse_fp32_param: bool = False
    """MindSpeed `--reuse-fp32-param`: the fp32 master weights share memory with the bf16 weights
    (priced in memory: costs/data_parallel.py param_bytes)."""
    swap_attention: bool = False
    """MindSpeed `--swap-attention`: each layer's attention activations swapped to the host."""
    gradient_accumulation_fusion: bool = True
    """Megatron's weight-gradient GEMM accumulates into the main grad (False with
    `--no-gradient-accumulation-fusion`: an extra add per weight, costs/grad_accumulation.py)."""
    recompute_activation_function: bool = False
    """MindSpeed `--recompute-activation-function`: the MLP activation is recomputed in the backward."""
    recompute_activation_function_num_layers: int | None = None
    """MindSpeed `--recompute-activation-function-num-layers`: only the first N layers of each stage
    recompute the activation; None for every layer (or when the switch is off)."""
    recompute_modules: tuple[str, ...] | None = None
    """Megatron-Core `--recompute-modules` (selective recompute by module; None: core_attn alone)."""
    optimizer_precision: OptimizerPrecision = field(default_factory=OptimizerPrecision)
    """Megatron's precision-aware optimizer dtypes (all fp32 without `--use-precision-aware-optimizer`)."""
    step_flags: StepFlags = field(default_factory=StepFlags)
    """Flags of the optimizer step and the data loader (costs/step_costs.py)."""
    ulysses_degree_in_cp: int | None = None
    """MindSpeed `--ulysses-degree-in-cp`: the Ulysses group size of `hybrid_cp_algo` (the ring
    runs over cp / this many ranks); None when the script does not give it
    (rules.hybrid_ulysses_degree says which degree the model then uses)."""


DEFAULT_DEVICES_PER_NODE = 8
"""Devices per node when neither the command line, the script nor a hardware description says."""


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """The target cluster the search plans for."""

    num_nodes: int
    devices_per_node: int
    memory_limit_mb: float
    """Per-device budget in MB (2**20 bytes) for the modelled memory (weights, gradients, optimizer
    states, activations, transient peaks); leave the framework's own overhead outside it."""

    def __post_init__(self) -> None:
        for name in ("num_nodes", "devices_per_node"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if not self.memory_limit_mb or self.memory_limit_mb <= 0:
            raise ConfigError(
                f"memory_limit must be a positive number of MB, got {self.memory_limit_mb!r}"
            )

    @property
    def num_devices(self) -> int:
        return self.num_nodes * self.devices_per_node
