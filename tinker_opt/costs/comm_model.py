"""Collective times for the cost model: measured curves fitted to the alpha-beta model.

Each measured (op, scope, group size) curve of comm.csv is fitted by relative least squares to
`time = steps * latency + traffic * bytes / bandwidth` (tinker_opt.comm_cost, the one place of the
ring formulas) in each of the library's size regimes (comm_cost.Regime; hardware/regime_fit.py
fit_curves, a scope's switch or an op's own, the fit `calibrate --comm` uses too), which
makes every collective time affine in its byte count within a regime: the solvers use the
same figures as `CostModel.evaluate`. A group size that was not measured borrows the link
(latency, bandwidth) of the nearest measured size of that op and scope, then of any op of that
scope. A scope with no measurement at all takes the hardware file's link, or else a documented
default, and says so in `warnings` (intra-node figures are never reused for inter-node traffic).

Groups are placed on the network tiers of the hardware description (`group_scope`): inside a node
(the measured / fitted curves), inside a high-bandwidth domain that spans nodes (the domain link,
a flat ring: every member has its own NVLink / UB port), or across domains (comm_cost.
spanning_time_us: the node's network cards shared by its concurrent groups, NCCL rings or HCCL
two-level algorithms, with the inter-node figure as one card's link).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tinker_opt.columns import Columns
from tinker_opt.comm_cost import (
    NodeNetwork,
    Regime,
    Span,
    collective_time_us,
    regime_at,
    spanning_time_us,
    traffic_factor,
)
from tinker_opt.hardware import HardwareSpec, LinkSpec
from tinker_opt.hardware.regime_fit import Curve, fit_curves

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_LINKS = {
    # Atlas 800T A2 / DGX-class intra-node links deliver 100+ GB/s per device and direction; the
    # default stays below the NVLink figure of the shipped a100-80gb.json (195 GB/s achievable).
    "intra_node": LinkSpec(bandwidth_gbs=100.0, latency_us=5.0),
    # One 200 Gb/s RoCE / InfiniBand port per device = 25 GB/s peak; the shipped a100-80gb.json
    # uses 22.5 GB/s achievable (calculon's IB tier, 25 GB/s x 0.9), which this default follows.
    "inter_node": LinkSpec(bandwidth_gbs=22.5, latency_us=10.0),
}
"""Links used when neither comm.csv, the hardware file nor a flag gives a figure for a scope."""


@dataclass(frozen=True)
class GroupPlacement:
    """The tier a communication group spans and how its members sit on the nodes."""

    tier: str
    """intra_node | intra_domain | inter_node (across nodes of different domains)."""
    per_node: int
    """Members of the group on each node it touches."""
    nodes: int
    """Nodes the group touches."""

    @property
    def scope(self) -> str:
        """The comm.csv scope whose curves time the group (intra_node or inter_node)."""
        return "intra_node" if self.tier == "intra_node" else "inter_node"


def group_scope(
    stride: int,
    size: int,
    devices_per_node: int,
    domain_devices: int | None = None,
    num_devices: int | None = None,
) -> GroupPlacement:
    """Where a communication group sits under Megatron's rank order.

    Ranks are laid out tp innermost, then cp, dp, pp; a group of `size` ranks `stride` apart spans
    `stride * size` consecutive ranks: inside one node when that span fits and tiles the node,
    inside one high-bandwidth domain (`domain_devices`, default the node) when the whole job
    (`num_devices`) fits in one or the span tiles the domains, else across domains. Members per
    node: the node's devices over the stride (at most the group's size).
    """
    span = stride * size
    if size <= 1 or (span <= devices_per_node and devices_per_node % span == 0):
        return GroupPlacement("intra_node", max(size, 1), 1)
    per_node = max(1, min(size, devices_per_node // stride))
    nodes = -(-size // per_node)
    domain = domain_devices or devices_per_node
    job_inside = num_devices is not None and num_devices <= domain
    if domain > devices_per_node and span <= domain and (job_inside or domain % span == 0):
        return GroupPlacement("intra_domain", per_node, nodes)
    return GroupPlacement("inter_node", per_node, nodes)


@dataclass(frozen=True)
class _Fit:
    """One curve's size regimes (the first from the smallest size)."""

    regimes: tuple[Regime, ...]

    @property
    def last(self) -> Regime:
        """The largest-size regime (a link's figures where one pair is asked for)."""
        return self.regimes[-1]

    @property
    def bandwidth_gbs(self) -> float:
        return self.last.bandwidth_gbs

    @property
    def latency_us(self) -> float:
        return self.last.latency_us

    def at(self, nbytes: float, latency: bool = True) -> Regime:
        """The regime of a buffer of `nbytes`; without its latency for `latency=False`."""
        regime = regime_at(self.regimes, nbytes)
        return regime if latency else Regime(regime.from_bytes, regime.bandwidth_gbs, 0.0)


