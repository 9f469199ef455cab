"""One level of a hardware description's network (`LinkSpec`) and its JSON form.

A link is per device and direction, as achieved; a full mesh (`mesh_links`) shares its bandwidth
among the peers a group reaches; `ops` holds per-collective figures a measurement fitted
(`calibrate --comm`). The description (hardware/__init__.py) holds one link per tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tinker_opt.comm_cost import COMM_OPS
from tinker_opt.errors import ConfigError


@dataclass(frozen=True)
class LinkSpec:
    """One level of the network, per device and direction, as achieved (not the datasheet peak)."""

    bandwidth_gbs: float
    latency_us: float
    mesh_links: int | None = None
    """Direct links per device when a node's devices form a full mesh (HCCS on the Atlas 800T
    A2): `bandwidth_gbs` is over all of them, and a group of g devices of the node reaches its
    peers over the g - 1 links between them only; None: a switch (NVSwitch), every group gets
    the whole bandwidth."""
    ops: tuple[tuple[str, float, float], ...] = ()
    """Per-collective (op, bandwidth_gbs, latency_us) where a measurement fitted them
    (`calibrate --comm`: an all-to-all reaches another bus bandwidth than a ring all-reduce on
    the same link); the JSON form is `"ops": {op: {"bandwidth_gbs", "latency_us"}}`. An op not
    listed runs at the link's own figures."""

    def __post_init__(self) -> None:
        if isinstance(self.ops, dict):  # the JSON form
            object.__setattr__(self, "ops", _op_links(self.ops))
        if self.bandwidth_gbs <= 0 or self.latency_us < 0:
            raise ConfigError(
                f"link bandwidth must be > 0 and latency >= 0, got {self.bandwidth_gbs}, {self.latency_us}"
            )
        if self.mesh_links is not None and self.mesh_links < 1:
            raise ConfigError(f"mesh_links must be a positive link count, got {self.mesh_links}")

    def for_op(self, op: str) -> LinkSpec:
        """The link as `op` runs on it: its own fitted figures where `ops` lists it."""
        for name, bandwidth_gbs, latency_us in self.ops:
            if name == op:
                return LinkSpec(bandwidth_gbs, latency_us, self.mesh_links)
        return self

    def group_bandwidth_gbs(self, group_size: int) -> float:
        """Bandwidth per device and direction inside a group of `group_size` devices of one node:
        the whole link behind a switch, (g - 1) / mesh_links of it in a full mesh (a
        point-to-point transfer is a group of 2: one link)."""
        if self.mesh_links is None:
            return self.bandwidth_gbs
        return self.bandwidth_gbs * min(1.0, (max(group_size, 2) - 1) / self.mesh_links)


def link_dict(link: LinkSpec) -> dict[str, Any]:
    """A link as the hardware file writes it (`mesh_links` and `ops` only where they are set)."""
    out: dict[str, Any] = {"bandwidth_gbs": link.bandwidth_gbs, "latency_us": link.latency_us}
    if link.mesh_links is not None:
        out["mesh_links"] = link.mesh_links
    if link.ops:
        out["ops"] = {op: {"bandwidth_gbs": bw, "latency_us": lat} for op, bw, lat in link.ops}
    return out


def _op_links(ops: dict[str, Any]) -> tuple[tuple[str, float, float], ...]:
    """The JSON `ops` of a link as LinkSpec.ops, each op a known collective with a positive rate."""
    links = []
    for op, figures in ops.items():
        if op not in COMM_OPS:
            raise ConfigError(f"link ops: unknown collective {op!r}; expected one of {COMM_OPS}")
        bandwidth_gbs, latency_us = float(figures["bandwidth_gbs"]), float(figures["latency_us"])
        if bandwidth_gbs <= 0 or latency_us < 0:
            raise ConfigError(
                f"link ops: {op} needs bandwidth > 0 and latency >= 0, got {bandwidth_gbs}, {latency_us}"
            )
        links.append((str(op), bandwidth_gbs, latency_us))
    return tuple(links)
