"""calibrate --comm: links fitted to measured collectives, priced back as the cost model prices them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from tinker_opt.costs.comm_model import CommModel, GroupPlacement
from tinker_opt.errors import ConfigError
from tinker_opt.hardware import LinkSpec, comm_table, load_hardware
from tinker_opt.hardware.comm_fit import cross_node_tier
from tinker_opt.profile.meta import ProfileMeta
from tinker_opt.profile.tables import ProfiledData
from tinker_opt.verbs.calibrate_comm import run_calibrate_comm
from tinker_opt.verbs.calibrate_log import _slowed_links
from tinker_opt.verbs.common import described_comm

SIZES = (65536, 262144, 1048576, 4194304, 16777216)
OPS_OF = {2: ("send_recv", "all_reduce", "all_gather", "reduce_scatter", "all_to_all")}


def _rows(spec, nodes: int, per_node: int, slow_all_to_all: float, noise: float) -> pd.DataFrame:
    """comm.csv rows as the description prices them (all-to-all `slow_all_to_all` times slower),
    each time off by a deterministic +-noise."""
    model = CommModel(comm_table(spec, max_group_size=64), hardware=spec)
    cross = cross_node_tier(spec, nodes, per_node)
    rows = []
    for scope, top in (("intra_node", per_node), ("inter_node", nodes)):
        for size in (g for g in (2, 4, 8) if g <= top):
            place = (
                GroupPlacement("intra_node", size, 1)
                if scope == "intra_node"
                else GroupPlacement(cross, 1, size)
            )
            for op in OPS_OF.get(size, OPS_OF[2][1:]):
                for nbytes in SIZES:
                    time_us = model.time_us(op, size, place, nbytes)
                    if op == "all_to_all":
                        time_us *= slow_all_to_all
                    wobble = 1 + noise * math.sin(len(rows) * 1.7)
                    rows.append((op, size, scope, nbytes, time_us * wobble))
    return pd.DataFrame(rows, columns=["op", "group_size", "scope", "bytes", "time_us"])


def _calibrate(tmp_path: Path, name: str, nodes: int, per_node: int, **kw) -> dict:
    spec = load_hardware(name)
    folder = tmp_path / "comm"
    folder.mkdir()
    _rows(spec, nodes, per_node, **kw).to_csv(folder / "comm.csv", index=False)
    topology = {"num_nodes": nodes, "devices_per_node": per_node, "hostnames": []}
    (folder / "meta.json").write_text(json.dumps({"comm_profile": {"topology": topology}}))
    return run_calibrate_comm(folder / "comm.csv", name, tmp_path / "mine.json")


@pytest.mark.parametrize(
    ("name", "nodes", "per_node", "tier"),
    [
        ("h100-80gb", 4, 8, "inter_node"),  # NCCL, a card per device
        ("910b", 2, 8, "inter_node"),  # HCCS full mesh inside the node, HCCL
        ("atlas-a3", 2, 16, "intra_domain"),  # the SuperPoD domain holds both nodes
        ("gb200-nvl72", 2, 4, "intra_domain"),  # NVL72
    ],
)
def test_fit_recovers_the_described_links(tmp_path, name, nodes, per_node, tier):
    """Rows priced from a description (3 % noise) give back its links, each row within 10 %, and
    the cross-node rows fit the tier the cost model places them on."""
    spec = load_hardware(name)
    report = _calibrate(tmp_path, name, nodes, per_node, slow_all_to_all=1.0, noise=0.03)
    tiers = {t["tier"]: t for t in report["tiers"]}
    assert set(tiers) == {"intra_node", tier}
    described = {
        "intra_node": spec.intra_node,
        "intra_domain": spec.domain_link,
        "inter_node": spec.inter_node,
    }
    for key, fitted in tiers.items():
        assert fitted["bandwidth_gbs"] == pytest.approx(described[key].bandwidth_gbs, rel=0.05)
    assert max(r["max_abs_error"] for r in report["residuals"]) < 0.10


def test_each_op_gets_its_own_rate(tmp_path):
    """An all-to-all 1.6 times slower than the rings is fitted as its own rate on the tier, and
    priced within 10 %; the rings keep the link's."""
    report = _calibrate(tmp_path, "h100-80gb", 2, 8, slow_all_to_all=1.6, noise=0.02)
    inter = next(t for t in report["tiers"] if t["tier"] == "inter_node")
    ratio = (
        inter["ops"]["all_reduce"]["bandwidth_gbs"] / inter["ops"]["all_to_all"]["bandwidth_gbs"]
    )
    assert ratio == pytest.approx(1.6, rel=0.08)
    assert inter["ops"]["all_reduce"]["bandwidth_gbs"] == pytest.approx(45, rel=0.05)
    assert max(r["max_abs_error"] for r in report["residuals"]) < 0.10
    written = load_hardware(tmp_path / "mine.json")
    assert written.inter_node.for_op("all_to_all").bandwidth_gbs < written.inter_node.bandwidth_gbs


def test_link_ops_round_trip_and_checks():
    """Per-op figures load from JSON, write back the same, and a bad op is a one-line error."""
    link = LinkSpec(10.0, 5.0, None, {"all_to_all": {"bandwidth_gbs": 4.0, "latency_us": 9.0}})
    assert link.for_op("all_to_all") == LinkSpec(4.0, 9.0) and link.for_op("all_reduce") is link
    spec = load_hardware("h100-80gb")
    data = spec.to_dict()
    data["inter_node"]["ops"] = {"all_to_all": {"bandwidth_gbs": 30.0, "latency_us": 20.0}}
    again = type(spec).from_dict(data)
    assert again.to_dict()["inter_node"] == data["inter_node"]
    table = comm_table(again, max_group_size=4)
    a2a = table[(table["op"] == "all_to_all") & (table["scope"] == "inter_node")]
    ring = table[(table["op"] == "all_gather") & (table["scope"] == "inter_node")]
    assert (a2a["time_us"].to_numpy() > ring["time_us"].to_numpy()).all()  # same traffic, slower
    with pytest.raises(ConfigError, match="unknown collective 'gossip'"):
        LinkSpec(1.0, 1.0, None, {"gossip": {"bandwidth_gbs": 1.0, "latency_us": 1.0}})


def test_log_calibration_slows_per_op_figures_too():
    """calibrate --log's communication factor reaches each op's figures."""
    data = {"inter_node": {"bandwidth_gbs": 40.0, "latency_us": 10.0}}
    data["inter_node"]["ops"] = {"all_to_all": {"bandwidth_gbs": 20.0, "latency_us": 10.0}}
    _slowed_links(data, 2.0)
    assert data["inter_node"]["ops"]["all_to_all"] == {"bandwidth_gbs": 10.0, "latency_us": 20.0}


def test_search_hardware_replaces_described_rows_only():
    """--hardware at search time recomputes comm.csv rows that came from a description; measured
    rows stay."""
    mine = load_hardware("h100-80gb")
    other = comm_table(load_hardware("a100-80gb"), max_group_size=8)
    described = ProfiledData(
        Path("p"), pd.DataFrame(), other, ProfileMeta(comm_source="hardware a")
    )
    measured = ProfiledData(Path("p"), pd.DataFrame(), other, ProfileMeta(comm_source="measured"))
    assert described_comm(measured, mine) is measured
    replaced = described_comm(described, mine).comm
    assert replaced.equals(comm_table(mine, max_group_size=64))
