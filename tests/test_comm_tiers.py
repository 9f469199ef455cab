"""Collectives on the network tiers: within a node, across nodes with one and several members per
node (NCCL rings, HCCL two-level), concurrent groups on shared cards, the high-bandwidth domain.

Every expected time is worked by hand below from the link figures (GB/s = 1e3 B/us); S = 1e8 B.
"""

from __future__ import annotations

import pandas as pd
import pytest

from tinker_opt.comm_cost import NodeNetwork, Span, spanning_time_us
from tinker_opt.costs.comm_model import CommModel, GroupPlacement, group_scope
from tinker_opt.hardware import HardwareSpec, LinkSpec, load_hardware

S = 1e8
INTRA = LinkSpec(bandwidth_gbs=200.0, latency_us=5.0)
CARD = LinkSpec(bandwidth_gbs=25.0, latency_us=10.0)
NCCL = NodeNetwork(intra=INTRA, card=CARD)
HCCL = NodeNetwork(intra=INTRA, card=CARD, library="hccl")
SHARED = NodeNetwork(intra=INTRA, card=CARD, cards_per_device=0.5)


def _hardware(**network) -> HardwareSpec:
    return HardwareSpec(
        name="test",
        devices_per_node=network.pop("devices_per_node", 8),
        memory_gb=80,
        peak_tflops={"bf16": 300.0},
        memory_bandwidth_gbs=2000,
        intra_node=INTRA,
        inter_node=CARD,
        **network,
    )


def _model(hardware: HardwareSpec) -> CommModel:
    empty = pd.DataFrame(columns=["op", "group_size", "scope", "bytes", "time_us"])
    return CommModel(empty, hardware=hardware, multi_node=True)


def test_within_a_node_is_a_ring_on_the_intra_link() -> None:
    """tp 8 on a node of 8: 14 steps x 5 us + 2*7/8 * S / 200 GB/s = 70 + 875 us."""
    model = _model(_hardware())
    place = model.placement(1, 8, 8)
    assert place == GroupPlacement("intra_node", 8, 1)
    assert model.time_us("all_reduce", 8, place, S) == pytest.approx(945.0)


def test_placement_counts_members_per_node() -> None:
    """dp 8 of tp 2 ranks on nodes of 8: 4 members on each of 2 nodes; dp of tp 8: 1 per node."""
    assert group_scope(2, 8, 8) == GroupPlacement("inter_node", 4, 2)
    assert group_scope(8, 4, 8) == GroupPlacement("inter_node", 1, 4)
    assert group_scope(1, 16, 8) == GroupPlacement("inter_node", 8, 2)


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        # 2*3 steps x 10 us + 2*3/4 * S / 25 GB/s
        ("all_reduce", 60.0 + 6000.0),
        # 3 steps x 10 us + 3/4 * S / 25 GB/s
        ("all_gather", 30.0 + 3000.0),
        ("reduce_scatter", 30.0 + 3000.0),
        ("all_to_all", 30.0 + 3000.0),
        # one hop: 10 us + S / 25 GB/s
        ("send_recv", 10.0 + 4000.0),
    ],
)
def test_one_member_per_node_rides_its_own_card(op: str, expected: float) -> None:
    """dp 4 across 4 nodes, one member each: the ring over one card per hop (as before)."""
    assert spanning_time_us(op, Span(1, 4), S, NCCL) == pytest.approx(expected)
    assert spanning_time_us(op, Span(1, 4), S, HCCL) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        # 30 steps x 10 us + 2*15/16 * S / min(200, 8 x 25) GB/s
        ("all_reduce", 300.0 + 937.5),
        # 15 steps x 10 us + 15/16 * S / 200 GB/s
        ("all_gather", 150.0 + 468.75),
        ("reduce_scatter", 150.0 + 468.75),
        # 15 x 10 us + max(7/16 * S / 200, 8/16 * S / 25): both parts at once
        ("all_to_all", 150.0 + 2000.0),
    ],
)
def test_nccl_ring_spreads_a_full_node_group_over_all_cards(op: str, expected: float) -> None:
    """tp 16 over two nodes of 8 (NCCL): the ring's node crossings use all 8 cards."""
    assert spanning_time_us(op, Span(8, 2), S, NCCL) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        # intra RS (7 x 5 + 7/8 S/200) + inter AR of S/8 (2 x 10 + S/8 / 25) + intra AG
        ("all_reduce", 472.5 + 520.0 + 472.5),
        # inter RS of S (10 + S/2 / 25) + intra RS of S/2 (35 + 7/8 * S/2 / 200)
        ("reduce_scatter", 2010.0 + 253.75),
        # intra AG of S/2 + inter AG of S
        ("all_gather", 253.75 + 2010.0),
        # 15 x 10 us + 7/16 * S / 200 + 8/16 * S / 25: intra then inter
        ("all_to_all", 150.0 + 218.75 + 2000.0),
    ],
)
def test_hccl_runs_two_levels(op: str, expected: float) -> None:
    """tp 16 over two nodes of 8 (HCCL): the stages of HCCL's two-level algorithms, summed."""
    assert spanning_time_us(op, Span(8, 2), S, HCCL) == pytest.approx(expected)