class CommModel:
    """Collective time lookup: fitted measured curves, then hardware links, then defaults."""

    def __init__(
        self,
        comm: Columns | pd.DataFrame | None,
        *,
        hardware: HardwareSpec | None = None,
        inter_node_bandwidth_gbs: float | None = None,
        multi_node: bool = False,
        multi_device: bool = True,
    ) -> None:
        self.hardware = hardware
        """The description whose network tiers place the groups (None: domain = node, one card
        per device, NCCL's algorithms)."""
        self._fits = _fit_rows(comm)
        self._links: dict[tuple[str, int, str], _Fit] = {}
        self._times: dict[tuple, float] = {}
        self.warnings: list[str] = []
        self._scope_links: dict[str, LinkSpec] = {}
        inter_needed = multi_node and inter_node_bandwidth_gbs is None
        for scope, needed in (("intra_node", multi_device), ("inter_node", inter_needed)):
            self._scope_links[scope] = self._scope_link(scope, needed, hardware)
        if inter_node_bandwidth_gbs is not None:
            latency = self._scope_links["inter_node"].latency_us
            self._scope_links["inter_node"] = LinkSpec(inter_node_bandwidth_gbs, latency)
            self._fits = {k: v for k, v in self._fits.items() if k[1] != "inter_node"}

    def _scope_link(self, scope: str, needed: bool, hardware: HardwareSpec | None) -> LinkSpec:
        measured = [fit for (op, sc, _), fit in self._fits.items() if sc == scope]
        if measured:
            # Median of the fitted links: what an op with no curve of its own borrows.
            return LinkSpec(
                float(np.median([f.last.bandwidth_gbs for f in measured])),
                float(np.median([f.last.latency_us for f in measured])),
            )
        if hardware is not None:
            return hardware.link(scope)
        default = DEFAULT_LINKS[scope]
        if needed:
            self.warnings.append(
                f"WARNING: no {scope.replace('_', '-')} communication figures in the profile; using the "
                f"default {default.bandwidth_gbs:g} GB/s, {default.latency_us:g} us per message "
                "(pass --hardware FILE or --inter-node-bandwidth GBS to set it)"
            )
        return default

    def link(self, op: str, group_size: int, scope: str) -> _Fit:
        """The size regimes (latency, bandwidth) that time `op` on a group of this size in this
        scope."""
        key = (op, group_size, scope)
        found = self._links.get(key)
        if found is None:
            found = self._links[key] = self._find_link(op, group_size, scope)
        return found

    def _find_link(self, op: str, group_size: int, scope: str) -> _Fit:
        exact = self._fits.get((op, scope, group_size))
        if exact is not None:
            return exact
        sizes = sorted(g for (o, s, g) in self._fits if o == op and s == scope)
        if sizes:
            nearest = min(sizes, key=lambda g: (abs(np.log2(g) - np.log2(max(group_size, 1))), g))
            return self._fits[(op, scope, nearest)]
        return _Fit(self._scope_links[scope].regimes(op))

    def placement(
        self, stride: int, size: int, devices_per_node: int, num_devices: int | None = None
    ) -> GroupPlacement:
        """group_scope on this model's hardware (its high-bandwidth domain)."""
        domain = self.hardware.domain_size if self.hardware is not None else None
        return group_scope(stride, size, devices_per_node, domain, num_devices)

    def time_us(
        self, op: str, group_size: int, scope: str | GroupPlacement, nbytes: float
    ) -> float:
        """Time of one collective over `group_size` ranks of `nbytes` per rank (0 for a lone rank).

        `scope` is a GroupPlacement, or a comm.csv scope name (`inter_node`: one member per node)."""
        return self._cached(op, group_size, scope, nbytes, True)

    def transfer_us(
        self, op: str, group_size: int, scope: str | GroupPlacement, nbytes: float
    ) -> float:
        """time_us without the latencies: the bytes' part of the collective, at the bandwidth of
        the size regime of `nbytes` (a per-parameter share of a larger reduction)."""
        return self._cached(op, group_size, scope, nbytes, False)

    def _cached(
        self, op: str, size: int, scope: str | GroupPlacement, nbytes: float, latency: bool
    ) -> float:
        key = (op, size, scope, nbytes, latency)
        found = self._times.get(key)
        if found is None:
            if size <= 1 and op != "send_recv":
                found = 0.0
            else:
                found = self._placed_us(op, size, _as_placement(scope, size), nbytes, latency)
            self._times[key] = found
        return found

    def _placed_us(
        self, op: str, size: int, place: GroupPlacement, nbytes: float, latency: bool
    ) -> float:
        """The tier's rule: curves inside a node, the domain link inside a domain, else the
        cards of the nodes (comm_cost.spanning_time_us); every link at the regime of `nbytes`."""
        if place.tier == "intra_node":
            fit = self.link(op, size, "intra_node").at(nbytes, latency)
            return collective_time_us(op, size, nbytes, fit.bandwidth_gbs, fit.latency_us)
        if place.tier == "intra_domain":
            assert self.hardware is not None, "a domain tier comes from a hardware description"
            link = _Fit(self.hardware.domain_link.regimes(op)).at(nbytes, latency)
            return collective_time_us(op, size, nbytes, link.bandwidth_gbs, link.latency_us)
        hardware = self.hardware
        net = NodeNetwork(
            intra=self.link(op, max(place.per_node, 2), "intra_node").at(nbytes, latency),
            card=self.link(op, size, "inter_node").at(nbytes, latency),
            cards_per_device=hardware.nics_per_device if hardware is not None else 1.0,
            library=hardware.collectives if hardware is not None else "nccl",
        )
        span = Span(place.per_node, place.nodes) if op != "send_recv" else Span(1, 2)
        return spanning_time_us(op, span, nbytes, net)


