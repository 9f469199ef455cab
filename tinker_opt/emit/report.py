"""report.html: the results folder on one self-contained page.

Inputs, the script's own strategy against the best, the named picks, the ranked table, the
pictures and the warnings. Pictures are inlined as base64 data URIs and the style sheet is in the
page, so it opens offline, mailed or copied on its own; the only links are relative ones to the
tuned scripts in the folder's configs/.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tinker_opt.emit.search_report import SearchReport
from tinker_opt.solve.picks import FOLD_MEMORY_SHARE, comparison_sentence, current_note
from tinker_opt.strategy import Strategy

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; font-family: monospace; white-space: nowrap; }
td.s { text-align: left; font-family: monospace; font-size: 0.75em; word-break: break-all; max-width: 28em; }
td.t { text-align: left; max-width: 22em; }
tr.best td { background: #e8f6e8; } tr.current td { background: #fdf0e6; }
.error { color: #a00; } .note { color: #555; font-size: 0.9em; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
.big { font-size: 1.3em; font-weight: bold; }
"""


def _label(evaluation: Mapping[str, Any]) -> str:
    return Strategy.from_dict(evaluation["strategy"]).replace(num_layer_list=None).label()


def _layers(evaluation: Mapping[str, Any]) -> str:
    return ",".join(str(st["layers"]) for st in evaluation["stages"])


def _row(
    cells: Sequence[str],
    css: str = "",
    left: Sequence[int] = (1, 2),
    script: int | None = None,
    text: int | None = None,
) -> str:
    def cell(i: int, content: str) -> str:
        kind = "s" if i == script else "t" if i == text else "l" if i in left else ""
        return f'<td class="{kind}">{content}</td>' if kind else f"<td>{content}</td>"

    tds = "".join(cell(i, c) for i, c in enumerate(cells))
    return f'<tr class="{css}">{tds}</tr>' if css else f"<tr>{tds}</tr>"


def _header(names: Sequence[str], left: Sequence[int] = (1, 2)) -> str:
    return (
        "<tr>"
        + "".join(
            f'<th class="l">{escape(n)}</th>' if i in left else f"<th>{escape(n)}</th>"
            for i, n in enumerate(names)
        )
        + "</tr>"
    )


def _figures(evaluation: Mapping[str, Any]) -> list[str]:
    return [
        escape(_label(evaluation)),
        escape(_layers(evaluation)),
        f"{evaluation['iteration_time_ms']:.1f}",
        f"{evaluation['peak_memory_mb']:.0f}",
        f"{evaluation['tokens_per_s_per_device']:.0f}",
    ]


def _script_link(name: str | None) -> str:
    if not name:
        return ""
    return f'<a href="configs/{quote(name)}">{escape(name)}</a>'


def _image(folder: Path, name: str, alt: str) -> str:
    path = folder / name
    if not path.exists():
        return ""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    mime = "image/svg+xml" if path.suffix == ".svg" else "image/png"
    return f'<h3>{escape(alt)}</h3><img alt="{escape(alt)}" src="data:{mime};base64,{data}">'


def _inputs(report: SearchReport) -> str:
    inputs = report.inputs
    rows = [
        ("launch script", inputs.get("script_path")),
        ("profiled data", inputs.get("profiled_data_path")),
        ("cluster", f"{report.labels.num_nodes} nodes x {report.labels.devices_per_node} devices"),
        ("global batch size", report.labels.global_batch_size),
        ("memory limit", f"{report.labels.memory_limit_mb:g} MB per device (modelled memory)"),
        (
            "solver",
            f"{report.solver}: {report.status}, gap {report.gap or 0:.2%}, {report.solve_time_s:.2f} s",
        ),
        (
            "model",
            ", ".join(
                f"{k} {v}"
                for k, v in (inputs.get("model") or {}).items()
                if k
                in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "num_experts")
                and v
            ),
        ),
    ]
    body = "".join(
        f'<tr><th class="l">{escape(k)}</th><td class="l">{escape(str(v))}</td></tr>'
        for k, v in rows
        if v
    )
    return f"<table>{body}</table>"


