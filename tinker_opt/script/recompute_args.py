"""Megatron-Core's `--recompute-modules` list as the script writes it (priced in
costs/recompute_modules.py), and MindSpeed's per-rank recompute count
(`--enable-recompute-layers-per-pp-rank`) as the per-chunk count the Strategy holds."""

from __future__ import annotations

from collections.abc import Callable

from tinker_opt.choices import RecomputeModule
from tinker_opt.errors import ScriptError
from tinker_opt.knobs import CHOICES
from tinker_opt.script.expand import field_text
from tinker_opt.script.launch import Launch


def recompute_modules(launch: Launch) -> tuple[str, ...] | None:
    """The modules of the last `--recompute-modules` (nargs '*', megatron/training/arguments.py),
    None when the flag is absent; a name Megatron-Core does not know is refused."""
    arg = launch.last(CHOICES["recompute_modules"].flag)
    if arg is None:
        return None
    names = tuple(word for value in arg.values for word in field_text(value).split())
    known = tuple(module.value for module in RecomputeModule)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ScriptError(
            f"--recompute-modules names {', '.join(unknown)}; Megatron-Core knows "
            f"{', '.join(known)}"
        )
    return names


_COUNT = CHOICES["recompute_num_layers"]
PER_RANK_FLAG = _COUNT.flag_for("per_rank")
"""MindSpeed's switch that makes `--recompute-num-layers` count a pipeline rank's layers."""


def chunk_count(rank_count: int, vpp: int, warn: Callable[[str], None]) -> int:
    """The per-chunk count of MindSpeed's per-rank count N with vpp chunks and block recompute.

    Ascend/MindSpeed mindspeed/core/transformer/transformer_block.py
    `_block_method_checkpointed_forward_func`: layer l of virtual stage r is checkpointed when
    l * vpp + r < N, so stage r recomputes ceil((N - r) / vpp) of its layers: N / vpp each where
    vpp divides N. Otherwise the first N mod vpp stages recompute one more than the others, which
    one count per chunk cannot say: read as ceil(N / vpp), with a warning. Megatron's count (no
    switch) is per chunk already (transformer_block.py `_checkpointed_forward`)."""
    if vpp <= 1:
        return rank_count
    if rank_count % vpp:
        warn(
            f"{PER_RANK_FLAG} with {_COUNT.flag} {rank_count} over {vpp} virtual stages "
            f"recomputes {rank_count // vpp} or {rank_count // vpp + 1} layers a stage; read as "
            f"{-(-rank_count // vpp)} each (the modelled memory errs low, the time high)"
        )
    return -(-rank_count // vpp)


def rank_count(chunk_layers: int, vpp: int) -> int:
    """The per-rank count that recomputes `chunk_layers` layers of each of vpp chunks."""
    return chunk_layers * vpp
