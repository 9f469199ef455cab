"""`calibrate --comm`: fit a description's links to a measured comm.csv (profile-comm).

The fit is hardware/comm_fit.py's; the check is the cost model's own: the written description
is loaded again and every measured row is priced by costs/comm_model.py CommModel on the
description's comm table (what an analytic profile and `search --hardware` price with), placed
on its tier; the residuals of each op and group size are the report (the whole-world rows of
comm_world.csv too, which the fit never saw).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from tinker_opt.errors import ConfigError

WORLD_FILE = "comm_world.csv"
"""profile-comm's whole-world rows beside comm.csv (verbs/profile_comm.py)."""


def _topology(comm: pd.DataFrame, folder: Path) -> tuple[int, int]:
    """(nodes, devices a node) the rows were measured on: profile-comm's meta.json, else the
    largest group of each scope."""
    meta = folder / "meta.json"
    if meta.exists():
        entry = json.loads(meta.read_text(encoding="utf-8")).get("comm_profile") or {}
        topology = entry.get("topology") or {}
        if topology.get("num_nodes") and topology.get("devices_per_node"):
            return int(topology["num_nodes"]), int(topology["devices_per_node"])
    largest = comm.groupby("scope")["group_size"].max()
    return int(largest.get("inter_node", 1)), int(largest.get("intra_node", 1))


def _world_rows(folder: Path) -> pd.DataFrame:
    path = folder / WORLD_FILE
    if not path.exists():
        return pd.DataFrame(columns=["op", "group_size", "scope", "bytes", "time_us"])
    return pd.read_csv(path)


def _priced(spec, comm: pd.DataFrame, world: pd.DataFrame, nodes: int, per_node: int):
    """Measured vs priced, one row per measurement, on the description's comm table."""
    from tinker_opt.costs.comm_model import CommModel, GroupPlacement
    from tinker_opt.hardware import comm_table
    from tinker_opt.hardware.comm_fit import cross_node_tier

    model = CommModel(comm_table(spec, max_group_size=max(nodes * per_node, 2)), hardware=spec)
    cross = cross_node_tier(spec, nodes, per_node)
    out = []
    for row in pd.concat([comm, world], ignore_index=True).itertuples(index=False):
        size = int(row.group_size)
        place = {
            "intra_node": GroupPlacement("intra_node", size, 1),
            "inter_node": GroupPlacement(cross, 1, size),
        }.get(str(row.scope), GroupPlacement(cross, per_node, max(size // per_node, 1)))
        predicted = model.time_us(str(row.op), size, place, float(row.bytes))
        tier = place.tier if row.scope != "world" else f"world ({cross})"
        out.append((tier, str(row.op), size, int(row.bytes), float(row.time_us), predicted))
    frame = pd.DataFrame(
        out, columns=["tier", "op", "group_size", "bytes", "measured_us", "predicted_us"]
    )
    frame["error"] = frame["predicted_us"] / frame["measured_us"] - 1
    order = frame["tier"].map(lambda tier: (tier.startswith("world"), tier != "intra_node"))
    return (
        frame.assign(_order=order)
        .sort_values(["_order", "op", "group_size", "bytes"])
        .drop(columns="_order")
    )


def residual_table(priced: pd.DataFrame) -> list[dict[str, Any]]:
    """Per tier, op and group size: rows, mean and max |error|, and each size's signed error."""
    table = []
    for (tier, op, size), rows in priced.groupby(["tier", "op", "group_size"], sort=False):
        errors = rows["error"].abs()
        table.append(
            {
                "tier": tier,
                "op": op,
                "group_size": int(size),
                "rows": len(rows),
                "mean_abs_error": float(errors.mean()),
                "max_abs_error": float(errors.max()),
                "by_bytes": dict(zip(rows["bytes"].astype(int), rows["error"], strict=True)),
            }
        )
    return table


def run_calibrate_comm(comm_path: Path, hardware: str, output: Path) -> dict[str, Any]:
    """Fit, write the description to `output`, price every measured row on it; the report."""
    from tinker_opt.hardware import HardwareSpec, load_hardware, write_hardware_json
    from tinker_opt.hardware.comm_fit import fit_comm, fitted_description
    from tinker_opt.hardware.links import op_dict
    from tinker_opt.profile.store import read_comm_csv

    if not comm_path.is_file():
        raise ConfigError(f"calibrate --comm: {comm_path} is not a file; pass DIR/comm.csv")
    comm = read_comm_csv(comm_path)
    nodes, per_node = _topology(comm, comm_path.parent)
    base = load_hardware(hardware)
    fits = fit_comm(base, comm, nodes, per_node)
    data = fitted_description(base, fits, str(comm_path))
    write_hardware_json(data, output)
    spec = HardwareSpec.from_dict(data, origin=str(output))
    priced = _priced(spec, comm, _world_rows(comm_path.parent), nodes, per_node)
    warnings = []
    if per_node != base.devices_per_node:
        warnings.append(
            f"the rows were measured on nodes of {per_node} devices, '{base.name}' describes "
            f"{base.devices_per_node}: its links were fitted as the cost model prices them there"
        )
    return {
        "output": str(output),
        "warnings": warnings,
        "nodes": nodes,
        "devices_per_node": per_node,
        "tiers": [
            {
                "tier": fit.tier,
                "bandwidth_gbs": fit.link.bandwidth_gbs,
                "latency_us": fit.link.latency_us,
                "ops": {op: op_dict(regimes) for op, regimes in fit.link.ops},
                "rows": fit.result.num_samples,
                "parameters": fit.parameters,
            }
            for fit in fits
        ],
        "residuals": residual_table(priced),
        "rows": priced.to_dict(orient="records"),
    }
