"""The dtypes of Megatron's precision-aware optimizer (TrainSpec.optimizer_precision): what the
gradient buffer, the master weights and the two Adam moments cost per parameter."""

from __future__ import annotations

from dataclasses import dataclass

from tinker_opt.errors import ConfigError

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
REMAINDER_BYTES = 2
"""The low 16 bits of an fp32 master weight whose high 16 bits are the bf16 weight (int16)."""


@dataclass(frozen=True)
class OptimizerPrecision:
    """Megatron's precision-aware optimizer (`--use-precision-aware-optimizer` with
    `--main-grads-dtype`, `--main-params-dtype`, `--exp-avg-dtype`, `--exp-avg-sq-dtype`,
    megatron/training/arguments.py; Transformer Engine's FusedAdam keeps the states in these
    dtypes): the dtypes of the gradient buffer, the master weights and the two Adam moments.
    Without the switch Megatron keeps all four in fp32 (the default here: bf16 training implies
    accumulate_allreduce_grads_in_fp32, so the gradient buffer is fp32)."""

    main_grads: str = "fp32"
    main_params: str = "fp32"
    exp_avg: str = "fp32"
    exp_avg_sq: str = "fp32"
    param_remainders: bool = False
    """The fp32 master weights are kept as their low 16 bits beside the bf16 weights (2 B, not 4):
    Megatron-Core's `store_param_remainders` (default True; megatron/core/optimizer/
    optimizer_config.py; distrib_optimizer.py keeps `master_param` as int16 when it is on and
    bf16 is trained with the precision-aware optimizer, main params fp32, no FP8 or delayed-scaling
    FP8: `use_precision_aware_optimizer_no_fp8_or_ds_fp8`; TE's FusedAdam >= 2.1 stores them).
    The reader decides it (script/reader.py _optimizer_precision)."""

    def __post_init__(self) -> None:
        for name in ("main_grads", "main_params", "exp_avg", "exp_avg_sq"):
            value = getattr(self, name)
            if value not in DTYPE_BYTES:
                raise ConfigError(
                    f"{name} dtype must be one of {sorted(DTYPE_BYTES)}, got {value!r}"
                )

    @property
    def grad_bytes(self) -> int:
        """Bytes per parameter of the gradient buffer (accumulated and reduced in this dtype)."""
        return DTYPE_BYTES[self.main_grads]

    @property
    def state_bytes(self) -> int:
        """Bytes per parameter of the optimizer states: master weight (2 B as remainders) + exp_avg
        + exp_avg_sq."""
        master = REMAINDER_BYTES if self.param_remainders else DTYPE_BYTES[self.main_params]
        return master + sum(DTYPE_BYTES[d] for d in (self.exp_avg, self.exp_avg_sq))