def _as_placement(scope: str | GroupPlacement, size: int) -> GroupPlacement:
    """A comm.csv scope name as a placement: `inter_node` puts one member on each node."""
    if isinstance(scope, GroupPlacement):
        return scope
    return (
        GroupPlacement("intra_node", size, 1)
        if scope == "intra_node"
        else GroupPlacement("inter_node", 1, size)
    )


def _fit_rows(comm: Columns | pd.DataFrame | None) -> dict[tuple[str, str, int], _Fit]:
    """Each measured (op, scope, group size) curve's size regimes, a scope's curves together
    (hardware/regime_fit.py fit_curves: relative least squares, the scope's switch or the op's
    own where it pays for itself); a curve of one size is a line through the origin."""
    fits: dict[tuple[str, str, int], _Fit] = {}
    table = Columns.of(comm)
    if table.empty:
        return fits
    all_bytes, all_times = table["bytes"].astype(float), table["time_us"].astype(float)
    by_scope: dict[str, list[tuple[tuple[str, str, int], Curve]]] = {}
    for (op, scope, group), index in table.groups(["op", "scope", "group_size"]).items():
        key = (str(op), str(scope), int(group))
        if traffic_factor(key[0], key[2]) <= 0:
            continue
        nbytes, times = all_bytes[index], all_times[index]
        if len(index) >= 2 and np.ptp(nbytes) > 0 and (times > 0).sum() >= 2:
            curve = Curve([key[0]] * len(index), [key[2]] * len(index), nbytes, times)
            by_scope.setdefault(key[1], []).append((key, curve))
        else:
            bandwidth = traffic_factor(key[0], key[2]) * max(nbytes[0], 1.0) / (times[0] * 1e3)
            fits[key] = _Fit((Regime(0, bandwidth, 0.0),))
    for curves in by_scope.values():
        for (key, _), fit in zip(curves, fit_curves([c for _, c in curves]), strict=True):
            fits[key] = _Fit(fit.regimes)
    return fits
