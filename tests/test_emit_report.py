"""The results folder as people read it: report.html, the pictures, the pipeline schedule and the
terminal tables (tinker_opt/emit/report.py, plots.py, schedule.py, tables.py)."""

import base64
import itertools
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest
from cli_support import EXAMPLE
from model_support import cluster, synthetic_profile
from rich.console import Console

from tinker_opt.costs.evaluate import CostModel
from tinker_opt.emit.results import (
    CANDIDATES_SVG,
    REPORT_HTML,
    SCHEDULE_SVG,
    STAGES_SVG,
    write_results_folder,
)
from tinker_opt.emit.schedule import pipeline_ops
from tinker_opt.emit.search_report import RunLabels, SearchReport
from tinker_opt.emit.tables import picks_table, strategies_table
from tinker_opt.script.reader import read_script
from tinker_opt.solve.picks import pareto_front
from tinker_opt.strategy import Strategy

SVG_NS = "{http://www.w3.org/2000/svg}"


def _svg_shapes(data: bytes) -> dict[str, int]:
    """{SVG element name: count} of a picture, and {"in:" + group kind: elements drawn inside such
    groups} (matplotlib names a group `<kind>_<n>`: `patch`, `PolyCollection`, `PathCollection`);
    ElementTree raises on a file that is not XML."""
    root = ElementTree.fromstring(data)
    assert root.tag == f"{SVG_NS}svg"
    counts: dict[str, int] = {}
    for element in root.iter():
        name = element.tag.removeprefix(SVG_NS)
        counts[name] = counts.get(name, 0) + 1
    for group in root.iter(f"{SVG_NS}g"):
        kind = "in:" + group.get("id", "").rsplit("_", 1)[0]
        drawn = sum(1 for e in group.iter() if e.tag in (f"{SVG_NS}path", f"{SVG_NS}use"))
        counts[kind] = counts.get(kind, 0) + drawn
    return counts


def _patch_pieces(data: bytes) -> int:
    """The closed pieces (each begins with a move, `M`) of the paths drawn in `patch` groups."""
    root = ElementTree.fromstring(data)
    return sum(
        path.get("d", "").count("M")
        for group in root.iter(f"{SVG_NS}g")
        if group.get("id", "").startswith("patch_")
        for path in group.iter(f"{SVG_NS}path")
    )


@pytest.fixture(scope="module")
def evaluations():
    info = read_script(EXAMPLE)
    profiled = synthetic_profile(info.model, tps=(1, 2, 4), cps=(1,), eps=(1,), mbss=(1, 2, 4))
    model = CostModel.from_profile(profiled, info.model, cluster(2, 8, 60000), 64)
    strategies = [
        Strategy(tp=4, pp=4, dp=1, vpp=2, mbs=1),
        Strategy(
            tp=2,
            pp=4,
            dp=2,
            sp=True,
            mbs=2,
            recompute="full",
            recompute_method="block",
            recompute_num_layers=1,
        ),
        Strategy(tp=1, pp=1, dp=16, mbs=1, zero=1),
        Strategy(tp=2, pp=2, dp=4, sp=True, mbs=1),
    ]
    return sorted(
        (model.evaluate(s).to_dict() for s in strategies), key=lambda e: e["iteration_time_ms"]
    )


@pytest.fixture(scope="module")
def folder(evaluations, tmp_path_factory):
    top = evaluations[:3]  # the slowest plays the script's own strategy
    report = SearchReport(
        labels=RunLabels("llama", "tiny", 64, 60000, 2, 8, 512),
        inputs={"script_path": str(EXAMPLE)},
        solver="cpsat",
        status="optimal",
        gap=0.0,
        solve_time_s=0.1,
        objective_ms=top[0]["iteration_time_ms"],
        bound_ms=top[0]["iteration_time_ms"],
        top=top,
        warnings=["a <warning> & more"],
        current=evaluations[3],
        picks={
            "fastest": top[0],
            "no_pipeline": next(e for e in evaluations if e["strategy"]["pp"] == 1),
        },
        pick_titles={
            "fastest": "fastest",
            "no_pipeline": "fastest without pipeline parallelism (pp 1)",
        },
        picks_missing={"headroom": "none: fastest with headroom (nothing fits)"},
        pareto=pareto_front(evaluations),
        evaluated=evaluations,
        folded=2,
    )
    return write_results_folder(
        report,
        tmp_path_factory.mktemp("results"),
        write_script=lambda rank, ev, header, name: "#!/bin/bash\n# " + header[0] + "\n",
    )


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.tags, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.links += [value for name, value in attrs if name in ("href", "src") and value]

    def handle_data(self, data):
        self.text.append(data)


