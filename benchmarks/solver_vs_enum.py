"""CP-SAT and MILP against exhaustive enumeration, from 8 to 16,384 devices, every knob on.

Usage: PYTHONPATH=. python benchmarks/solver_vs_enum.py [--cpus 2] [--enum-limit 45] [--quick]

Profiles are synthetic (tests/model_support.py: FLOP-proportional times, Korthikanti activation
bytes, alpha-beta collectives), so the table measures the search, not a device. Enumeration is
the honest baseline: every outer configuration, the exact split of each (vectorised over stages
and candidate values), over `--cpus` processes, no bound pruning; it is stopped at --enum-limit
seconds and then reported as `feasible` (unfinished) with its ratio as a lower bound.
`cpsat-noprune` puts every feasible configuration into one CP-SAT model (small instances).

Realistic rows (`real:` prefix) use the analytic profile (tinker_opt.profile.analytic, needs torch)
of fixture launch scripts: real model shapes, hardware figures and the memory pressure that forces
full recompute with r > 1, the case where the recompute-count bounds matter most. `--no-real`
skips them. Writes benchmarks/results/solver_vs_enum.{md,csv}.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from model_support import cluster, dense_model, moe_model, synthetic_profile

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.errors import InfeasibleError
from tinker_opt.io_utils import write_text_atomic
from tinker_opt.solve.search import search

RESULTS = Path(__file__).resolve().parent / "results"
SHAPES = {"tps": (1, 2, 4, 8), "cps": (1, 2, 4, 8), "mbss": (1, 2, 4)}
INSTANCES = [
    # name, model factory, nodes, devices per node, global batch, memory limit (MB)
    ("dense-32L-8dev", lambda: dense_model(32, 4096, 32, seq=4096), 1, 8, 64, 60000),
    ("dense-32L-64dev", lambda: dense_model(32, 4096, 32, seq=4096), 8, 8, 256, 60000),
    ("moe-32L-64dev", lambda: moe_model(32, 4096, 32, experts=8, seq=4096), 8, 8, 256, 60000),
    ("dense-64L-512dev", lambda: dense_model(64, 8192, 64, groups=8, seq=4096), 64, 8, 1024, 60000),
    ("moe-64L-1024dev", lambda: moe_model(64, 6144, 48, experts=64, seq=4096), 128, 8, 1024, 60000),
    (
        "dense-96L-4096dev",
        lambda: dense_model(96, 12288, 96, seq=2048, vocab=51200),
        512,
        8,
        2048,
        60000,
    ),
    ("moe-96L-4096dev", lambda: moe_model(96, 8192, 64, experts=64, seq=4096), 512, 8, 4096, 60000),
    (
        "dense-128L-16384dev",
        lambda: dense_model(128, 16384, 128, groups=16, seq=4096),
        2048,
        8,
        4096,
        60000,
    ),
]
SCRIPTS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "scripts"
REAL_INSTANCES = [
    # name, fixture script, hardware, nodes, devices per node, global batch, memory limit (MB)
    ("real:llama2-7b-a100-8dev", "pretrain_llama2_7b_ptd.sh", "a100-80gb", 1, 8, 256, 20000),
    ("real:llama2-70b-910b-64dev", "pretrain_llama2_70b_4k_ptd.sh", "910b", 8, 8, 512, 57000),
    ("real:qwen25-7b-910b-64dev", "pretrain_qwen25_7b_32k_ptd.sh", "910b", 8, 8, 64, 62000),
    ("real:mixtral-8x7b-a100-64dev", "pretrain_mixtral_8x7b_ptd.sh", "a100-80gb", 8, 8, 256, 70000),
    (
        "real:deepseek3-671b-910b-512dev",
        "pretrain_deepseek3_671b_4k_ptd.sh",
        "910b",
        64,
        8,
        1024,
        60000,
    ),
]
"""Analytic profiles of fixture scripts (tp <= 8, micro-batch <= 2; 1 for DeepSeek-V3, whose
first three dense layers make the stack mixed)."""
NOPRUNE_MAX_DEVICES = 1024
"""`cpsat-noprune` (every feasible configuration in one CP-SAT model, no bound pruning) runs on
the small instances only: it shows what the bounds buy as the space grows."""
COLUMNS = (
    "instance",
    "devices",
    "configs",
    "solver",
    "wall_s",
    "status",
    "objective_ms",
    "gap",
    "in_model",
    "enum_over_solver",
    "best",
)


def _cost_model(factory, nodes, per_node, gbs, memory_mb) -> CostModel:
    model = factory()
    shapes = dict(SHAPES, eps=(1, 2, 4, 8, 16, 32, 64)) if model.is_moe else SHAPES
    profile = synthetic_profile(model, **shapes)
    return CostModel.from_profile(profile, model, cluster(nodes, per_node, memory_mb), gbs)


_PROFILES: dict[str, object] = {}


def _real_factory(
    script: str, hardware_name: str, nodes: int, per_node: int, gbs: int, memory_mb: float
):
    """A factory of fresh CostModels on the analytic profile of a fixture script (profiled once)."""
    from tinker_opt.hardware import load_hardware
    from tinker_opt.profile.store import load_profiled_data
    from tinker_opt.specs import ClusterSpec

    hardware = load_hardware(hardware_name)
    if script not in _PROFILES:
        from tinker_opt.profile.analytic import analytic_profile
        from tinker_opt.profile.space import SpaceLimits
        from tinker_opt.script.reader import read_script

        model = read_script(SCRIPTS / script).model
        out = Path(tempfile.mkdtemp(prefix="tinker-bench-")) / Path(script).stem
        limits = SpaceLimits(
            max_npu=8, max_mbs=1 if model.num_experts and model.first_k_dense_replace else 2
        )
        _PROFILES[script] = load_profiled_data(
            analytic_profile(model, hardware, out, limits=limits)
        )
    profiled = _PROFILES[script]
    cluster_spec = ClusterSpec(
        num_nodes=nodes, devices_per_node=per_node, memory_limit_mb=memory_mb
    )
    return lambda: CostModel.from_profile(
        profiled, profiled.model, cluster_spec, gbs, hardware=hardware
    )


def _run(name, make, nodes, per_node, solver, cpus, limit) -> dict:
    cost_model = make()  # fresh: no shared caches
    start = time.perf_counter()
    base, _, mode = solver.partition("-")
    try:
        result = search(
            cost_model,
            solver=base,
            cpus=cpus,
            top_k=10,
            time_limit_s=limit,
            prune=mode != "noprune",
        )
    except InfeasibleError:
        return {
            "instance": name,
            "devices": nodes * per_node,
            "configs": "",
            "solver": solver,
            "wall_s": round(time.perf_counter() - start, 2),
            "status": "infeasible",
            "objective_ms": "",
            "gap": "",
            "in_model": "",
            "enum_over_solver": "",
            "best": "",
        }
    wall = time.perf_counter() - start
    return {
        "instance": name,
        "devices": nodes * per_node,
        "configs": result.num_candidates,
        "solver": solver,
        "wall_s": round(wall, 2),
        "status": result.status,
        "objective_ms": round(result.objective_ms, 3),
        "gap": round(result.gap, 6),
        "in_model": result.num_in_model,
        "enum_over_solver": "",
        "best": result.best.strategy.label(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--enum-limit", type=float, default=45.0)
    parser.add_argument("--solver-limit", type=float, default=60.0)
    parser.add_argument("--noprune-limit", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true", help="only the three smallest instances")
    parser.add_argument(
        "--no-real", action="store_true", help="skip the analytic-profile instances"
    )
    parser.add_argument("--only", default="", help="comma-separated instance names to run")
    parser.add_argument(
        "--out", default="solver_vs_enum", help="file stem under benchmarks/results/"
    )
    args = parser.parse_args()
    cases = [
        (
            name,
            lambda f=factory, n=nodes, d=per_node, g=gbs, mem=memory_mb: _cost_model(
                f, n, d, g, mem
            ),
            nodes,
            per_node,
        )
        for name, factory, nodes, per_node, gbs, memory_mb in (
            INSTANCES[:3] if args.quick else INSTANCES
        )
    ]
    if not (args.quick or args.no_real):
        cases += [
            (name, (script, hw, nodes, per_node, gbs, memory_mb), nodes, per_node)
            for name, script, hw, nodes, per_node, gbs, memory_mb in REAL_INSTANCES
        ]
    rows = []
    for name, make, nodes, per_node in cases:
        if args.only and name not in args.only.split(","):
            continue
        make = _real_factory(*make) if isinstance(make, tuple) else make
        rows += _group(name, make, nodes, per_node, args)
    _write(rows, args)


def _group(name, make, nodes, per_node, args) -> list[dict]:
    """cpsat (and cpsat-noprune on small clusters), milp and enum on one instance, with ratios."""
    group = {}
    runs = [("cpsat", args.solver_limit), ("milp", args.solver_limit), ("enum", args.enum_limit)]
    if nodes * per_node <= NOPRUNE_MAX_DEVICES:
        runs.insert(1, ("cpsat-noprune", args.noprune_limit))
    for solver, limit in runs:
        group[solver] = _run(name, make, nodes, per_node, solver, args.cpus, limit)
        print(" | ".join(str(group[solver][c]) for c in COLUMNS), flush=True)
    enum = group["enum"]
    for solver in [s for s in group if s != "enum"]:
        if enum["status"] == "infeasible":
            continue
        ratio = enum["wall_s"] / max(group[solver]["wall_s"], 1e-3)
        group[solver]["enum_over_solver"] = (
            ">" if enum["status"] != "optimal" else ""
        ) + f"{ratio:.1f}"
    return list(group.values())


def _write(rows, args) -> None:
    header = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    body = "".join("| " + " | ".join(str(row[c]) for c in COLUMNS) + " |\n" for row in rows)
    note = (
        f"\ncpus={args.cpus}, enumeration stopped at {args.enum_limit:g} s (then `feasible`, ratio "
        "`>`), solver time limit "
        f"{args.solver_limit:g} s; wall_s includes building the space and "
        "coefficients.\n"
    )
    write_text_atomic(
        RESULTS / f"{args.out}.md", "# Solver vs enumeration\n\n" + header + body + note
    )
    with open(RESULTS / f"{args.out}.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print("\n" + header + body + note)


if __name__ == "__main__":
    main()
