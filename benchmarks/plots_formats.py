"""The results folder's three pictures saved as SVG and as PNG (Agg, 100 dpi): CPU seconds of each.

Usage: PYTHONPATH=. python benchmarks/plots_formats.py [OUT_DIR]

Runs `tinker-opt search` on the LLaMA-2-70B Tinker folder (benchmarks/search_speed.py's first case)
in this process, with `Figure.savefig` wrapped so that each picture is saved four times, SVG, PNG,
SVG, PNG, and prints the CPU seconds (`time.process_time`) of each save; a save draws the whole
figure, so the second SVG and PNG are the warm cost of drawing plus writing in that format (issue
30: which format is the cheaper path). The PNGs are left beside the SVGs in OUT_DIR for viewing.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    from matplotlib.figure import Figure

    sys.path.insert(0, str(HERE))
    import search_speed as bench

    save = Figure.savefig
    rows: list[list] = []

    def timed(self, path, format=None, **kwargs):
        row: list = [Path(path).name]
        for fmt in ("svg", "png", "svg", "png"):
            started = time.process_time()
            if fmt == "svg":
                save(self, path, format="svg", **kwargs)
            else:
                save(self, Path(str(path)[: -len(".svg")] + ".png"), format="png", dpi=100)
            row.append((fmt, time.process_time() - started))
        rows.append(row)

    Figure.savefig = timed  # type: ignore[method-assign]
    work = Path(tempfile.mkdtemp())
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else work / "out"
    sys.argv = ["tinker-opt", *bench._search_args(bench.CASES[0], bench._tinker_folder(work), out)]
    from tinker_opt.cli import main as cli_main

    with contextlib.suppress(SystemExit):
        cli_main()
    print("| picture | svg (cold) | png (cold) | svg (warm) | png (warm) |\n|---|---|---|---|---|")
    for name, *saves in rows:
        print(f"| {name} | " + " | ".join(f"{s:.3f}" for _, s in saves) + " |")
    warm = {fmt: sum(row[i][1] for row in rows) for i, fmt in ((3, "svg"), (4, "png"))}
    print(f"| all three, warm | | | {warm['svg']:.3f} | {warm['png']:.3f} |")


if __name__ == "__main__":
    main()
