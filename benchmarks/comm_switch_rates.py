"""How often hardware/regime_fit.py fit_curves places a switch that is not there, and finds one
that is, on seeded synthetic tiers (the F-tests' false-switch rate and power), written as a
Markdown table: the tier's one switch only (`own=False`), with an op's own switch but two
regimes at most (`further=False`, the fit before the third regime), and with a further switch
(what calibrate --comm and the cost model fit).

A tier is four curves of 2 ranks at 16 KiB .. 4 MiB or 16 MiB (profile-comm's sizes): all-gather,
all-reduce, reduce-scatter and all-to-all, plus a send/recv line, each row off by Gaussian noise
(the send/recv's its own, as a ping-pong is noisier than a ring). Cases:

* lines: every curve one alpha-beta line; any switch is false;
* shared: every curve switches at 256 KiB; a switch placed elsewhere is false;
* per-op: the rings switch at 256 KiB, the all-to-all at 128 KiB (gloo on loopback: a 64 KiB
  message, a ring's segment of a 256 KiB buffer, an all-to-all's half of a 128 KiB one);
  found when the all-to-all's switch is at 128 KiB and the rings' at 256 KiB;
* three (16 MiB only): as per-op, the rings slower again from 4 MiB (gloo's ring all-reduce
  with buffers past a core's L2); found when the rings' switches are at 256 KiB and 4 MiB and
  the all-to-all's at 128 KiB alone.

    PYTHONPATH=. python benchmarks/comm_switch_rates.py [--tiers 400] [--max-bytes N] [--report FILE]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from tinker_opt.comm_cost import Regime, collective_time_us, regime_at
from tinker_opt.hardware.regime_fit import Curve, fit_curves

RINGS = ("all_gather", "all_reduce", "reduce_scatter")
LINE = (Regime(0, 2.0, 60.0),)
LATE = (Regime(0, 3.0, 80.0), Regime(262144, 1.8, 135.0))
EARLY = (Regime(0, 2.4, 105.0), Regime(131072, 1.3, 180.0))
THIRD = (*LATE, Regime(4194304, 1.1, 135.0))
"""Regimes like those of gloo on loopback (the inter-node all-reduce and all-to-all fitted in
benchmarks/results/comm_fit_*.md and comm28_*.md, rounded)."""
CASES = {
    "lines": dict.fromkeys((*RINGS, "all_to_all"), LINE),
    "shared": dict.fromkeys((*RINGS, "all_to_all"), LATE),
    "per-op": {**dict.fromkeys(RINGS, LATE), "all_to_all": EARLY},
    "three": {**dict.fromkeys(RINGS, THIRD), "all_to_all": EARLY},
}
SIZES = [16384 * 2**i for i in range(9)]


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


def outcome(case: str, switches: list[list[int]]) -> bool:
    """lines / shared: a false switch placed; per-op / three: the true switches found."""
    if case == "lines":
        return any(switches)
    if case == "shared":
        return any(s not in ([], [262144]) for s in switches)
    rings = [[262144, 4194304]] * 3 if case == "three" else [[262144]] * 3
    return switches[:3] == rings and switches[3] == [131072]


def rate(case: str, noise: float, send_noise: float, fit: dict[str, bool], tiers: int) -> float:
    hits = 0
    for seed in range(tiers):
        fits = fit_curves(tier(case, noise, send_noise, seed), **fit)
        hits += outcome(case, [[r.from_bytes for r in f.regimes[1:]] for f in fits])
    return hits / tiers


FITS = (
    dict(own=False, further=False),
    dict(own=True, further=False),
    dict(own=True, further=True),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiers", type=int, default=400)
    parser.add_argument("--max-bytes", type=int, default=4 * 1024 * 1024)
    parser.add_argument("--report", type=Path)
    args = parser.parse_args()
    SIZES[:] = [16384 * 2**i for i in range(20) if 16384 * 2**i <= args.max_bytes]
    lines = [
        f"# fit_curves on {args.tiers} seeded synthetic tiers a row, 16 KiB .. "
        f"{SIZES[-1] >> 10} KiB (benchmarks/comm_switch_rates.py)",
        "",
        "| case | noise (send/recv) | tier's switch only | with an op's own | with a further |",
        "| --- | --- | --- | --- | --- |",
    ]
    three = [("three", 0.01, 0.01), ("three", 0.02, 0.02), ("three", 0.03, 0.03)]
    for case, noise, send_noise in [
        ("lines", 0.02, 0.02), ("lines", 0.03, 0.03), ("lines", 0.03, 0.08),
        ("shared", 0.02, 0.02), ("shared", 0.03, 0.03), ("shared", 0.03, 0.08),
        ("per-op", 0.01, 0.01), ("per-op", 0.02, 0.02), ("per-op", 0.03, 0.03),
        *(three if len(SIZES) >= 11 else []),
    ]:  # fmt: skip
        what = "found" if case in ("per-op", "three") else "false switch"
        cells = [f"{100 * rate(case, noise, send_noise, fit, args.tiers):.1f} %" for fit in FITS]
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
