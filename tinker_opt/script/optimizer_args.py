"""The optimizer's dtypes a launch script sets (optimizer_precision.OptimizerPrecision): Megatron-LM's
precision-aware optimizer, `--grad-reduce-in-bf16`, fp16 gradient buffers, and Megatron-Core's
fp32 master weights kept as 16-bit remainders."""

from __future__ import annotations

from tinker_opt.errors import ConfigError, ScriptError
from tinker_opt.knobs import CHOICES
from tinker_opt.optimizer_precision import OptimizerPrecision
from tinker_opt.script.launch import Launch


def _stores_remainders(launch: Launch) -> bool:
    """Megatron-Core keeps fp32 master weights as 16-bit remainders (optimizer_precision.OptimizerPrecision
    .param_remainders) for bf16 training without FP8 or with delayed-scaling FP8, unless
    `--no-store-param-remainders` (megatron/core/optimizer/optimizer_config.py)."""
    fp8_ok = (
        not launch.has(CHOICES["fp8_format"].flag)
        or (launch.value("--fp8-recipe") or "delayed") == "delayed"
    )
    return launch.has("--bf16") and fp8_ok and not launch.has("--no-store-param-remainders")


def optimizer_precision(launch: Launch) -> OptimizerPrecision:
    """The precision-aware optimizer's dtypes (they apply only with its switch, Megatron-LM);
    `--grad-reduce-in-bf16` keeps the gradient buffer in bf16 with or without it. fp16 training
    keeps it in fp16 unless `--accumulate-allreduce-grads-in-fp32`: Megatron's gradient buffer
    has the parameters' dtype without grad_reduce_in_fp32 (megatron/core/distributed/
    param_and_grad_buffer.py), which arguments.py forces on only for bf16."""
    bf16_grads = launch.has("--grad-reduce-in-bf16")
    fp16_grads = launch.has("--fp16") and not launch.has("--accumulate-allreduce-grads-in-fp32")
    if not launch.has("--use-precision-aware-optimizer"):
        if bf16_grads or fp16_grads:
            return OptimizerPrecision(main_grads="bf16" if bf16_grads else "fp16")
        return OptimizerPrecision()
    main_params = launch.value("--main-params-dtype") or "fp32"
    try:
        return OptimizerPrecision(
            main_grads="bf16" if bf16_grads else launch.value("--main-grads-dtype") or "fp32",
            main_params=main_params,
            exp_avg=launch.value("--exp-avg-dtype") or "fp32",
            exp_avg_sq=launch.value("--exp-avg-sq-dtype") or "fp32",
            param_remainders=main_params == "fp32" and _stores_remainders(launch),
        )
    except ConfigError as exc:
        raise ScriptError(f"the script's optimizer dtypes are inconsistent: {exc}") from None
