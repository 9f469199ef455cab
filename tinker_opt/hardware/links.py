"""One level of a hardware description's network (`LinkSpec`) and its JSON form.

A link is per device and direction, as achieved; a full mesh (`mesh_links`) shares its bandwidth
among the peers a group reaches; `ops` holds per-collective figures a measurement fitted
(`calibrate --comm`), each op's size regimes (comm_cost.Regime) where its curve has more than
one. The description (hardware/__init__.py) holds one link per tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tinker_opt.comm_cost import COMM_OPS, Regime, regime_at
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
    ops: tuple[tuple[str, tuple[Regime, ...]], ...] = ()
    """Per-collective size regimes (op, regimes from the smallest size on) where a measurement
    fitted them (`calibrate --comm`: an all-to-all reaches another bus bandwidth than a ring
    all-reduce on the same link, and a library's protocols switch by size, comm_cost.Regime);
    the JSON form is `"ops": {op: {"bandwidth_gbs", "latency_us", "small": [{"below_bytes",
    "bandwidth_gbs", "latency_us"}, ...]}}`, the op's own figures holding from the last
    `below_bytes` on. An op not listed runs at the link's own figures at every size."""

    def __post_init__(self) -> None:
        if isinstance(self.ops, dict):  # the JSON form
            object.__setattr__(self, "ops", _op_links(self.ops))
        if self.bandwidth_gbs <= 0 or self.latency_us < 0:
            raise ConfigError(
                f"link bandwidth must be > 0 and latency >= 0, got {self.bandwidth_gbs}, {self.latency_us}"
            )
        if self.mesh_links is not None and self.mesh_links < 1:
            raise ConfigError(f"mesh_links must be a positive link count, got {self.mesh_links}")

    def regimes(self, op: str) -> tuple[Regime, ...]:
        """The size regimes `op` runs at on this link (the link's own figures where `ops` lacks it)."""
        for name, regimes in self.ops:
            if name == op:
                return regimes
        return (Regime(0, self.bandwidth_gbs, self.latency_us),)

    def for_op(self, op: str, nbytes: float | None = None) -> LinkSpec:
        """The link as `op` runs on it for a buffer of `nbytes` (None: its largest-size regime)."""
        if not any(name == op for name, _ in self.ops):
            return self
        regimes = self.regimes(op)
        regime = regimes[-1] if nbytes is None else regime_at(regimes, nbytes)
        return LinkSpec(regime.bandwidth_gbs, regime.latency_us, self.mesh_links)

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
        out["ops"] = {op: op_dict(regimes) for op, regimes in link.ops}
    return out


def op_dict(regimes: tuple[Regime, ...]) -> dict[str, Any]:
    """One op's regimes in the JSON form: the last regime's figures, the smaller ones under
    `small`, each with the size it ends below."""
    *small, last = regimes
    out: dict[str, Any] = {"bandwidth_gbs": last.bandwidth_gbs, "latency_us": last.latency_us}
    if small:
        ends = [r.from_bytes for r in regimes[1:]]
        out["small"] = [
            {"below_bytes": end, "bandwidth_gbs": r.bandwidth_gbs, "latency_us": r.latency_us}
            for r, end in zip(small, ends, strict=True)
        ]
    return out


def _regime(op: str, figures: dict[str, Any], from_bytes: int) -> Regime:
    """One regime of the JSON `ops`, its figures checked (bandwidth > 0, latency >= 0)."""
    bandwidth_gbs, latency_us = float(figures["bandwidth_gbs"]), float(figures["latency_us"])
    if bandwidth_gbs <= 0 or latency_us < 0:
        raise ConfigError(
            f"link ops: {op} needs bandwidth > 0 and latency >= 0, got {bandwidth_gbs}, {latency_us}"
        )
    return Regime(from_bytes, bandwidth_gbs, latency_us)


def _op_links(ops: dict[str, Any]) -> tuple[tuple[str, tuple[Regime, ...]], ...]:
    """The JSON `ops` of a link as LinkSpec.ops: each op a known collective, its regimes' ends
    increasing."""
    links = []
    for op, figures in ops.items():
        if op not in COMM_OPS:
            raise ConfigError(f"link ops: unknown collective {op!r}; expected one of {COMM_OPS}")
        small = figures.get("small", [])
        ends = [int(entry["below_bytes"]) for entry in small]
        if ends != sorted(set(ends)) or any(end <= 0 for end in ends):
            raise ConfigError(f"link ops: {op}'s small regimes need increasing below_bytes > 0")
        starts = [0, *ends]
        regimes = [_regime(op, e, start) for e, start in zip(small, starts, strict=False)]
        links.append((str(op), (*regimes, _regime(op, figures, starts[-1]))))
    return tuple(links)
