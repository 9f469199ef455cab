"""One log calibrates the machine: every log of tests/fixtures/logs checked before calibration
and after `calibrate --log` on the other log of its machine (issue 28 item 4).

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
MACHINES = {
    "h100-80gb": ("mlm-ci-gpt7b-tp1pp4vpp-h100", "mlm-ci-gpt7b-tp4pp1-h100"),
    "gb200-nvl72": ("mlm-ci-gpt7b-tp1pp4vpp-gb200", "mlm-ci-gpt7b-tp4pp1-gb200"),
    "v100-32gb": ("kisti-v100x4-gpt345m-tp4-main202409", "kisti-v100x4-gpt345m-tp4-core050"),
    "910b": ("ms-ci-llama2-l8-tp8-coc-910b",),
}


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


def main() -> None:
    print(
        "| log | device | measured ms | predicted ms before | after calibration | measured "
        "MB | predicted MB before | after | calibrated on |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for hardware, folders in MACHINES.items():
            device = DeviceChoice(device="analytic", hardware=hardware)
            for folder in folders:
                log, script = _pair(folder)
                before = run_check(log, script, device)[0]
                others = [f for f in folders if f != folder]
                if not others:
                    print(_row(folder, hardware, before, None, "(no other log of this machine)"))
                    continue
                other_log, other_script = _pair(others[0])
                out = Path(scratch) / f"{hardware}-{others[0]}.json"
                scripts = [other_script] if other_script else []
                run_calibrate_log([other_log], scripts, device, out, skip_first=1)
                after = run_check(log, script, DeviceChoice(device="analytic", hardware=str(out)))
                print(_row(folder, hardware, before, after[0], others[0]), flush=True)


if __name__ == "__main__":
    main()