def test_folder_has_the_three_pictures_and_the_page(folder, evaluations):
    """Each picture is an SVG drawing with its boxes, markers and words."""
    shapes = {
        name: _svg_shapes((folder / name).read_bytes())
        for name in (STAGES_SVG, SCHEDULE_SVG, CANDIDATES_SVG)
    }
    # the best's and the current strategy's stages, a bar per part, and the legend boxes
    assert shapes[STAGES_SVG]["in:patch"] > 2 * 4 and shapes[STAGES_SVG]["text"] > 10
    # one box per operation of the schedule (2 p m v of them, plus recomputes), each a closed
    # piece of a compound path per colour
    ops, _, _ = pipeline_ops(evaluations[0], 64)
    assert _patch_pieces((folder / SCHEDULE_SVG).read_bytes()) >= len(ops)
    # a marker per evaluated strategy, a star per pick and the current's cross, in scatters
    assert shapes[CANDIDATES_SVG]["in:PathCollection"] >= len(evaluations) + 2
    assert (folder / REPORT_HTML).stat().st_size > 0


def test_report_parses_and_links_nothing_outside_the_folder(folder):
    page = _Page()
    page.feed((folder / REPORT_HTML).read_text(encoding="utf-8"))
    page.close()
    text = " ".join(page.text)
    for section in (
        "Inputs",
        "Current vs best",
        "Picks",
        "Ranked strategies",
        "Pictures",
        "Warnings",
    ):
        assert section in text
    assert "a <warning> & more" in text  # escaped in the page, read back whole
    assert "2 near-copies folded" in text and "none: fastest with headroom" in text
    images = [link for link in page.links if link.startswith("data:")]
    assert len(images) == 3
    for image in images:
        assert image.startswith("data:image/svg+xml;base64,")
        assert _svg_shapes(base64.b64decode(image.split(",", 1)[1]))["text"] > 0
    local = [link for link in page.links if not link.startswith("data:")]
    assert local, "the tuned scripts are linked"
    for link in local:
        assert "://" not in link and not link.startswith("/") and ".." not in link, link
        assert (folder / link).is_file(), link


def test_report_compares_current_with_best(folder):
    html = (folder / REPORT_HTML).read_text(encoding="utf-8")
    assert 'class="current"' in html and "as fast as the script" in html


