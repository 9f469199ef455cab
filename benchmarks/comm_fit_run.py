"""profile-comm under torchrun on this machine (two agents play two nodes), then calibrate --comm:
the figures of issue 31's "within 10 %" goal, written as a Markdown report.

Two torchrun agents (--nnodes 2 --nproc-per-node 2, gloo on the CPU) measure the rows as on a
cluster; `calibrate --comm` (verbs/calibrate_comm.py) fits the description's links and prices
every row back on the written description. The report holds the commands, the rows of the run,
the fitted figures (size regimes per op, figures vs rows), the residuals per tier, op, group and
size, and, for comparison on the same rows, one alpha-beta line per op (no size regimes: the fit
before the regimes), two regimes at most (no further switch: the fit before the third regime),
and every switch forced (what the F-tests weigh).

    PYTHONPATH=. python benchmarks/comm_fit_run.py --report benchmarks/results/comm_fit_NAME.md \
        [--repeats 40] [--max-bytes 16777216] [--hardware a100-80gb] [--port 29711] [--out DIR]

(16 KiB .. 16 MiB: 80-105 s at load 9-20 on two cores, 16 KiB .. 4 MiB: 37 s at load 0.5-3.4;
the report records the machine's load before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def agent_command(node: int, out: Path, args: argparse.Namespace) -> list[str]:
    """One torchrun agent's command line (the README's launch line, on localhost)."""
    script = Path(sys.executable).parent / "tinker-opt"
    verb = [str(script)] if script.exists() else [sys.executable, "-m", "tinker_opt.cli"]
    return [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
        "--node-rank", str(node), "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{args.port}", "--rdzv-id", f"fit-{args.port}",
        "--no-python", *verb, "profile-comm", "--output-dir", str(out), "--device", "cpu",
        "--max-bytes", str(args.max_bytes), "--warmup", str(args.warmup),
        "--repeats", str(args.repeats), "--timeout", "300",
    ]  # fmt: skip


def measure(out: Path, args: argparse.Namespace) -> list[str]:
    """Run both agents; the command lines (for the report)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    commands = [agent_command(node, out, args) for node in (0, 1)]
    agents = [
        subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for c in commands
    ]
    outputs = [agent.communicate(timeout=900)[0].decode() for agent in agents]
    if any(agent.returncode for agent in agents):
        sys.exit("profile-comm failed:\n" + "\n".join(o[-2000:] for o in outputs))
    return [" ".join(c) for c in commands]


def single_line_errors(comm: pd.DataFrame) -> pd.DataFrame:
    """Each (scope, op) curve priced by one relative least-squares alpha-beta line (hardware/fit.py
    fit_link, shares 1: a100-80gb's switch and one card a device): the fit without regimes."""
    from tinker_opt.comm_cost import collective_time_us
    from tinker_opt.hardware.fit import fit_link

    out = []
    for (scope, op), rows in comm.groupby(["scope", "op"]):
        n, g = len(rows), [int(x) for x in rows["group_size"]]
        lat, bw, _ = fit_link([op] * n, g, list(rows["bytes"]), list(rows["time_us"]))
        for row, size in zip(rows.itertuples(), g, strict=True):
            priced = collective_time_us(op, size, row.bytes, bw, lat)
            out.append((scope, op, size, int(row.bytes), priced / row.time_us - 1))
    return pd.DataFrame(out, columns=["scope", "op", "group_size", "bytes", "error"])


def regime_errors(comm: pd.DataFrame, significance: float, further: bool) -> pd.DataFrame:
    """Each scope's curves priced by their size regimes (hardware/regime_fit.py fit_curves at
    `significance`; `further` False: two regimes at most, the fit before the third regime; an
    infinite significance: every switch forced at its best split, what the F-tests weigh), for
    the report only."""
    from tinker_opt.comm_cost import collective_time_us, regime_at
    from tinker_opt.hardware.regime_fit import Curve, fit_curves

    out = []
    for scope, rows in comm.groupby("scope"):
        curves = dict(list(rows.groupby("op")))
        fits = fit_curves(
            [
                Curve([op] * len(r), list(r["group_size"]), list(r["bytes"]), list(r["time_us"]))
                for op, r in curves.items()
            ],
            significance=significance,
            further=further,
        )
        for (op, r), fit in zip(curves.items(), fits, strict=True):
            for row in r.itertuples():
                g = regime_at(fit.regimes, row.bytes)
                priced = collective_time_us(
                    op, int(row.group_size), row.bytes, g.bandwidth_gbs, g.latency_us
                )
                out.append(
                    (scope, op, int(row.group_size), int(row.bytes), priced / row.time_us - 1)
                )
    return pd.DataFrame(out, columns=["scope", "op", "group_size", "bytes", "error"])


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20}M" if nbytes >= 1 << 20 else f"{nbytes >> 10}K"


