"""How often hardware/regime_fit.py fit_curves places a switch that is not there, and finds one
that is, on seeded synthetic tiers (the F-tests' false-switch rate and power), written as a
Markdown table: the tier's one switch only (`own=False`, the fit before an op's own switch) and
with an op's own switch (what calibrate --comm and the cost model fit).

A tier is four curves of 2 ranks at 16 KiB .. 4 MiB (profile-comm's sizes): all-gather,
all-reduce, reduce-scatter and all-to-all, plus a send/recv line, each row off by Gaussian noise
(the send/recv's its own, as a ping-pong is noisier than a ring). Cases:

* lines: every curve one alpha-beta line; any switch is false;
* shared: every curve switches at 256 KiB; a switch placed elsewhere is false;
* per-op: the rings switch at 256 KiB, the all-to-all at 128 KiB (gloo on loopback: a 64 KiB
  message, a ring's segment of a 256 KiB buffer, an all-to-all's half of a 128 KiB one);
  found when the all-to-all's switch is at 128 KiB and the rings' at 256 KiB.

    PYTHONPATH=. python benchmarks/comm_switch_rates.py [--tiers 400] [--report FILE]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from tinker_opt.comm_cost import Regime, collective_time_us, regime_at
from tinker_opt.hardware.regime_fit import Curve, fit_curves

SIZES = [16384 * 2**i for i in range(9)]
RINGS = ("all_gather", "all_reduce", "reduce_scatter")
LINE = (Regime(0, 2.0, 60.0),)
LATE = (Regime(0, 3.0, 80.0), Regime(262144, 1.8, 135.0))
EARLY = (Regime(0, 2.4, 105.0), Regime(131072, 1.3, 180.0))
"""Regimes like those of gloo on loopback (the inter-node all-reduce and all-to-all fitted in
benchmarks/results/comm_fit_*.md, rounded)."""
CASES = {
    "lines": dict.fromkeys((*RINGS, "all_to_all"), LINE),
    "shared": dict.fromkeys((*RINGS, "all_to_all"), LATE),
    "per-op": {**dict.fromkeys(RINGS, LATE), "all_to_all": EARLY},
}


def tier(case: str, noise: float, send_noise: float, seed: int) -> list[Curve]:
    """The case's curves and a send/recv line, each row times (1 + Gaussian noise)."""
    draw = random.Random(seed)
    curves = []
    for op, regimes in [*CASES[case].items(), ("send_recv", LINE)]:
        spread = send_noise if op == "send_recv" else noise
        times = []
        for nbytes in SIZES:
            r = regime_at(regimes, nbytes)
            t = collective_time_us(op, 2, nbytes, r.bandwidth_gbs, r.latency_us)
            times.append(t * (1 + spread * draw.gauss(0, 1)))
        curves.append(Curve([op] * len(SIZES), [2] * len(SIZES), SIZES, times))
    return curves


def outcome(case: str, switches: list[int | None]) -> bool:
    """lines / shared: a false switch placed; per-op: the true switches found."""
    if case == "lines":
        return any(s is not None for s in switches)
    if case == "shared":
        return any(s not in (None, 262144) for s in switches)
    return switches[:3] == [262144] * 3 and switches[3] == 131072


def rate(case: str, noise: float, send_noise: float, own: bool, tiers: int) -> float:
    hits = 0
    for seed in range(tiers):
        fits = fit_curves(tier(case, noise, send_noise, seed), own=own)
        switches = [f.regimes[1].from_bytes if len(f.regimes) > 1 else None for f in fits]
        hits += outcome(case, switches)
    return hits / tiers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiers", type=int, default=400)
    parser.add_argument("--report", type=Path)
    args = parser.parse_args()
    lines = [
        f"# fit_curves on {args.tiers} seeded synthetic tiers a row (benchmarks/comm_switch_rates.py)",
        "",
        "| case | noise (send/recv) | tier's switch only | with an op's own |",
        "| --- | --- | --- | --- |",
    ]
    for case, noise, send_noise in [
        ("lines", 0.02, 0.02), ("lines", 0.03, 0.03), ("lines", 0.03, 0.08),
        ("shared", 0.02, 0.02), ("shared", 0.03, 0.03), ("shared", 0.03, 0.08),
        ("per-op", 0.01, 0.01), ("per-op", 0.02, 0.02), ("per-op", 0.03, 0.03),
    ]:  # fmt: skip
        what = "found" if case == "per-op" else "false switch"
        cells = [
            f"{100 * rate(case, noise, send_noise, own, args.tiers):.1f} %" for own in (False, True)
        ]
        lines.append(
            f"| {case} ({what}) | {100 * noise:.0f} % ({100 * send_noise:.0f} %) | "
            + " | ".join(cells)
            + " |"
        )
    text = "\n".join(lines) + "\n"
    if args.report:
        args.report.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
