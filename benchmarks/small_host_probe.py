"""Which small-job logs does the host's issue time explain? Each fixture log priced with its
description's `host_op_us` (costs/fixed_costs.py) set to a few values: the log whose error closes
at a plausible per-operator time while its machine's other logs stay put is host-bound; a pair
that moves apart as the figure grows is not (issue 28 item 3, the small lane's diagnosis; the
rule itself belongs to the host-time owners).

    PYTHONPATH=. python benchmarks/small_host_probe.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tinker_opt.hardware import load_hardware, write_hardware_json
from tinker_opt.verbs.check import DeviceChoice, run_check

LOGS = ROOT / "tests" / "fixtures" / "logs"
PROBES = {
    "910b": (
        ("ms-ci-llama2-l8-tp8-coc-910b", "ms-ci-llama2-7b-tp2pp4vpp2-swap-910b"),
        (15, 30, 34, 36, 38),
    ),
    "v100-32gb": (
        ("kisti-v100x4-gpt345m-tp4-core050", "kisti-v100x4-gpt345m-tp4-main202409"),
        (15, 20, 25, 30),
    ),
    "gb200-nvl72": (
        ("mlm-ci-gpt7b-tp1pp4vpp-gb200", "mlm-ci-gpt7b-tp4pp1-gb200"),
        (15, 40, 80, 120, 160),
    ),
}


def _row(folder: str, hardware: str) -> tuple[float, float, float]:
    script = LOGS / folder / "script.sh"
    device = DeviceChoice(device="analytic", hardware=hardware)
    result = run_check(LOGS / folder / "log.txt", str(script) if script.exists() else None, device)[
        0
    ]
    predicted = result["predicted"]
    return (
        100 * result["error"]["iteration_time_ms"],
        predicted["iteration_time_ms"],
        predicted["time_breakdown_ms"]["host_ms"],
    )


def main() -> None:
    print(f"{'hardware':12} {'host_op_us':>10}  log: error % (predicted ms, host ms)")
    with tempfile.TemporaryDirectory() as scratch:
        for name, (folders, values) in PROBES.items():
            for value in values:
                data = load_hardware(name).to_dict()
                data["host_op_us"] = float(value)
                path = Path(scratch) / f"{name}-{value}.json"
                write_hardware_json(data, path)
                cells = []
                for folder in folders:
                    error, time, host = _row(folder, str(path))
                    cells.append(f"{folder}: {error:+.1f} ({time:.1f}, {host:.1f})")
                print(f"{name:12} {value:10}  " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