def test_concurrent_groups_share_the_cards() -> None:
    """Two devices per card: dp groups of one member per node get half a card each
    (60 + 1.5 S / 12.5 GB/s); groups of two members per node get one card (a ring of 8 ranks:
    14 x 10 + 1.75 S / 25 GB/s)."""
    assert spanning_time_us("all_reduce", Span(1, 4), S, SHARED) == pytest.approx(12060.0)
    assert spanning_time_us("all_reduce", Span(2, 4), S, SHARED) == pytest.approx(7140.0)
    assert spanning_time_us("send_recv", Span(1, 2), S, SHARED) == pytest.approx(8010.0)


def test_comm_model_prices_a_cross_node_group_by_its_placement() -> None:
    """CostModel's path: tp 16 on nodes of 8 is the NCCL full-node ring; a plain `inter_node`
    scope is one member per node; the A3's shared cards halve a dp group's share."""
    model = _model(_hardware())
    assert model.time_us("all_reduce", 16, model.placement(1, 16, 8), S) == pytest.approx(1237.5)
    assert model.time_us("all_reduce", 4, "inter_node", S) == pytest.approx(6060.0)
    shared = _model(_hardware(devices_per_node=16, nics_per_node=8))
    assert shared.time_us("all_reduce", 4, shared.placement(16, 4, 16), S) == pytest.approx(12060.0)


def test_domain_spanning_nodes_uses_the_domain_link() -> None:
    """An NVL72-like domain (72 devices, nodes of 4): tp 8 spans two nodes but stays in the
    domain, a ring on the 600 GB/s domain link (14 x 2 + 1.75 S / 600); tp 8 x dp 16 = 128 > 72
    leaves it."""
    hardware = _hardware(
        devices_per_node=4, domain_size=72, intra_domain=LinkSpec(600.0, 2.0), nics_per_node=4
    )
    model = _model(hardware)
    place = model.placement(1, 8, 4)
    assert place == GroupPlacement("intra_domain", 4, 2)
    assert model.time_us("all_reduce", 8, place, S) == pytest.approx(28.0 + 1.75 * S / 600e3)
    assert model.placement(8, 16, 4).tier == "inter_node"
    assert model.placement(8, 6, 4).tier == "inter_node"  # a 48-rank span straddles domains
    assert model.placement(8, 6, 4, num_devices=48).tier == "intra_domain"  # the job fits in one


def test_existing_descriptions_keep_domain_equal_to_node() -> None:
    """Files without the new keys: the domain is the node, one card per device, NCCL."""
    for name in ("a100-80gb", "h100-80gb"):
        hardware = load_hardware(name)
        assert hardware.domain_devices == hardware.devices_per_node
        assert hardware.nics_per_device == 1.0
        assert hardware.collectives == "nccl"
    assert load_hardware("910b").collectives == "hccl"
