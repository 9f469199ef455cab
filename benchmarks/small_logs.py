"""`check` on the small-job training logs (8 devices or fewer), before any calibration.

For each log of the fixtures (tests/fixtures/logs) and of the shared examples
(shared/data/training_logs, beside the repository), run `tinker-opt check` on the analytic device
with the log's hardware description and print measured / predicted iteration time and the error,
then the mean and max |error|. The issue's target (issue 28): within 15 % each, 10 % on average.

    PYTHONPATH=. python benchmarks/small_logs.py
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = (ROOT / "tests" / "fixtures" / "logs", ROOT.parent / "shared" / "data" / "training_logs")
HARDWARE = {"v100x4": "v100-32gb", "gb200": "gb200-nvl72", "h100": "h100-80gb", "910b": "910b"}
"""The hardware description of a log, by its folder's name."""
TIME = re.compile(r"iteration time \(ms\)\s*│\s*([\d.]+)\s*│\s*([\d.]+)")


def check(folder: Path) -> tuple[float, float] | None:
    """(measured, predicted) iteration ms of `tinker-opt check` on one log folder."""
    hardware = next((v for k, v in HARDWARE.items() if k in folder.name), None)
    if hardware is None:
        return None
    script = folder / "script.sh"
    command = [sys.executable, "-m", "tinker_opt.cli", "check", str(folder / "log.txt")]
    command += [str(script)] if script.exists() else []
    command += ["--device", "analytic", "--hardware", hardware]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=None).stdout
    match = TIME.search(out.replace("┃", "│"))
    return (float(match.group(1)), float(match.group(2))) if match else None


def main() -> int:
    errors = []
    print(f"{'log':60} {'measured ms':>12} {'predicted ms':>12} {'error %':>8}")
    for base in FOLDERS:
        for folder in sorted(p for p in base.glob("*") if (p / "log.txt").exists()):
            result = check(folder)
            if result is None:
                print(f"{folder.relative_to(base.parent)!s:60} (no reading)")
                continue
            measured, predicted = result
            errors.append(100 * (predicted / measured - 1))
            print(
                f"{folder.relative_to(base.parent)!s:60} {measured:12.1f} {predicted:12.1f} {errors[-1]:+8.1f}"
            )
    values = np.abs(errors)
    print(f"\n{len(values)} logs: mean |error| {values.mean():.1f} %, max {values.max():.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
