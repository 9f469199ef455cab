"""CP-SAT and MILP against exhaustive enumeration, from 8 to 16,384 devices, every knob on.

Usage: PYTHONPATH=. python benchmarks/solver_vs_enum.py [--cpus 2] [--enum-limit 45] [--quick]

Profiles are synthetic (tests/model_support.py: FLOP-proportional times, Korthikanti activation
bytes, alpha-beta collectives), so the table measures the search, not a device. Enumeration is
the honest baseline: every outer configuration, the exact split of each (vectorised over stages
and candidate values), over `--cpus` processes, no bound pruning; it is stopped at --enum-limit
seconds and then reported as `feasible` (unfinished) with its ratio as a lower bound.
`cpsat-noprune` puts every feasible configuration into one CP-SAT model (small instances). Writes
benchmarks/results/solver_vs_enum.{md,csv}.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from model_support import cluster, dense_model, moe_model, synthetic_profile  # noqa: E402
from tinker_opt.io_utils import write_text_atomic  # noqa: E402
from tinker_opt.model.costs import CostModel  # noqa: E402
from tinker_opt.model.search import search  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SHAPES = {"tps": (1, 2, 4, 8), "cps": (1, 2, 4, 8), "mbss": (1, 2, 4)}
INSTANCES = [
    # name, model factory, nodes, devices per node, global batch, memory limit (MB)
    ("dense-32L-8dev", lambda: dense_model(32, 4096, 32, seq=4096), 1, 8, 64, 60000),
    ("dense-32L-64dev", lambda: dense_model(32, 4096, 32, seq=4096), 8, 8, 256, 60000),
    ("moe-32L-64dev", lambda: moe_model(32, 4096, 32, experts=8, seq=4096), 8, 8, 256, 60000),
    ("dense-64L-512dev", lambda: dense_model(64, 8192, 64, groups=8, seq=4096), 64, 8, 1024, 60000),
    ("moe-64L-1024dev", lambda: moe_model(64, 6144, 48, experts=64, seq=4096), 128, 8, 1024, 60000),
    ("dense-96L-4096dev", lambda: dense_model(96, 12288, 96, seq=2048, vocab=51200), 512, 8, 2048, 60000),
    ("moe-96L-4096dev", lambda: moe_model(96, 8192, 64, experts=64, seq=4096), 512, 8, 4096, 60000),
    ("dense-128L-16384dev", lambda: dense_model(128, 16384, 128, groups=16, seq=4096), 2048, 8, 4096, 60000),
]
NOPRUNE_MAX_DEVICES = 1024
"""`cpsat-noprune` (every feasible configuration in one CP-SAT model, no bound pruning) runs on
the small instances only: it shows what the bounds buy as the space grows."""
COLUMNS = ("instance", "devices", "configs", "solver", "wall_s", "status", "objective_ms", "gap",
           "in_model", "enum_over_solver", "best")


def _cost_model(factory, nodes, per_node, gbs, memory_mb) -> CostModel:
    model = factory()
    shapes = dict(SHAPES, eps=(1, 2, 4, 8, 16, 32, 64)) if model.is_moe else SHAPES
    profile = synthetic_profile(model, **shapes)
    return CostModel.from_profile(profile, model, cluster(nodes, per_node, memory_mb), gbs)


def _run(name, factory, nodes, per_node, gbs, memory_mb, solver, cpus, limit) -> dict:
    cost_model = _cost_model(factory, nodes, per_node, gbs, memory_mb)  # fresh: no shared caches
    start = time.perf_counter()
    base, _, mode = solver.partition("-")
    result = search(cost_model, solver=base, cpus=cpus, top_k=10, time_limit_s=limit, prune=mode != "noprune")
    wall = time.perf_counter() - start
    return {"instance": name, "devices": nodes * per_node, "configs": result.num_candidates,
            "solver": solver, "wall_s": round(wall, 2), "status": result.status,
            "objective_ms": round(result.objective_ms, 3), "gap": round(result.gap, 6),
            "in_model": result.num_in_model, "enum_over_solver": "", "best": result.best.strategy.label()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--enum-limit", type=float, default=45.0)
    parser.add_argument("--solver-limit", type=float, default=60.0)
    parser.add_argument("--noprune-limit", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true", help="only the three smallest instances")
    args = parser.parse_args()
    rows = []
    for name, factory, nodes, per_node, gbs, memory_mb in INSTANCES[:3] if args.quick else INSTANCES:
        group = {}
        runs = [("cpsat", args.solver_limit), ("milp", args.solver_limit), ("enum", args.enum_limit)]
        if nodes * per_node <= NOPRUNE_MAX_DEVICES:
            runs.insert(1, ("cpsat-noprune", args.noprune_limit))
        for solver, limit in runs:
            group[solver] = _run(name, factory, nodes, per_node, gbs, memory_mb, solver, args.cpus, limit)
            print(" | ".join(str(group[solver][c]) for c in COLUMNS), flush=True)
        enum = group["enum"]
        for solver in [s for s in group if s != "enum"]:
            ratio = enum["wall_s"] / max(group[solver]["wall_s"], 1e-3)
            group[solver]["enum_over_solver"] = (">" if enum["status"] != "optimal" else "") + f"{ratio:.1f}"
        rows += list(group.values())
    _write(rows, args)


def _write(rows, args) -> None:
    header = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    body = "".join("| " + " | ".join(str(row[c]) for c in COLUMNS) + " |\n" for row in rows)
    note = (f"\ncpus={args.cpus}, enumeration stopped at {args.enum_limit:g} s (then `feasible`, ratio "
            "`>`), solver time limit " f"{args.solver_limit:g} s; wall_s includes building the space and "
            "coefficients.\n")
    write_text_atomic(RESULTS / "solver_vs_enum.md", "# Solver vs enumeration\n\n" + header + body + note)
    with open(RESULTS / "solver_vs_enum.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print("\n" + header + body + note)


if __name__ == "__main__":
    main()
