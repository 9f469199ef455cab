"""comm.csv rows computed from a hardware description: what the analytic profile writes and the
search reads when no measured communication profile is given (every row priced by
comm_cost.collective_time_us, the one definition of a collective's time)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tinker_opt.columns import Columns
from tinker_opt.comm_cost import COMM_OPS, Regime, collective_time_us
from tinker_opt.hardware.links import LinkSpec

if TYPE_CHECKING:
    import pandas as pd


class Links(Protocol):
    """What the rows need of a description (HardwareSpec): its node size and each tier's link."""

    @property
    def devices_per_node(self) -> int: ...

    def link(self, scope: str) -> LinkSpec: ...


DEFAULT_COMM_SIZES = tuple(64 * 1024 * 4**i for i in range(7))
"""64 KiB ... 256 MiB, the sizes the measured communication profile uses too."""
COMM_MAX_GROUP = 64
"""comm.csv group sizes computed from a description go up to this (the formulas hold for any size)."""


def regime_sizes(regimes: tuple[Regime, ...], sizes: tuple[int, ...]) -> list[int]:
    """`sizes`, and where an op has size regimes three sizes a factor 2 apart on each side of
    every switch: the rows a fit of the table (costs/comm_model.py, hardware/fit.py
    fit_regimes, MIN_REGIME_SIZES) needs to find each regime again."""
    around = {r.from_bytes * 2.0**k for r in regimes[1:] for k in (-3, -2, -1, 0, 1, 2)}
    return sorted({*sizes, *(int(n) for n in around if n >= 1)})


def comm_table(
    hardware: Links, *, max_group_size: int, sizes: tuple[int, ...] = DEFAULT_COMM_SIZES
) -> pd.DataFrame:
    """comm_columns as a DataFrame (the profile verbs write it as comm.csv)."""
    return comm_columns(hardware, max_group_size=max_group_size, sizes=sizes).frame()


def comm_columns(
    hardware: Links, *, max_group_size: int, sizes: tuple[int, ...] = DEFAULT_COMM_SIZES
) -> Columns:
    """comm.csv rows (op, group_size, scope, bytes, time_us) computed from the description.

    Inter-node rows for every group size up to max_group_size (tensor, data or expert groups
    that span nodes) on one network card, one member per node (the cost model then shares the
    node's cards among the groups, comm_cost.spanning_time_us); intra-node rows only for groups
    that fit in one node (devices_per_node)."""
    rows = []
    for scope in ("intra_node", "inter_node"):
        link = hardware.link(scope)
        largest = max(max_group_size, 2)
        if scope == "intra_node":
            largest = min(largest, max(hardware.devices_per_node, 2))
        for op in COMM_OPS:
            groups = (
                [2] if op == "send_recv" else [g for g in (2, 4, 8, 16, 32, 64) if g <= largest]
            )
            for group in groups:
                for nbytes in regime_sizes(link.regimes(op), sizes):
                    op_link = link.for_op(op, nbytes)
                    bandwidth = op_link.group_bandwidth_gbs(group)  # a mesh: g - 1 links
                    time_us = collective_time_us(op, group, nbytes, bandwidth, op_link.latency_us)
                    rows.append((op, group, scope, nbytes, round(time_us, 3)))
    return Columns.from_rows(rows, ["op", "group_size", "scope", "bytes", "time_us"])
