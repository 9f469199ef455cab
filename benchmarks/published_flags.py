"""The training flags of a published run's launch script: batch sizes, precision (with the FP8
recipe of FP8 rows) and recompute. Used by published_runs.launch_script."""

from __future__ import annotations

from typing import Any


def recompute_flags(strategy: dict[str, Any]) -> list[str]:
    kind = strategy.get("recompute", "none")
    if kind == "selective":
        return ["--recompute-granularity selective"]
    if kind == "full":
        # Korthikanti et al. 2022 checkpoint every transformer layer: Megatron's standard full
        # recompute, `--recompute-method uniform --recompute-num-layers 1`, as published.
        return [
            "--recompute-granularity full",
            "--recompute-method uniform",
            "--recompute-num-layers 1",
        ]
    return []


FP8_FLAGS = ("--fp8-format hybrid", "--fp8-recipe delayed", "--fp8-amax-history-len 1024",
             "--fp8-amax-compute-algo max", "--fp8-param-gather")  # fmt: skip
"""How the FP8 rows trained: NeMo's GPT-3 175B FP8 recipe (NVIDIA/dgxc-benchmarking
nemo_megatron/gpt3_175b_hydra.yaml: fp8 true, fp8_hybrid true, fp8_amax_history_len 1024,
fp8_amax_compute_algo max, fp8_wgrad true, fp8_params true), as Megatron-LM's flags
(megatron/training/arguments.py _add_transformer_engine_args: --fp8-format hybrid = E4M3 forward,
E5M2 backward; fp8_params = --fp8-param-gather)."""


def fp8_flags(strategy: dict[str, Any]) -> tuple[str, ...]:
    """FP8_FLAGS, without `--fp8-param-gather` where the row says its run kept BF16 weights
    (`fp8_param_gather: false`: NeMo 1 configs without `fp8_params`)."""
    if strategy.get("fp8_param_gather", True):
        return FP8_FLAGS
    return tuple(flag for flag in FP8_FLAGS if flag != "--fp8-param-gather")


def training_flags(run: Any) -> list[str]:
    """Batch sizes, precision (bf16 / fp16, plus the FP8 recipe of FP8 rows) and recompute."""
    s = run.strategy
    precision = s.get("precision", "bf16")
    flags = [
        f"--micro-batch-size {s['mbs']}",
        f"--global-batch-size {s['gbs']}",
        "--bf16" if precision == "fp8" else f"--{precision}",
        *(fp8_flags(s) if precision == "fp8" else ()),
        "--train-iters 100",
        "--lr 6.0e-5",
    ]
    return flags + recompute_flags(s)
