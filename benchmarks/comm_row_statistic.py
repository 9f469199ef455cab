"""Which statistic of a size's timed calls makes comm.csv rows the fit explains best, and how much
each varies between runs: profile-comm's two torchrun agents (as benchmarks/comm_fit_run.py),
each rank keeping every call's time, then one comm.csv per statistic (the minimum, the 10th
percentile, the lower quartile profile/comm.py ROW_QUANTILE takes, the median; each the median
over the ranks, as rows_frame does) fitted by calibrate --comm's fit (hardware/regime_fit.py
fit_curves), its all-reduce and all-to-all rows counted within 10 %.

    PYTHONPATH=. python benchmarks/comm_row_statistic.py --out DIR [--repeats 40]
        [--max-bytes 16777216] [--port 29731] [--report FILE]

Run twice to see what varies between runs (`--compare DIR1 DIR2`: each statistic's rows of
two runs against each other, and their fits).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
STATISTICS = {"min": 0.0, "q10": 0.1, "q25": 0.25, "median": 0.5}


def rank_main(out: Path, argv: list[str]) -> None:
    """One rank: profile-comm, each call's time kept (profile/comm.py _time_sizes_us wrapped)."""
    import tinker_opt.profile.comm as comm
    import tinker_opt.profile.comm_dist as dist_mod

    samples: list[list[float]] = []
    kept: list[tuple] = []
    timed = comm._time_sizes_us

    def keep_samples(calls, plan, group, sync):
        quantile = comm.np.quantile

        def record(times, q):
            samples.append([float(t) for t in times])
            return quantile(times, q)

        comm.np.quantile = record
        try:
            return timed(calls, plan, group, sync)
        finally:
            comm.np.quantile = quantile

    measure = dist_mod.measure_group

    def keep_rows(plan, members, rank, group, device, dtype, sync):
        first = len(samples)
        rows, missing = measure(plan, members, rank, group, device, dtype, sync)
        for row, times in zip(rows, samples[first:], strict=True):
            kept.append((len(members), *row, rank, times))
        return rows, missing

    comm._time_sizes_us = keep_samples
    dist_mod.measure_group = keep_rows
    kinds = dist_mod._measure_kind

    def tagged(plan, env, kind, device, dtype):
        first = len(kept)
        result = kinds(plan, env, kind, device, dtype)
        for k in range(first, len(kept)):
            kept[k] = (kind.scope, *kept[k])
        return result

    dist_mod._measure_kind = tagged
    from tinker_opt.cli import main

    sys.argv = ["tinker-opt", *argv]
    try:
        main()
    finally:
        rank = os.environ.get("RANK", "0")
        (out / f"samples_rank{rank}.json").write_text(json.dumps(kept))


def measure(out: Path, args: argparse.Namespace) -> None:
    """Both agents, each rank this script's rank_main."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    out.mkdir(parents=True, exist_ok=True)
    verb = ["profile-comm", "--output-dir", str(out / "profile"), "--device", "cpu"]
    verb += ["--max-bytes", str(args.max_bytes), "--warmup", "3", "--repeats", str(args.repeats)]
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "2",
                "--node-rank",
                str(node),
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                f"127.0.0.1:{args.port}",
                "--rdzv-id",
                f"stat-{args.port}",
                "--no-python",
                sys.executable,
                __file__,
                "--rank-out",
                str(out),
                "--",
                *verb,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for node in (0, 1)
    ]
    outputs = [agent.communicate(timeout=900)[0].decode() for agent in agents]
    if any(agent.returncode for agent in agents):
        sys.exit("profile-comm failed:\n" + "\n".join(o[-2000:] for o in outputs))


def rows(out: Path, q: float) -> pd.DataFrame:
    """comm.csv rows of one statistic: each rank's quantile q of its calls, the median over ranks."""
    kept = []
    for path in sorted(out.glob("samples_rank*.json")):
        for scope, group, op, _, nbytes, _, rank, times in json.loads(path.read_text()):
            t = float(np.quantile(times, q))
            kept.append((scope, op, group, nbytes, t / (2 if op == "send_recv" else 1), rank))
    frame = pd.DataFrame(kept, columns=["scope", "op", "group_size", "bytes", "time_us", "rank"])
    keys = ["op", "group_size", "scope", "bytes"]
    return frame.groupby(keys, as_index=False)["time_us"].median()


def fit_errors(comm: pd.DataFrame) -> pd.DataFrame:
    """Every 2-rank row priced by fit_curves on its tier (benchmarks/comm_fit_run.py)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from comm_fit_run import regime_errors

    from tinker_opt.hardware.regime_fit import SWITCH_SIGNIFICANCE

    tiers = comm[comm["scope"].isin(["intra_node", "inter_node"]) & (comm["group_size"] == 2)]
    return regime_errors(tiers, SWITCH_SIGNIFICANCE, further=True)


def summary(errors: pd.DataFrame) -> str:
    fitted = errors[errors["op"].isin(["all_reduce", "all_to_all"])]
    err = fitted["error"].abs()
    return (
        f"{int((err < 0.10).sum())} / {len(err)} | {100 * err.mean():.1f} | {100 * err.max():.1f}"
    )


def report(outs: list[Path]) -> str:
    lines = [
        "| run | statistic | all-reduce / all-to-all rows within 10 % | mean % | max % |",
        "| --- | --- | --- | --- | --- |",
    ]
    for out in outs:
        for name, q in STATISTICS.items():
            lines.append(f"| {out.name} | {name} | {summary(fit_errors(rows(out, q)))} |")
    if len(outs) == 2:
        lines += [
            "",
            "| statistic | rows of run 2 / run 1 - 1: mean |x| % | max % |",
            "| --- | --- | --- |",
        ]
        for name, q in STATISTICS.items():
            a, b = (rows(out, q).set_index(["op", "group_size", "scope", "bytes"]) for out in outs)
            ratio = (b["time_us"] / a["time_us"] - 1).abs()
            lines.append(f"| {name} | {100 * ratio.mean():.1f} | {100 * ratio.max():.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", type=Path, nargs=2)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--max-bytes", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--port", type=int, default=29731)
    parser.add_argument("--report", type=Path)
    parser.add_argument("--rank-out", type=Path, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.rank_out:
        rank_main(args.rank_out, [a for a in rest if a != "--"])
        return
    outs = list(args.compare or [])
    if args.out:
        load = os.getloadavg()
        measure(args.out, args)
        (args.out / "load.txt").write_text(f"load before {load}, after {os.getloadavg()}\n")
        outs = [args.out]
    text = report(outs)
    if args.report:
        args.report.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
