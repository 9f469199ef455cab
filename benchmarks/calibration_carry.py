"""One log calibrates the machine: every log of tests/fixtures/logs checked before calibration
and after `calibrate --log` on each other log of its machine, one row per pair (issue 28 item 4).

Per log: the device description, measured / predicted iteration time and peak allocated memory
before calibration, and the prediction after calibrating on the named log (the description
written by `calibrate --log`, read by `check --hardware calibrated.json`). Prints a Markdown
table; `python benchmarks/calibration_carry.py > benchmarks/results/logs_calibration.md`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tinker_opt.verbs.calibrate_log import run_calibrate_log
from tinker_opt.verbs.check import DeviceChoice, run_check

LOGS = ROOT / "tests" / "fixtures" / "logs"
MACHINES = {  # the KISTI logs ran on A100s (benchmarks/small_logs.py HARDWARE says why)
    "h100-80gb": (
        "mlm-ci-gpt7b-tp1pp4vpp-h100",
        "mlm-ci-gpt7b-tp4pp1-h100",
        "mlm-ci-moe-mla-tp2pp2ep4-h100",
    ),
    "gb200-nvl72": ("mlm-ci-gpt7b-tp1pp4vpp-gb200", "mlm-ci-gpt7b-tp4pp1-gb200"),
    "a100-80gb": ("kisti-v100x4-gpt345m-tp4-main202409", "kisti-v100x4-gpt345m-tp4-core050"),
    "910b": ("ms-ci-llama2-l8-tp8-coc-910b", "ms-ci-llama2-7b-tp2pp4vpp2-swap-910b"),
}

BOTH = ("910b",)
"""Machines whose logs are jobs of different size: also fitted on all their logs together."""


def _pair(folder: str) -> tuple[Path, str | None]:
    script = LOGS / folder / "script.sh"
    return LOGS / folder / "log.txt", str(script) if script.exists() else None


def _figures(result: dict) -> tuple[float, float, float | None, float | None]:
    measured, predicted = result["measured"], result["predicted"]
    return (
        measured["iteration_time_ms"],
        predicted["iteration_time_ms"],
        measured["peak_allocated_mb"],
        predicted["peak_allocated_mb"],
    )


def _pct(predicted: float | None, measured: float | None) -> str:
    if predicted is None or not measured:
        return "-"
    return f"{100 * (predicted / measured - 1):+.1f} %"


def _row(folder: str, hardware: str, before: dict, after: dict | None, source: str) -> str:
    t_meas, t_before, m_meas, m_before = _figures(before)
    t_after = after["predicted"]["iteration_time_ms"] if after else None
    m_after = after["predicted"]["peak_allocated_mb"] if after else None
    mem = f"{m_meas:.0f}" if m_meas else "-"
    cells = [
        folder,
        hardware,
        f"{t_meas:.1f}",
        f"{t_before:.1f} ({_pct(t_before, t_meas)})",
        f"{t_after:.1f} ({_pct(t_after, t_meas)})" if after else "-",
        mem,
        f"{m_before:.0f} ({_pct(m_before, m_meas)})",
        f"{m_after:.0f} ({_pct(m_after, m_meas)})" if after else "-",
        source,
    ]
    return "| " + " | ".join(cells) + " |"


def _calibrated(hardware: str, folders: list[str], out: Path) -> DeviceChoice:
    """The description `calibrate --log` fits on `folders` (one script per log)."""
    pairs = [_pair(folder) for folder in folders]
    scripts = [script for _, script in pairs if script]
    device = DeviceChoice(device="analytic", hardware=hardware)
    run_calibrate_log([log for log, _ in pairs], scripts, device, out, skip_first=1)
    return DeviceChoice(device="analytic", hardware=str(out))


def _both_rows(hardware: str, folders: tuple[str, ...], scratch: Path) -> None:
    """Rows of the logs checked on the description fitted on all of them (device + fixed time
    where the jobs differ in size): what two logs determine, not a carry."""
    both = _calibrated(hardware, list(folders), scratch / f"{hardware}-all.json")
    for folder in folders:
        log, script = _pair(folder)
        before = run_check(log, script, DeviceChoice(device="analytic", hardware=hardware))[0]
        after = run_check(log, script, both)[0]
        print(_row(folder, hardware, before, after, "all logs of the machine"), flush=True)


def _machine_rows(hardware: str, folders: tuple[str, ...], scratch: Path) -> None:
    """One row per (log, other log of the machine): checked on the description calibrated on the
    other one."""
    device = DeviceChoice(device="analytic", hardware=hardware)
    calibrated = {
        other: _calibrated(hardware, [other], scratch / f"{other}.json") for other in folders
    }
    for folder in folders:
        log, script = _pair(folder)
        before = run_check(log, script, device)[0]
        for other in (f for f in folders if f != folder):
            after = run_check(log, script, calibrated[other])[0]
            print(_row(folder, hardware, before, after, other), flush=True)


def main() -> None:
    print(
        "| log | device | measured ms | predicted ms before | after calibration | measured "
        "MB | predicted MB before | after | calibrated on |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for hardware, folders in MACHINES.items():
            _machine_rows(hardware, folders, Path(scratch))
            if hardware in BOTH:
                _both_rows(hardware, folders, Path(scratch))


if __name__ == "__main__":
    main()
