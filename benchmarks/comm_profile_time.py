"""How long `profile-comm` runs per node count: an ESTIMATE, not a measurement.

The run times every group kind of profile/comm_groups.py `plan_groups` (intra-node 2..G, the same
local rank on 2..N nodes, the whole world), each op at each size (warm-up + timed calls, one
group barrier before each call). Each call is priced by the cost model on a shipped description
(costs/comm_model.py CommModel on its comm table); a barrier is priced as a 1-byte all-reduce of
the group. Creating the communicators and joining the job are not priced by anything here:
ASSUMPTION 0.5 s per group kind (NCCL / HCCL communicator set-up grows with the group; a figure
of this script, not a source) and 30 s to start (torch import, rendezvous, device set-up).

    PYTHONPATH=. python benchmarks/comm_profile_time.py [--hardware h100-80gb] [--repeats 5]
"""

from __future__ import annotations

import argparse

from tinker_opt.comm_cost import COMM_OPS
from tinker_opt.costs.comm_model import CommModel, GroupPlacement
from tinker_opt.hardware import comm_table, load_hardware
from tinker_opt.profile.comm import comm_sizes
from tinker_opt.profile.comm_groups import CommGroup, Topology, plan_groups

KIND_SETUP_S = 0.5
"""ASSUMPTION: communicator creation per group kind (see the module docstring)."""
START_S = 30.0
"""ASSUMPTION: start-up of every rank (see the module docstring)."""


def _placement(kind: CommGroup, per_node: int) -> GroupPlacement:
    if kind.scope == "intra_node":
        return GroupPlacement("intra_node", kind.size, 1)
    if kind.scope == "inter_node":
        return GroupPlacement("inter_node", 1, kind.size)
    return GroupPlacement("inter_node", per_node, kind.size // per_node)


def estimate_s(model: CommModel, topology: Topology, calls: int, sizes) -> tuple[int, float]:
    """(timed calls, seconds of collectives and barriers) of one run."""
    count, total_us = 0, 0.0
    for kind in plan_groups(topology):
        place = _placement(kind, topology.per_node)
        barrier = model.time_us("all_reduce", kind.size, place, 1.0)
        for op in COMM_OPS:
            if op == "send_recv" and kind.size != 2:
                continue
            for nbytes in sizes:
                each = model.time_us(op, kind.size, place, nbytes) * (2 if op == "send_recv" else 1)
                total_us += calls * (each + barrier)
                count += calls
    return count, total_us / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h100-80gb")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    spec = load_hardware(args.hardware)
    model = CommModel(comm_table(spec, max_group_size=64), hardware=spec)
    per_node = spec.devices_per_node
    print(
        f"profile-comm on {args.hardware} ({per_node} devices a node), sizes 16 KiB x 2^i to 256 MiB, "
        f"warmup {args.warmup}, repeats {args.repeats}: ESTIMATE\n"
    )
    print("| nodes | group kinds | calls | collectives s | + set-up, start s |")
    print("| --- | --- | --- | --- | --- |")
    for nodes in (1, 2, 4, 8, 16, 32, 64):
        topology = Topology(nodes, per_node, ("host",) * nodes)
        kinds = len(plan_groups(topology))
        sizes = comm_sizes(256 * 1024 * 1024)
        calls, seconds = estimate_s(model, topology, args.warmup + args.repeats, sizes)
        total = seconds + kinds * KIND_SETUP_S + START_S
        print(f"| {nodes} | {kinds} | {calls} | {seconds:.1f} | {total:.0f} |")


if __name__ == "__main__":
    main()
