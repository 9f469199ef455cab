"""`simulate`: the Strategy that Tinker-style flags (or JSON) describe, for `CostModel.evaluate`.

The CLI maps its flags (`--simu-tp`, `--simu-pp`, `--simu-ep`, `--simu-sp`, `--zero 0..3`/`--dist-opt`,
`--micro-batch-size`, `--num-layer-list`, `--recompute`, `--recompute-num-layers`, `--cp`,
`--cp-algo`, `--vpp`, `--etp`) onto `strategy_from_flags`; the data-parallel size follows from the
cluster. `Evaluation.to_dict()` is what `--json` prints and `--detail` tabulates.
"""

from __future__ import annotations

from typing import Any

from tinker_opt.choices import CpAlgo, Recompute, RecomputeMethod
from tinker_opt.errors import StrategyError
from tinker_opt.strategy import Strategy

RECOMPUTE_ALIASES = {
    "0": Recompute.NONE,
    "1": Recompute.FULL,
    **{kind.value: kind for kind in Recompute},
}
"""Tinker's `--recompute 0|1` (1 = full recompute of every layer) and our kind names."""


def parse_layer_list(text: str | None) -> tuple[int, ...] | None:
    """`--num-layer-list 4,4,8` (Megatron / Tinker form, no spaces needed) -> (4, 4, 8)."""
    if text is None or str(text).strip() == "":
        return None
    try:
        values = tuple(int(part) for part in str(text).replace(" ", "").split(","))
    except ValueError:
        raise StrategyError(
            f"num_layer_list must be comma-separated integers like 4,4,8; got {text!r}"
        ) from None
    return values


def strategy_from_flags(
    *,
    num_devices: int,
    num_layers: int,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    etp: int | None = None,
    sp: bool = False,
    zero: int = 0,
    mbs: int = 1,
    num_layer_list: str | tuple[int, ...] | None = None,
    recompute: Any = Recompute.NONE,
    recompute_num_layers: int | None = None,
    cp: int = 1,
    cp_algo: str | None = None,
    vpp: int = 1,
    recompute_method: str | None = None,
) -> Strategy:
    """The Strategy the simulate flags describe; dp = devices / (tp * pp * cp)."""
    if num_devices % (tp * pp * cp):
        raise StrategyError(
            f"the {num_devices} devices are not divisible by tp*pp*cp = {tp}*{pp}*{cp} = "
            f"{tp * pp * cp}; choose sizes whose product divides the device count"
        )
    kind = RECOMPUTE_ALIASES.get(str(recompute).strip().lower())
    if kind is None:
        raise StrategyError(f"recompute must be 0, 1, none, selective or full; got {recompute!r}")
    layers = (
        parse_layer_list(num_layer_list)
        if not isinstance(num_layer_list, tuple)
        else num_layer_list
    )
    method = recompute_method or RecomputeMethod.BLOCK
    r = _recompute_count(
        kind, method, recompute_num_layers, recompute_method, layers, num_layers, pp, vpp
    )
    return Strategy(
        tp=tp,
        pp=pp,
        dp=num_devices // (tp * pp * cp),
        cp=cp,
        cp_algo=(cp_algo or CpAlgo.MEGATRON) if cp > 1 else None,
        ep=ep,
        etp=etp,
        sp=bool(sp),
        vpp=vpp,
        zero=zero,
        mbs=mbs,
        recompute=kind,
        recompute_method=method if kind == Recompute.FULL else None,
        recompute_num_layers=r,
        num_layer_list=layers,
    )


def _recompute_count(
    kind: str,
    method: str,
    count: int | None,
    given_method: str | None,
    layers: tuple[int, ...] | None,
    num_layers: int,
    pp: int,
    vpp: int,
) -> int | None:
    """`recompute_num_layers` of the simulate flags: Tinker's `--recompute 1` recomputes every
    layer, as block over the largest stage chunk or uniform with one layer per group (Megatron's
    usual full recompute); the count and method need full recompute."""
    if method not in tuple(RecomputeMethod):
        raise StrategyError(f"--recompute-method must be block or uniform; got {given_method!r}")
    if kind != Recompute.FULL:
        if count is not None or given_method is not None:
            raise StrategyError(
                "--recompute-num-layers / --recompute-method need --recompute full (or 1)"
            )
        return None
    chunk_max = (max(layers) if layers else -(-num_layers // pp)) // vpp
    default = 1 if method == RecomputeMethod.UNIFORM else max(chunk_max, 1)
    return count if count is not None else default