def _screenshot(page: Path, out: Path) -> None:
    subprocess.run(
        [
            shutil.which("chromium"),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,2400",
            f"--screenshot={out}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(folder, tmp_path):
    """The page renders to a screenshot that is not blank (text, tables and pictures drawn)."""
    import matplotlib.image

    shot = tmp_path / "report.png"
    _screenshot(folder / REPORT_HTML, shot)
    pixels = matplotlib.image.imread(shot)[..., :3]
    dark = (pixels.mean(axis=2) < 0.6).mean()
    assert dark > 0.01, dark
    assert len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50
    keep = os.environ.get("TINKER_REPORT_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "report_test.png")


def _schedule_input(p: int, v: int, stage_ms: float = 3.0, recompute_ms: float = 0.0) -> dict:
    return {
        "strategy": {"pp": p, "vpp": v, "dp": 1, "mbs": 1},
        "stages": [
            {"stage": s, "time_ms": stage_ms, "recompute_ms": recompute_ms} for s in range(p)
        ],
    }


@pytest.mark.parametrize(
    "p, v, m", [(4, 1, 8), (4, 1, 3), (1, 1, 4), (4, 2, 8), (4, 3, 8), (8, 2, 16)]
)
def test_schedule_of_balanced_stages_takes_the_modelled_time(p, v, m):
    """With equal stages the drawn schedule ends at the cost model's (m*v + p - 1) * t / v."""
    ops, shown, total = pipeline_ops(_schedule_input(p, v), m, max_microbatches=m)
    assert shown == total == m
    assert max(op.end for op in ops) == pytest.approx((m * v + p - 1) * 3.0 / v)
    assert len(ops) == 2 * p * m * v
    for s in range(p):  # a stage never runs two operations at once
        mine = sorted((op.start, op.end) for op in ops if op.stage == s)
        assert all(a[1] <= b[0] + 1e-9 for a, b in itertools.pairwise(mine))


def test_schedule_1f1b_warmup_and_recompute_before_backward():
    ops, shown, total = pipeline_ops(
        _schedule_input(4, 1, recompute_ms=1.0), 32, max_microbatches=8
    )
    assert (shown, total) == (8, 32)
    for s in range(4):
        kinds = [
            op.kind for op in sorted((op for op in ops if op.stage == s), key=lambda op: op.start)
        ]
        assert kinds[: 4 - s] == ["F"] * (
            4 - s
        )  # p - s - 1 warm-up forwards, then the first 1F1B forward
        assert kinds[4 - s] == "R" and kinds[4 - s + 1] == "B"


LONG = Strategy(
    tp=8,
    pp=16,
    dp=4,
    cp=2,
    cp_algo="ulysses_cp_algo",
    ep=8,
    etp=1,
    vpp=4,
    sp=True,
    zero=1,
    mbs=4,
    recompute="full",
    recompute_method="block",
    recompute_num_layers=12,
)


def _wide(strategy: Strategy, stages: int) -> dict:
    return {
        "strategy": strategy.to_dict(),
        "iteration_time_ms": 123456.7,
        "peak_memory_mb": 61234.0,
        "tokens_per_s_per_device": 12345.0,
        "stages": [{"stage": s, "layers": 12} for s in range(stages)],
    }


def test_terminal_tables_fit_80_columns_without_wrapping_a_label():
    console = Console(width=80, record=True, color_system=None)
    short = Strategy(tp=2, pp=2, dp=4, sp=True)
    rows = [_wide(LONG, 16), _wide(short, 2)]
    current = {"error": "recompute_method 'uniform' is not modelled", "strategy": LONG.to_dict()}
    console.print(
        strategies_table(
            rows, "top strategies (cpsat: optimal, gap 0.00%, 12.34 s)", current=current, folded=3
        )
    )
    console.print(
        picks_table(
            {"headroom": rows[0], "fastest": rows[1], "keeps_checkpoint": rows[0]},
            {
                "headroom": "fastest with at least 10% of the memory limit free (peak <= 55000 MB)",
                "keeps_checkpoint": "keeps tp8 pp16 ep8",
            },
        )
    )
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    label = LONG.replace(num_layer_list=None).label()
    assert len(label) > 40
    assert (
        sum(label in line for line in lines) == 4
    )  # rank 1, the current row and two picks, each whole
    assert "now" in text and "3 near-copies folded" in text


def test_a_current_strategy_above_the_limit_is_listed_and_compared():
    """The script's own strategy modelled above the memory limit keeps its figures: a `now!` row
    and the speed-up sentence that says it does not fit (summary.json: `fits` false,
    `over_by_mb`)."""
    from tinker_opt.emit.tables import current_line

    console = Console(width=80, record=True, color_system=None)
    best = _wide(Strategy(tp=2, pp=2, dp=4, sp=True), 2)
    current = dict(_wide(LONG, 16), iteration_time_ms=2 * 123456.7, fits=False, over_by_mb=1234.0)
    current["stages"] = [dict(st, memory_mb=61234.0) for st in current["stages"]]
    console.print(strategies_table([best], "top", current=current))
    text = console.export_text()
    assert "now!" in text and "246913.4" in text
    line = current_line(best, current)
    assert line is not None and "2.00x as fast" in line
    assert "modelled not to fit" in line and "1234 MB more than the 60000 MB limit" in line
