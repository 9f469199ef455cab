"""Standard cost formulas of the collectives (alpha-beta model, ring algorithms).

The one place these formulas live: the hardware-file comm table, the default inter-node figures
of the cost model and the analytic device all call `collective_time_us`.
Sources: Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH" (2005); NCCL's bus-bandwidth convention (nccl-tests PERFORMANCE.md): a ring all-reduce
moves 2(n-1)/n of the buffer over each link, all-gather / reduce-scatter / all-to-all (n-1)/n.
`nbytes` is always the full buffer of one rank (the gathered size for all-gather, the input of
reduce-scatter), as torch.distributed and comm.csv count it.
`spanning_time_us` prices a group that spans nodes as NCCL and HCCL run it (its docstring cites
each rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

COMM_OPS = ("send_recv", "all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def traffic_factor(op: str, group_size: int) -> float:
    """Bytes each rank sends per byte of buffer (the bus-bandwidth factor)."""
    n = group_size
    if op == "send_recv":
        return 1.0
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    raise ValueError(f"unknown collective {op!r}; expected one of {COMM_OPS}")


def latency_steps(op: str, group_size: int) -> int:
    """Sequential message steps of the ring algorithm (each costs one latency)."""
    n = group_size
    if op == "send_recv":
        return 1
    if n <= 1:
        return 0
    return 2 * (n - 1) if op == "all_reduce" else n - 1


def collective_time_us(
    op: str, group_size: int, nbytes: float, bandwidth_gbs: float, latency_us: float
) -> float:
    """Time of one collective: latency steps x latency + traffic / link bandwidth (GB/s = 1e9 B/s)."""
    if group_size <= 1 and op != "send_recv":
        return 0.0
    transfer_us = traffic_factor(op, group_size) * nbytes / (bandwidth_gbs * 1e3)
    return latency_steps(op, group_size) * latency_us + transfer_us


@dataclass(frozen=True)
class Regime:
    """One size regime of a collective on a link: from `from_bytes` of buffer on (up to the next
    regime's), the op runs at this latency and bandwidth (collective_time_us's figures).

    Collective libraries switch protocol by message size, each protocol with its own latency and
    bandwidth: NCCL's LL / LL128 / Simple (src/graph/tuning.cc: baseLat and hwLat per algorithm
    and protocol; src/enqueue.cc updateCollCostTable times each and runs the cheapest for the
    size), MPI's eager and rendezvous protocols (Open MPI btl_tcp_eager_limit), and gloo over TCP,
    whose messages fit the peer's socket receive buffer or wait for it to drain (Linux tcp(7):
    tcp_rmem, 128 KiB by default; gloo's ring all-reduce itself keeps 2 x ranks segments up to
    2 x ranks MiB, gloo/allreduce.cc ring() with kMaxSegmentSize 1 MiB in allreduce.h, so its
    steps do not change below that). A measured curve is then affine within each regime, not over
    all sizes (hardware/regime_fit.py fit_curves)."""

    from_bytes: int
    bandwidth_gbs: float
    latency_us: float


def regime_at(regimes: tuple[Regime, ...], nbytes: float) -> Regime:
    """The regime that prices a buffer of `nbytes` (regimes in order of from_bytes; a buffer
    below the first regime's from_bytes takes the first)."""
    found = regimes[0]
    for regime in regimes[1:]:
        if nbytes >= regime.from_bytes:
            found = regime
    return found


class Link(Protocol):
    """A link as the formulas read it (hardware.LinkSpec, a fitted comm.csv curve)."""

    @property
    def bandwidth_gbs(self) -> float: ...

    @property
    def latency_us(self) -> float: ...


@dataclass(frozen=True)
class Span:
    """Where the members of one group sit: `per_node` of them on each of `nodes` nodes."""

    per_node: int
    nodes: int

    @property
    def size(self) -> int:
        return self.per_node * self.nodes


@dataclass(frozen=True)
class NodeNetwork:
    """What prices a group that leaves the node: the links, the cards, the library."""

    intra: Link
    """The link inside the node, per device and direction."""
    card: Link
    """One network card, per direction (achieved)."""
    cards_per_device: float = 1.0
    """Network cards per device: 0.5 when two devices share a card."""
    library: str = "nccl"
    """nccl (rings over channels) or hccl (two-level algorithms)."""

    @property
    def device_share_gbs(self) -> float:
        """Network bandwidth of one device when every device of the node sends at once."""
        return self.cards_per_device * self.card.bandwidth_gbs


def spanning_time_us(op: str, span: Span, nbytes: float, net: NodeNetwork) -> float:
    """Time of one collective over a group with `span.per_node` members on each of `span.nodes`
    nodes, while every other group of its kind on the node runs the same collective.

    Concurrency (Megatron builds the tp, dp, ep, pp groups so that every rank of a node belongs
    to one group of each kind, and they all communicate together): a group with g members on a
    node gets g devices' share of the node's cards, g * cards_per_device * card bandwidth.
    NCCL (nccl#601, nccl#43: one ring per card, the operation split over NVLink to balance the
    traffic onto all cards; nccl-tests PERFORMANCE.md bus bandwidth): a flat ring of g*k ranks
    whose node crossings share the group's cards, so bus bandwidth = min(intra link, g cards'
    share) (g = 1: the card share alone); every ring step waits on the slowest hop.
    HCCL (hcclug_000005, two-level algorithms): all-reduce = intra-node reduce-scatter +
    inter-node all-reduce of 1/g of the buffer on each member's share + intra-node all-gather;
    reduce-scatter = inter-node then intra-node; all-gather = intra-node then inter-node.
    All-to-all (both): the intra-node part (g-1)/n and the inter-node part (n-g)/n of the buffer,
    at the same time for NCCL (point-to-point to every peer), one after the other for HCCL.
    send/recv: one device's share of the cards.
    """
    g, n = span.per_node, span.size
    if n <= 1 and op != "send_recv":
        return 0.0
    share, card = net.device_share_gbs, net.card
    if op == "send_recv":
        return card.latency_us + nbytes / (share * 1e3)
    if op == "all_to_all":
        intra_us = (g - 1) / n * nbytes / (net.intra.bandwidth_gbs * 1e3)
        inter_us = (n - g) / n * nbytes / (share * 1e3)
        both = intra_us + inter_us if net.library == "hccl" else max(intra_us, inter_us)
        return latency_steps(op, n) * card.latency_us + both
    if net.library == "hccl" and g > 1:
        return _hccl_two_level_us(op, span, nbytes, net)
    bandwidth = share if g == 1 else min(net.intra.bandwidth_gbs, g * share)
    latency = card.latency_us if g == 1 else max(card.latency_us, net.intra.latency_us)
    return collective_time_us(op, n, nbytes, bandwidth, latency)


def _hccl_two_level_us(op: str, span: Span, nbytes: float, net: NodeNetwork) -> float:
    """HCCL's two-level all-reduce / reduce-scatter / all-gather (hcclug_000005): the stages of
    the table, each a ring over its level; the inter-node stages run one per member at once."""
    g, k = span.per_node, span.nodes
    intra, share, lat = net.intra, net.device_share_gbs, net.card.latency_us

    def inside(o: str, size: float) -> float:
        return collective_time_us(o, g, size, intra.bandwidth_gbs, intra.latency_us)

    def across(o: str, size: float) -> float:
        return collective_time_us(o, k, size, share, lat)

    if op == "all_reduce":
        return (
            inside("reduce_scatter", nbytes)
            + across("all_reduce", nbytes / g)
            + inside("all_gather", nbytes)
        )
    if op == "reduce_scatter":
        return across("reduce_scatter", nbytes) + inside("reduce_scatter", nbytes / k)
    if op == "all_gather":
        return inside("all_gather", nbytes / k) + across("all_gather", nbytes)
    raise ValueError(f"unknown collective {op!r}; expected one of {COMM_OPS}")
