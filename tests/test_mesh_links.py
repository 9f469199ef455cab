"""A full-mesh node (HCCS on the Atlas 800T A2, `mesh_links` in the description): a group of g
devices of the node reaches its peers over its g - 1 direct links only."""

from __future__ import annotations

import pytest

from tinker_opt.comm_cost import collective_time_us
from tinker_opt.errors import ConfigError
from tinker_opt.hardware import LinkSpec, comm_table, load_hardware


def _time(table, op: str, group: int, nbytes: int) -> float:
    row = table[
        (table.op == op)
        & (table.group_size == group)
        & (table.scope == "intra_node")
        & (table.bytes == nbytes)
    ]
    return float(row.time_us.iloc[0])


def test_910b_pairs_get_one_link_of_seven():
    """910B: a pair (ep 2, a pipeline send) at 140 / 7 GB/s, a group of 4 at 3/7, of 8 at all."""
    hw = load_hardware("910b")
    link = hw.intra_node
    assert link.mesh_links == 7
    table = comm_table(hw, max_group_size=8)
    nbytes = int(table.bytes.max())
    for op, group, share in (
        ("all_to_all", 2, 1 / 7),
        ("send_recv", 2, 1 / 7),
        ("all_reduce", 4, 3 / 7),
        ("all_reduce", 8, 1.0),
    ):
        expected = collective_time_us(
            op, group, nbytes, link.bandwidth_gbs * share, link.latency_us
        )
        assert _time(table, op, group, nbytes) == pytest.approx(expected, abs=1e-3)


def test_a_switch_gives_every_group_the_whole_link():
    """H100 (NVSwitch, no mesh_links): the bandwidth does not depend on the group size."""
    link = load_hardware("h100-80gb").intra_node
    assert link.mesh_links is None
    assert link.group_bandwidth_gbs(2) == link.group_bandwidth_gbs(8) == link.bandwidth_gbs


def test_mesh_links_must_be_positive():
    with pytest.raises(ConfigError, match="mesh_links"):
        LinkSpec(bandwidth_gbs=100.0, latency_us=1.0, mesh_links=0)