def _current_vs_best(report: SearchReport, speedup: float | None) -> str:
    head = _header(["", "strategy", "layers/stage", "time (ms)", "memory (MB)", "tokens/s/dev"])
    rows = [_row(["best"] + _figures(report.top[0]), "best")] if report.top else []
    current = report.current
    note = ""
    if current is None:
        note = '<p class="note">No launch script is known for this profile: the current strategy was not evaluated.</p>'
    elif "error" in current:
        note = f'<p class="error">The script\'s own strategy cannot be compared: {escape(current["error"])}</p>'
    elif not current["fits"]:
        if speedup is None:  # else the comparison below says it
            text = str(current_note(current))
            note = f'<p class="error">{escape(text[0].upper() + text[1:])}.</p>'
        rows.append(_row(["current (does not fit)"] + _figures(current), "current"))
    else:
        rows.append(_row(["current"] + _figures(current), "current"))
    if speedup is not None and current is not None:  # a speedup needs the script's evaluation
        sentence = comparison_sentence(report.top[0], current)
        note += f'<p class="big">{escape(sentence[0].upper() + sentence[1:])}.</p>'
    return note + f"<table>{head}{''.join(rows)}</table>"


def _picks(report: SearchReport, pick_scripts: Mapping[str, str | None]) -> str:
    head = _header(
        [
            "pick",
            "strategy",
            "layers/stage",
            "time (ms)",
            "memory (MB)",
            "tokens/s/dev",
            "time vs fastest",
            "tuned script",
        ],
        left=(0, 1, 2, 7),
    )
    rows = []
    fastest = report.top[0]["iteration_time_ms"] if report.top else None
    for name, evaluation in report.picks.items():
        ratio = f"{evaluation['iteration_time_ms'] / fastest:.2f}x" if fastest else ""
        title = report.pick_titles.get(name, name)
        rows.append(
            _row(
                [escape(title)]
                + _figures(evaluation)
                + [ratio, _script_link(pick_scripts.get(name))],
                script=7,
                text=0,
            )
        )
    missing = "".join(f"<li>{escape(reason)}</li>" for reason in report.picks_missing.values())
    return f"<table>{head}{''.join(rows)}</table>" + (
        f'<ul class="note">{missing}</ul>' if missing else ""
    )


def _ranked(report: SearchReport, scripts: Sequence[str | None]) -> str:
    current = report.current if report.current and "error" not in report.current else None
    head = _header(
        [
            "#",
            "strategy",
            "layers/stage",
            "time (ms)",
            "memory (MB)",
            "tokens/s/dev",
            "speed-up vs current",
            "tuned script",
        ],
        left=(1, 2, 7),
    )

    def versus(evaluation: Mapping[str, Any]) -> str:
        return (
            f"{current['iteration_time_ms'] / evaluation['iteration_time_ms']:.2f}x"
            if current
            else "-"
        )

    rows = [
        _row(
            [str(rank)] + _figures(e) + [versus(e), _script_link(name)],
            "best" if rank == 1 else "",
            script=7,
        )
        for rank, (e, name) in enumerate(zip(report.top, scripts, strict=True), start=1)
    ]
    note = (
        (
            f'<p class="note">{report.folded} near-copies folded (same tp, pp, dp, cp, ep and vpp as a '
            "higher-ranked strategy, no faster and saving less than "
            f"{FOLD_MEMORY_SHARE:.0%} of its memory).</p>"
        )
        if report.folded
        else ""
    )
    return f"<table>{head}{''.join(rows)}</table>{note}"


def render_report(
    report: SearchReport,
    folder: Path,
    *,
    scripts: Sequence[str | None],
    pick_scripts: Mapping[str, str | None],
    pictures: Sequence[tuple[str, str]],
    speedup: float | None,
) -> str:
    """The page's HTML; `folder` holds the pictures (file name, caption) to inline."""
    labels = report.labels
    title = f"tinker-opt: {labels.model_name} {labels.model_size}, {labels.num_nodes}x{labels.devices_per_node} devices"
    warnings = "".join(f"<li>{escape(w)}</li>" for w in report.warnings) or "<li>none</li>"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        "<h2>Inputs</h2>",
        _inputs(report),
        "<h2>Current vs best</h2>",
        _current_vs_best(report, speedup),
        "<h2>Picks</h2>",
        _picks(report, pick_scripts),
        "<h2>Ranked strategies</h2>",
        _ranked(report, scripts),
        "<h2>Pictures</h2>",
        *(_image(folder, name, caption) for name, caption in pictures),
        "<h2>Warnings</h2>",
        f"<ul>{warnings}</ul>",
        '<p class="note">Times and memory are modelled by tinker-opt from the profiled blocks; '
        "communication is counted as fully exposed.</p>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
