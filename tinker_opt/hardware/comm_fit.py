"""Fitting a description's links to a measured communication profile (`calibrate --comm`).

The rows of `comm.csv` (profile-comm) are priced the way the cost model prices them
(costs/comm_model.py, comm_cost.py), so each is linear in a tier's latency and 1 / bandwidth:

* `intra_node` rows, a group of g devices of one node: a ring on the intra-node link
  (comm_cost.collective_time_us), over (g - 1) / mesh_links of it where the description's node is
  a full mesh (LinkSpec.group_bandwidth_gbs, the 910B's HCCS);
* `inter_node` rows, one member on each of k nodes: inside one high-bandwidth domain (the
  description's `domain` holds every measured device) a flat ring on the domain link
  (`intra_domain`); else comm_cost.spanning_time_us with one member per node, which is the same
  ring on the device's share of the node's cards (cards per device x one card: `inter_node` is
  one card, so the fitted card is the measured share over the cards per device).

Each tier is fitted by relative least squares (hardware/fit.py fit_link) over all its rows (the
tier's figures, what an op not measured takes), and each op measured at two or more sizes gets
its own figures on the tier (LinkSpec.ops): an all-to-all reaches another bus bandwidth than a
ring all-reduce over the same link (nccl-tests PERFORMANCE.md reports each op's bus bandwidth on
its own). An op's figures are its size regimes (comm_cost.Regime, hardware/regime_fit.py
fit_curves: the library's protocols by size, one switch for the tier's ops or, where an op
bends elsewhere, its own, each kept only where it pays for its figures), the fit the cost model
makes of a comm.csv's curves too (costs/comm_model.py).
The whole-world rows (several members a node, comm_world.csv) are not fitted: the cost
model prices them from the two tiers (NCCL's rings, HCCL's two-level forms), and `calibrate
--comm` reports how well.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tinker_opt.comm_cost import Regime
from tinker_opt.errors import ConfigError
from tinker_opt.hardware import HardwareSpec, LinkSpec
from tinker_opt.hardware.fit import FitResult, fit_link
from tinker_opt.hardware.regime_fit import Curve, fit_curves

TIER_KEYS = {"intra_node": "intra_node", "intra_domain": "domain", "inter_node": "inter_node"}
"""The description's key of each tier's link (hardware/__init__.py schema)."""


@dataclass(frozen=True)
class TierFit:
    """One tier's fitted link (its own figures and each op's) and how well the tier-wide fit does."""

    tier: str
    """intra_node | intra_domain | inter_node (costs/comm_model.py GroupPlacement.tier)."""
    link: LinkSpec
    result: FitResult
    """The tier-wide fit (one latency and bandwidth for every op of the tier)."""
    parameters: int = 2
    """Figures fitted to the tier's rows: the tier-wide pair, each op's regimes, the switch."""


def cross_node_tier(hardware: HardwareSpec, num_nodes: int, per_node: int) -> str:
    """The tier of the measured cross-node groups: the domain when it holds every measured device
    and spans nodes (comm_model.group_scope: a job inside one domain), else across domains."""
    domain = hardware.domain_size or hardware.devices_per_node
    spans_nodes = domain > hardware.devices_per_node
    return "intra_domain" if spans_nodes and num_nodes * per_node <= domain else "inter_node"


def _share(hardware: HardwareSpec, tier: str, group_size: int) -> float:
    """The fraction of the tier's link one member of a group gets, as the cost model prices it."""
    if tier == "intra_node":
        link = hardware.intra_node
        return link.group_bandwidth_gbs(group_size) / link.bandwidth_gbs
    return hardware.nics_per_device if tier == "inter_node" else 1.0


def _columns(hardware: HardwareSpec, tier: str, rows: pd.DataFrame) -> tuple[list, ...]:
    """(ops, group sizes, bytes, times, shares) of the rows, as hardware/fit.py reads them."""
    groups = [int(g) for g in rows["group_size"]]
    return (
        list(rows["op"]),
        groups,
        list(rows["bytes"].astype(float)),
        list(rows["time_us"].astype(float)),
        [_share(hardware, tier, g) for g in groups],
    )


def fit_tier(hardware: HardwareSpec, tier: str, rows: pd.DataFrame) -> TierFit:
    """The tier's link fitted to its rows: its own figures over every op, then each op's size
    regimes (the tier's switch, or the op's own)."""
    try:
        latency_us, bandwidth_gbs, result = fit_link(*_columns(hardware, tier, rows))
        names, curves = [], []
        for op, op_rows in rows.groupby("op", sort=True):
            if op_rows["bytes"].nunique() >= 2:
                names.append(str(op))
                curves.append(Curve(*_columns(hardware, tier, op_rows)))
        fits = fit_curves(curves) if curves else []
    except ValueError as exc:
        raise ConfigError(f"calibrate --comm: {tier} rows: {exc}") from None
    ops = [
        (op, tuple(_rounded(r) for r in fit.regimes)) for op, fit in zip(names, fits, strict=True)
    ]
    shared = any(fit.shared_switch for fit in fits)  # the tier's switch, counted once
    parameters = 2 + sum(fit.parameters for fit in fits) + int(shared)
    mesh = hardware.intra_node.mesh_links if tier == "intra_node" else None
    link = LinkSpec(round(bandwidth_gbs, 4), round(latency_us, 4), mesh, tuple(ops))
    return TierFit(tier, link, result, parameters)


def _rounded(regime: Regime) -> Regime:
    return Regime(regime.from_bytes, round(regime.bandwidth_gbs, 4), round(regime.latency_us, 4))


def fit_comm(
    hardware: HardwareSpec, comm: pd.DataFrame, num_nodes: int, per_node: int
) -> list[TierFit]:
    """Every tier the rows measure: intra_node, and the cross-node tier when there are such rows."""
    fits = []
    cross = cross_node_tier(hardware, num_nodes, per_node)
    for scope, tier in (("intra_node", "intra_node"), ("inter_node", cross)):
        rows = comm[comm["scope"] == scope]
        if not rows.empty:
            fits.append(fit_tier(hardware, tier, rows))
    if not fits:
        raise ConfigError("calibrate --comm: the file holds no rows to fit")
    return fits


def fitted_description(hardware: HardwareSpec, fits: list[TierFit], source: str) -> dict[str, Any]:
    """The description's JSON with each fitted tier's link replaced, and what was fitted."""
    links = {fit.tier: fit.link for fit in fits}
    spec = dataclasses.replace(
        hardware,
        intra_node=links.get("intra_node", hardware.intra_node),
        inter_node=links.get("inter_node", hardware.inter_node),
        intra_domain=links.get("intra_domain", hardware.intra_domain),
    )
    data = spec.to_dict()
    data["name"] = f"{hardware.name} (calibrated on {source})"
    data["calibration"] = {
        "comm": source,
        "tiers": {
            fit.tier: {
                "num_samples": fit.result.num_samples,
                "parameters": fit.parameters,
                "mean_abs_rel_error": round(fit.result.mean_abs_rel_error, 4),
                "max_abs_rel_error": round(fit.result.max_abs_rel_error, 4),
            }
            for fit in fits
        },
    }
    data["sources"] = [
        *data["sources"],
        f"{', '.join(TIER_KEYS[fit.tier] for fit in fits)} links fitted by calibrate --comm "
        f"to the collectives measured in {source} (least squares, relative errors)",
    ]
    return data
