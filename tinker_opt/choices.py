"""The choices of a strategy knob as types: one `StrEnum` per kind of choice.

A `StrEnum` member is a `str`, so the JSON of a Strategy, the CSV columns and every comparison
with the plain spelling (`s.recompute == "full"`) keep working while code moves to the members;
new code matches on the members with `assert_never` in the last case, so the type checker names
every place a new member must be handled (ARCHITECTURE.md, "The knob registry").
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import NoReturn, TypeVar

if sys.version_info >= (3, 11):
    from enum import StrEnum
    from typing import assert_never
else:  # Python 3.10 (pyproject requires-python): the same two names from their 3.11 definitions

    class StrEnum(str, Enum):
        """A str whose members print as their values (enum.StrEnum of Python 3.11)."""

        def __str__(self) -> str:
            return str(self.value)

    def assert_never(value: object) -> NoReturn:
        """The last case of an exhaustive match (typing.assert_never of Python 3.11)."""
        raise AssertionError(f"unhandled choice {value!r}")


E = TypeVar("E", bound=StrEnum)


def choice(kind: type[E], value: object, name: str, error: type[Exception] = ValueError) -> E:
    """`value` (a member or its spelling) as a member of `kind`; `error` naming the choices
    otherwise (a StrategyError for a strategy, a ConfigError for a setting)."""
    try:
        return kind(str(value)) if isinstance(value, str) else kind(value)  # type: ignore[arg-type]
    except ValueError:
        choices = tuple(member.value for member in kind)
        raise error(f"{name} must be one of {choices}, got {value!r}") from None


class Recompute(StrEnum):
    """Activation recompute (`--recompute-granularity`; `--recompute-activations` = selective).
    Source: NVIDIA/Megatron-LM megatron/training/arguments.py."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class RecomputeMethod(StrEnum):
    """`--recompute-method` with full recompute (Megatron's meaning): `uniform` recomputes groups
    of `--recompute-num-layers` layers, `block` the first that many layers of each stage chunk."""

    BLOCK = "block"
    UNIFORM = "uniform"


class RecomputeModule(StrEnum):
    """A module of Megatron-Core's `--recompute-modules` (selective recompute by module;
    megatron/core/transformer/transformer_config.py recompute_modules). The reader refuses other
    names (script/recompute_args.py); each is priced by what it frees and reruns
    (costs/recompute_modules.py)."""

    CORE_ATTN = "core_attn"
    MOE_ACT = "moe_act"
    LAYERNORM = "layernorm"
    MLA_UP_PROJ = "mla_up_proj"
    MLP = "mlp"
    MOE = "moe"
    SHARED_EXPERTS = "shared_experts"


DEFAULT_RECOMPUTE_MODULES = (RecomputeModule.CORE_ATTN.value,)
"""transformer_config.py: selective granularity without `--recompute-modules` recomputes core_attn."""


class CpAlgo(StrEnum):
    """`--context-parallel-algo` (MindSpeed-LLM; Megatron-LM has only the ring): ring attention,
    Ulysses all-to-all, Ulysses groups x ring (hybrid), K/V all-gather. Source: Ascend/MindSpeed
    mindspeed/features_manager/context_parallel/context_parallel_feature.py."""

    MEGATRON = "megatron_cp_algo"
    ULYSSES = "ulysses_cp_algo"
    HYBRID = "hybrid_cp_algo"
    KV_ALLGATHER = "kvallgather_cp_algo"
    ADAPTIVE = "adaptive_cp_algo"
    """MindSpeed's adaptive context parallelism: read from scripts, not modelled (rules.py)."""


class Schedule(StrEnum):
    """The pipeline schedule a strategy runs (Strategy.schedule): 1F1B without virtual stages,
    interleaved 1F1B with them (megatron/core/pipeline_parallel/schedules.py
    forward_backward_pipelining_without_interleaving / _with_interleaving)."""

    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    DUALPIPEV = "dualpipev"
    """MindSpeed's `--schedules-method dualpipev` (Ascend/MindSpeed docs/features/dualpipev.md)."""


class Dispatcher(StrEnum):
    """`--moe-token-dispatcher-type` (Megatron-LM megatron/training/arguments.py choices;
    MindSpeed-LLM keeps `alltoall_seq`): how MoE tokens reach their experts."""

    ALLGATHER = "allgather"
    ALLTOALL = "alltoall"
    ALLTOALL_SEQ = "alltoall_seq"
    FLEX = "flex"