def error_table(frame: pd.DataFrame, key: str) -> list[str]:
    """Markdown: a row per (tier, op, group), a column per size, mean and max |error|."""
    sizes = sorted(frame["bytes"].unique())
    lines = [
        f"| {key} | op | group | " + " | ".join(_size(int(s)) for s in sizes) + " | mean | max |",
        "| --- " * (len(sizes) + 5) + "|",
    ]
    for (tier, op, group), rows in frame.groupby([key, "op", "group_size"], sort=False):
        by = dict(zip(rows["bytes"], rows["error"], strict=True))
        cells = [f"{100 * by[s]:+.1f}" if s in by else "" for s in sizes]
        err = rows["error"].abs()
        lines.append(
            f"| {tier} | {op} | {group} | " + " | ".join(cells)
            + f" | {100 * err.mean():.1f} | {100 * err.max():.1f} |"
        )  # fmt: skip
    return lines


def summary(frame: pd.DataFrame, key: str) -> str:
    fitted = frame[
        frame["op"].isin(["all_reduce", "all_to_all"]) & ~frame[key].str.startswith("world")
    ]
    err = fitted["error"].abs()
    misses = fitted[err >= 0.10]
    missed = "; ".join(
        f"{row[key]} {row.op} {_size(int(row.bytes))} {100 * row.error:+.1f}"
        for _, row in misses.iterrows()
    )
    return (
        f"all-reduce and all-to-all rows fitted on: {len(err)}, within 10 %: "
        f"{len(err) - len(misses)}, mean |err| {100 * err.mean():.1f} %, max "
        f"{100 * err.max():.1f} %; misses: {missed or 'none'}"
    )


def report(args: argparse.Namespace, out: Path, commands: list[str]) -> str:
    from tinker_opt.hardware.regime_fit import SWITCH_SIGNIFICANCE
    from tinker_opt.verbs.calibrate_comm import run_calibrate_comm

    mine = out / "mine.json"
    result = run_calibrate_comm(out / "comm.csv", args.hardware, mine)
    comm = pd.read_csv(out / "comm.csv")
    priced = pd.DataFrame(result["rows"])
    before = single_line_errors(comm)
    calibrate = f"tinker-opt calibrate --comm {out}/comm.csv --hardware {args.hardware} -o {mine}"
    lines = [
        f"# profile-comm + calibrate --comm on localhost (2 torchrun agents x 2 ranks, gloo), {args.label}",
        "",
        "```",
        *commands,
        calibrate,
        "```",
        "",
        f"Machine: {os.cpu_count()} cores; {args.load}.",
        "",
        "## Rows of the run (comm.csv)",
        "",
        "```",
        (out / "comm.csv").read_text().strip(),
        "```",
        "",
        "## Fitted figures (tiers: figures fitted vs rows)",
        "",
    ]
    for tier in result["tiers"]:
        switches = ", ".join(
            f"{op} " + " + ".join(f"{entry['below_bytes'] >> 10} KiB" for entry in figures["small"])
            for op, figures in tier["ops"].items()
            if figures.get("small")
        )
        lines.append(
            f"* {tier['tier']}: {tier['parameters']} figures fitted on {tier['rows']} rows; "
            f"switches: {switches or 'none'}"
        )
    fitted = json.loads(mine.read_text())
    links = {k: fitted[k] for k in ("intra_node", "inter_node", "domain") if k in fitted}
    lines += ["", "```", json.dumps(links, indent=1), "```", ""]
    lines += ["## Residuals after (size regimes; predicted / measured - 1, %)", ""]
    lines += error_table(priced, "tier") + ["", summary(priced, "tier"), ""]
    sections = [
        ("one alpha-beta line per op (no regimes)", before),
        (
            "two regimes at most, no further switch (the fit before; F-tests at 1 %)",
            regime_errors(comm, SWITCH_SIGNIFICANCE, further=False),
        ),
        (
            "every switch forced at its best split (not what is written)",
            regime_errors(comm, float("inf"), further=True),
        ),
    ]
    for title, frame in sections:
        lines += [f"## Same rows, {title}, %", ""]
        lines += error_table(frame, "scope") + ["", summary(frame, "scope"), ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--max-bytes", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--hardware", default="a100-80gb")
    parser.add_argument("--port", type=int, default=29711)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=Path("/tmp/comm-fit"), help="the run's folder")
    parser.add_argument("--reuse", action="store_true", help="report on --out's rows, no new run")
    args = parser.parse_args()
    if args.reuse:
        args.load = "load not recorded (--reuse: the rows of an earlier run)"
        commands = ["(the rows of an earlier run in " + str(args.out) + ")"]
    else:
        start = os.getloadavg()
        commands = measure(args.out, args)
        args.load = (
            "load average (1 / 5 / 15 min) before the run "
            + " / ".join(f"{x:.2f}" for x in start)
            + ", after "
            + " / ".join(f"{x:.2f}" for x in os.getloadavg())
        )
    text = report(args, args.out, commands)
    args.report.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
