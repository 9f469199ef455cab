"""The communication groups a cluster measurement times, and the topology it saw (no torch).

The groups are the ones the cost model prices (costs/comm_model.py `group_scope` under
Megatron's rank order, tp innermost):

* inside a node: g = 2, 4, ... up to the node's devices (and the node itself), the first g local
  ranks of every node at once (scope `intra_node`, a comm.csv curve of group size g);
* across nodes: the same local rank on k = 2, 4, ... up to N nodes (and all N), every local rank's
  group at once: how a tp / cp / ep / dp group spans nodes with one member per node, every group of
  its kind on the node communicating together (scope `inter_node`, one member per node, as
  comm.csv's inter-node curves mean it: hardware.comm_table, comm_model.CommModel);
* the whole world (several members on each node): priced by comm_cost.spanning_time_us from the
  two curves above, so its rows go to `comm_world.csv` (checked by `calibrate --comm`), never to
  comm.csv, whose inter-node rows mean one member per node.
"""

from __future__ import annotations

from dataclasses import dataclass

WORLD_SCOPE = "world"
"""Scope of the whole-world rows (comm_world.csv): several members on each node."""


@dataclass(frozen=True)
class CommGroup:
    """One measured group kind: `members` are the concurrent groups (global ranks) timed at once."""

    scope: str
    """intra_node | inter_node | world."""
    size: int
    """Ranks in each group."""
    members: tuple[tuple[int, ...], ...]
    """The groups of this kind that run at the same time (each a tuple of global ranks)."""

    def group_of(self, rank: int) -> tuple[int, ...] | None:
        """The group `rank` belongs to, or None when it sits this one out."""
        return next((group for group in self.members if rank in group), None)


@dataclass(frozen=True)
class Topology:
    """The cluster the ranks saw: nodes, devices a node, each node's host name."""

    num_nodes: int
    per_node: int
    hostnames: tuple[str, ...]
    """Host name of each node, by node index (torchrun's GROUP_RANK)."""

    def rank(self, node: int, local: int) -> int:
        """torchrun's global rank of a node's local rank (RANK = GROUP_RANK * G + LOCAL_RANK)."""
        return node * self.per_node + local

    def node_of(self, rank: int) -> int:
        return rank // self.per_node

    def to_dict(self) -> dict[str, object]:
        return {
            "num_nodes": self.num_nodes,
            "devices_per_node": self.per_node,
            "world_size": self.num_nodes * self.per_node,
            "hostnames": list(self.hostnames),
        }


def group_sizes(count: int) -> list[int]:
    """2, 4, 8, ... up to `count`, and `count` itself when it is not a power of two."""
    sizes = [2**i for i in range(1, count.bit_length()) if 2**i <= count]
    return sizes + ([count] if count >= 2 and count not in sizes else [])


def plan_groups(topology: Topology) -> list[CommGroup]:
    """The group kinds to time, in the order every rank creates them."""
    nodes, per_node = topology.num_nodes, topology.per_node
    groups = [
        CommGroup(
            "intra_node",
            g,
            tuple(tuple(topology.rank(n, i) for i in range(g)) for n in range(nodes)),
        )
        for g in group_sizes(per_node)
    ]
    groups += [
        CommGroup(
            "inter_node",
            k,
            tuple(tuple(topology.rank(n, local) for n in range(k)) for local in range(per_node)),
        )
        for k in group_sizes(nodes)
    ]
    if nodes > 1 and per_node > 1:
        groups.append(CommGroup(WORLD_SCOPE, nodes * per_node, (tuple(range(nodes * per_node)),)))
    return groups
