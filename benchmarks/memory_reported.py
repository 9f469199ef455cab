"""Every published run that reports memory, modelled against reported, and every run that ran
against its device (issue 27.2).

Two tables and a count:

1. Training logs that print memory (tests/fixtures/logs and shared/data/training_logs, `--shared`
   when not beside the repository): `tinker-opt check LOG [SCRIPT] --device analytic --hardware H` on each, the peak
   allocated of the busiest rank (Megatron's `max allocated`, the CI JSON's
   `mem-max-allocated-bytes`, MindSpeed's `memo info`) against the modelled peak, the error and the
   device's memory. The hardware is the folder's device, except where the log's source says
   otherwise (HARDWARE_STATED).
2. The published-runs files' rows that report memory (the shared file's activation and parameter +
   optimizer figures), through validate_published.py's path.
3. Over every published-runs file: the rows that ran (a measured time, or a source that says it
   ran) whose modelled peak is above their device's memory, BF16 and FP8 apart.

    PYTHONPATH=. python benchmarks/memory_reported.py [--logs-only] [--shared DIR]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published_report import measured_activation
from published_runs import DEFAULT_RUNS_FILE, load_runs
from validate_published import Profiles, evaluate_all

from tinker_opt.hardware import load_hardware

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = DEFAULT_RUNS_FILE.parent
"""shared/data beside the repository (`--shared` names another)."""
RUNS_FILES = (
    ROOT / "benchmarks" / "data" / "memory_runs.json",
    ROOT / "benchmarks" / "data" / "heldout_runs.json",
    ROOT / "benchmarks" / "data" / "blackwell_runs.json",
)
HARDWARE = {"v100x4": "v100-32gb", "gb200": "gb200-nvl72", "h100": "h100-80gb", "910b": "910b"}
"""The hardware description of a log, by its folder's name."""
HARDWARE_STATED = {
    "kisti-v100x4-gpt345m-tp4": (
        "a100-40gb",
        "ASSUMPTION: A100, as the log's source.md infers (hostname gpu32 of KISTI's amd_a100nv_8 "
        "partition; 40 or 80 GB not known); the folder name says V100",
    ),
}
"""Logs whose source names another device than the folder: (description, why)."""
PEAK = re.compile(r"peak allocated \(MB, max over ranks\)\s*│\s*([\d.]+)\s*│\s*([\d.]+)")
GIB = 2**30


def _hardware(folder: Path) -> tuple[str | None, str]:
    for prefix, (name, why) in HARDWARE_STATED.items():
        if folder.name.startswith(prefix):
            return name, why
    return next((v for k, v in HARDWARE.items() if k in folder.name), None), ""


def _check_peak(folder: Path, hardware: str) -> tuple[float, float] | None:
    """(reported, modelled) peak allocated MB of `tinker-opt check` on one log folder."""
    script = folder / "script.sh"
    command = [sys.executable, "-m", "tinker_opt.cli", "check", str(folder / "log.txt")]
    command += [str(script)] if script.exists() else []
    command += ["--device", "analytic", "--hardware", hardware]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT).stdout
    match = PEAK.search(out.replace("┃", "│"))
    return (float(match.group(1)), float(match.group(2))) if match else None


def log_table(shared: Path) -> list[float]:
    """Table 1; returns the errors in %."""
    print("## training logs: peak allocated of the busiest rank (MB)\n")
    print(f"{'log':58} {'hardware':12} {'reported':>9} {'modelled':>9} {'err %':>7} {'device':>7}")
    errors, notes = [], []
    seen = set()
    for base in (ROOT / "tests" / "fixtures" / "logs", shared / "training_logs"):
        for folder in sorted(p for p in base.glob("*") if (p / "log.txt").exists()):
            if (folder / "log.txt").read_bytes() in seen:  # the shared copy of a fixture
                continue
            seen.add((folder / "log.txt").read_bytes())
            hardware, why = _hardware(folder)
            result = _check_peak(folder, hardware) if hardware else None
            label = str(folder.relative_to(base.parent))
            if result is None:
                print(f"{label:58} {hardware or '-':12} (no memory reading, or no script)")
                continue
            reported, modelled = result
            device = load_hardware(hardware).memory_gb * 1024
            errors.append(100 * (modelled / reported - 1))
            flag = " OVER" if modelled > device else ""
            print(
                f"{label:58} {hardware:12} {reported:9.0f} {modelled:9.0f} {errors[-1]:+7.1f} "
                f"{device:7.0f}{flag}"
            )
            if why:
                named = next(v for k, v in HARDWARE.items() if k in folder.name)
                other = _check_peak(folder, named)
                shown = (
                    f"{other[1]:.0f} MB ({100 * (other[1] / other[0] - 1):+.1f} %)"
                    if other
                    else "-"
                )
                notes.append(f"  {label}: {why}; on {named}: {shown}")
    print("\n".join(notes))
    return errors


def runs_tables(shared: Path) -> list[float]:
    """Tables 2 and 3; returns the memory errors in % of table 2."""
    errors, above = [], {"bf16": [], "fp8": []}
    ran = {"bf16": 0, "fp8": 0}
    with tempfile.TemporaryDirectory(prefix="memory-reported-") as tmp:
        profiles = Profiles(Path(tmp))
        print("\n## published-runs rows that report memory (GiB, first stage)\n")
        print(f"{'run':44} {'quantity':18} {'reported':>9} {'modelled':>9} {'err %':>7}")
        for path in (shared / DEFAULT_RUNS_FILE.name, *RUNS_FILES):
            runs = load_runs(Path(path))
            for run, pred, _, _hardware in evaluate_all(runs, profiles, None):
                precision = "fp8" if run.strategy.get("precision") == "fp8" else "bf16"
                if run.ran:
                    ran[precision] += 1
                    if pred.peak_gib > pred.device_gib:
                        above[precision].append(f"{run.run_id} {pred.peak_gib:.1f} GiB")
                activation, tag = measured_activation(run, runs)
                params = run.measured.get("params_plus_optimizer_memory_gib")
                for name, reported, modelled in (
                    ("activation" + (" (d)" if tag else ""), activation, pred.activation_gib),
                    ("params+optimizer", params, pred.params_optimizer_gib),
                ):
                    if reported is None:
                        continue
                    errors.append(100 * (modelled / reported - 1))
                    print(
                        f"{run.run_id:44} {name:18} {reported:9.2f} {modelled:9.2f} {errors[-1]:+7.1f}"
                    )
    print("\n## rows that ran, modelled peak above the device (all published-runs files)\n")
    for precision in ("bf16", "fp8"):
        listed = "; ".join(above[precision]) or "none"
        print(f"{precision.upper()}: {len(above[precision])} of {ran[precision]} ({listed})")
    return errors


def _summary(name: str, errors: list[float]) -> None:
    if errors:
        worst = max(abs(e) for e in errors)
        beyond = sum(abs(e) > 10 for e in errors)
        print(f"{name}: {len(errors)} rows, max |error| {worst:.1f} %, beyond 10 %: {beyond}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs-only", action="store_true", help="table 1 only")
    parser.add_argument("--shared", type=Path, default=SHARED_DATA, help="the shared data folder")
    args = parser.parse_args(argv)
    logs = log_table(args.shared)
    rows = [] if args.logs_only else runs_tables(args.shared)
    print()
    _summary("training logs, peak allocated", logs)
    _summary("published rows, activation / params+optimizer", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
