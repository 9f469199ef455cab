"""Block measurements by shape, with micro-batch interpolation.

A shape is (block, tp, sp, cp, ep, etp); the micro-batch size is the one axis the cost model may
interpolate along: times and activation bytes grow (close to) linearly with the micro-batch, so a
least-squares line per shape and measure gives the values at a micro-batch size that was not
profiled (between or beyond the profiled ones). Such values are marked `estimated`. A shape that
was never profiled cannot be guessed: it is a ProfileDataError naming the profile to run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from tinker_opt.columns import Columns

if TYPE_CHECKING:
    import pandas as pd

from tinker_opt.errors import ProfileDataError

PER_MBS_MEASURES = (
    "fwd_us",
    "bwd_us",
    "input_bytes",
    "output_bytes",
    "activation_bytes",
    "transient_bytes",
    "selective_activation_bytes",
    "selective_recompute_us",
)
"""Measures that scale with the micro-batch size (per micro-batch on one rank)."""
STATIC_MEASURES = (
    "param_count",
    "expert_param_count",
    "weight_bytes",
)
"""Measures that do not depend on the micro-batch size."""
HOST_OP_MEASURES = ("fwd_host_ops", "bwd_host_ops")
"""Operator counts: the same at every micro-batch size but where the framework takes another path
(Megatron's unfused softmax where b x heads/tp misses the fused kernel's multiple, profile/
softmax.py), so the row of the nearest profiled micro-batch size gives them, never a line."""


@dataclass(frozen=True)
class BlockCost:
    """One block at one shard shape and micro-batch size (per micro-batch, one rank)."""

    fwd_us: float
    bwd_us: float
    param_count: int
    expert_param_count: int
    input_bytes: int
    output_bytes: int
    activation_bytes: int
    transient_bytes: int
    selective_activation_bytes: int
    selective_recompute_us: float
    estimated: bool
    """True when interpolated / extrapolated from other micro-batch sizes."""
    fwd_host_ops: int = 0
    """Operators the host issues for the forward (0: not counted; costs/fixed_costs.py)."""
    bwd_host_ops: int = 0


Rows = dict[str, np.ndarray]
"""The rows of one shape, by column (sorted by micro-batch size): plain arrays, since the search
looks shapes up thousands of times and a data-frame filter costs far more (issue 30)."""


class BlockTable:
    """The `ok` rows of blocks.csv, looked up by shape and micro-batch size."""

    def __init__(self, blocks: Columns | pd.DataFrame) -> None:
        table = Columns.of(blocks)
        self._rows: dict[tuple, Rows] = {}
        for key, index in table.groups(["block", "tp", "sp", "cp", "ep", "etp"]).items():
            block, tp, sp, cp, ep, etp = key
            shape = (str(block), int(tp), int(sp), int(cp), int(ep), int(etp))
            ordered = index[np.argsort(table["mbs"][index], kind="stable")]
            self._rows[shape] = {name: table[name][ordered] for name in table.names}
        self.blocks = frozenset(shape[0] for shape in self._rows)

    def shapes(self, block: str) -> list[tuple[int, int, int, int, int]]:
        """Profiled (tp, sp, cp, ep, etp) of a block."""
        return [shape[1:] for shape in self._rows if shape[0] == block]

    def profiled_mbs(self) -> list[int]:
        return sorted({int(v) for rows in self._rows.values() for v in rows["mbs"]})

    def has(self, block: str, tp: int, sp: bool, cp: int, ep: int = 1, etp: int = 1) -> bool:
        return self._find(block, tp, sp, cp, ep, etp) is not None

    def _find(self, block: str, tp: int, sp: bool, cp: int, ep: int, etp: int) -> Rows | None:
        # With tp = 1 sequence parallelism changes nothing, so either sp row serves.
        for sp_value in (int(sp),) if tp > 1 else (0, 1):
            rows = self._rows.get((block, tp, sp_value, cp, ep, etp))
            if rows is not None:
                return rows
        return None

    def cost(
        self, block: str, *, tp: int, sp: bool, cp: int, ep: int = 1, etp: int = 1, mbs: int
    ) -> BlockCost:
        """The block's cost at this shape; raises ProfileDataError naming what to profile."""
        return _cached_cost(self, block, tp, bool(sp), cp, ep, etp, mbs)

    def missing_message(self, block: str, tp: int, sp: bool, cp: int, ep: int, etp: int) -> str:
        """Which knob value was never profiled, and the profile run that would cover it."""
        if block not in self.blocks:
            return f"block '{block}' was not profiled; re-run `tinker-opt profile` for this model"
        shapes = self.shapes(block)
        for name, value, index in (("tp", tp, 0), ("cp", cp, 2), ("ep", ep, 3), ("etp", etp, 4)):
            known = sorted({s[index] for s in shapes})
            if value not in known:
                hint = (
                    f"re-run profile with --max-npu {value}"
                    if name == "tp"
                    else f"re-run `tinker-opt profile` with {name}={value} in its profile space"
                )
                return f"{name}={value} was not profiled for block '{block}' (profiled: {known}); {hint}"
        return (
            f"block '{block}' was not profiled at tp={tp}, sp={int(sp)}, cp={cp}, ep={ep}, etp={etp}; "
            "re-run `tinker-opt profile` with that combination in its profile space"
        )


@lru_cache(maxsize=65536)
def _cached_cost(
    table: BlockTable, block: str, tp: int, sp: bool, cp: int, ep: int, etp: int, mbs: int
) -> BlockCost:
    rows = table._find(block, tp, sp, cp, ep, etp)
    if rows is None:
        raise ProfileDataError(table.missing_message(block, tp, sp, cp, ep, etp))
    static = {name: int(rows[name][0]) if name in rows else 0 for name in STATIC_MEASURES}
    nearest = int(np.argmin(np.abs(rows["mbs"].astype(float) - mbs)))
    static.update(
        {name: int(rows[name][nearest]) if name in rows else 0 for name in HOST_OP_MEASURES}
    )
    exact = np.flatnonzero(rows["mbs"] == mbs)
    if exact.size:
        per_mbs = {name: float(rows[name][exact[0]]) for name in PER_MBS_MEASURES}
        estimated = False
    else:
        per_mbs = {
            name: _fit_at(rows["mbs"].astype(float), rows[name].astype(float), mbs)
            for name in PER_MBS_MEASURES
        }
        estimated = True
    return BlockCost(
        fwd_us=per_mbs["fwd_us"],
        bwd_us=per_mbs["bwd_us"],
        param_count=static["param_count"],
        expert_param_count=static["expert_param_count"],
        input_bytes=round(per_mbs["input_bytes"]),
        output_bytes=round(per_mbs["output_bytes"]),
        activation_bytes=round(per_mbs["activation_bytes"]),
        transient_bytes=round(per_mbs["transient_bytes"]),
        selective_activation_bytes=round(per_mbs["selective_activation_bytes"]),
        selective_recompute_us=per_mbs["selective_recompute_us"],
        estimated=estimated,
        fwd_host_ops=static["fwd_host_ops"],
        bwd_host_ops=static["bwd_host_ops"],
    )


def _fit_at(mbs_values: np.ndarray, measures: np.ndarray, mbs: int) -> float:
    """Least-squares line through (mbs, measure), evaluated at `mbs`, never below zero.

    One profiled point: proportional scaling (the measure is per micro-batch, so linear in it).
    """
    if len(mbs_values) == 1:
        return max(0.0, float(measures[0]) * mbs / float(mbs_values[0]))
    slope, intercept = np.polyfit(mbs_values, measures, 1)
    return max(0.0, float(slope * mbs + intercept))
