"""A small SVG writer for the results folder's pictures: boxes, lines, markers, text, axes, legends.

The pictures are plain SVG text (a browser draws them, report.html inlines them), so writing the
results folder imports no plotting library and draws each picture once, as text, in milliseconds
(issue 30: matplotlib's import and its Agg rendering of thousands of artists cost more than the
search). Coordinates are pixels from the top left; an `Axes` maps data to pixels inside its box.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

COLOURS = {
    "tab:blue": "#1f77b4",
    "tab:orange": "#ff7f0e",
    "tab:green": "#2ca02c",
    "tab:red": "#d62728",
    "tab:purple": "#9467bd",
    "tab:brown": "#8c564b",
    "tab:cyan": "#17becf",
    "lightgray": "#d3d3d3",
    "gold": "#ffd700",
    "black": "#000000",
    "white": "#ffffff",
    "red": "#ff0000",
}
"""The named colours the pictures use (matplotlib's tab10 values, so they look as before)."""
FONT = "DejaVu Sans, Arial, Helvetica, sans-serif"


def colour(name: str) -> str:
    return COLOURS.get(name, name)


def number(value: float) -> str:
    """A coordinate with one decimal (the pictures need no finer)."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values covering [low, high], about `count` of them (1, 2, 2.5, 5 x 10^k apart)."""
    if not high > low:
        high = low + 1.0
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def tick_label(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:g}"


@dataclass(frozen=True)
class Axes:
    """A plot box (pixels: left, top, width, height) and the data ranges it shows."""

    left: float
    top: float
    width: float
    height: float
    x_range: tuple[float, float]
    y_range: tuple[float, float]

    def x(self, value: float) -> float:
        low, high = self.x_range
        return self.left + (value - low) / ((high - low) or 1.0) * self.width

    def y(self, value: float) -> float:
        low, high = self.y_range
        return self.top + self.height - (value - low) / ((high - low) or 1.0) * self.height


class Svg:
    """An SVG picture built element by element; `text()` gives the file's content."""

    def __init__(self, width: float, height: float) -> None:
        self.width, self.height = width, height
        self.items: list[str] = []

    def rect(self, x: float, y: float, w: float, h: float, fill: str, **extra: str) -> None:
        attrs = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in extra.items())
        self.items.append(
            f'<rect x="{number(x)}" y="{number(y)}" width="{number(max(w, 0))}" '
            f'height="{number(max(h, 0))}" fill="{colour(fill)}"{attrs}/>'
        )

    def line(
        self, points: Sequence[tuple[float, float]], stroke: str, width: float = 1, dash: str = ""
    ) -> None:
        path = " ".join(f"{number(x)},{number(y)}" for x, y in points)
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        self.items.append(
            f'<polyline points="{path}" fill="none" stroke="{colour(stroke)}" '
            f'stroke-width="{width}"{dashed}/>'
        )

    def marker(self, x: float, y: float, kind: str, size: float, fill: str, **extra: str) -> None:
        """A circle (`o`), a five-pointed star (`*`) or a cross (`x`) centred on (x, y)."""
        attrs = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in extra.items())
        if kind == "o":
            self.items.append(
                f'<circle cx="{number(x)}" cy="{number(y)}" r="{number(size)}" '
                f'fill="{colour(fill)}"{attrs}/>'
            )
            return
        if kind == "*":
            corners = [
                (size * (1 if i % 2 == 0 else 0.45), math.pi / 2 + i * math.pi / 5)
                for i in range(10)
            ]
            shape = [(x + r * math.cos(a), y - r * math.sin(a)) for r, a in corners]
        else:  # a thick cross: the outline of two crossing bars
            shape = [(x + dx * size, y + dy * size) for dx, dy in _CROSS]
        points = " ".join(f"{number(px)},{number(py)}" for px, py in shape)
        self.items.append(f'<polygon points="{points}" fill="{colour(fill)}"{attrs}/>')

    def text(
        self,
        x: float,
        y: float,
        words: str,
        size: float = 10,
        anchor: str = "start",
        fill: str = "black",
        rotate: float = 0,
        baseline: str = "auto",
    ) -> None:
        """Text at (x, y); lines of `words` split at newlines go one below the other."""
        turn = f' transform="rotate({number(rotate)} {number(x)} {number(y)})"' if rotate else ""
        lines = words.split("\n")
        spans = "".join(
            f'<tspan x="{number(x)}" dy="{0 if i == 0 else number(size * 1.15)}">{escape(line)}</tspan>'
            for i, line in enumerate(lines)
        )
        self.items.append(
            f'<text x="{number(x)}" y="{number(y)}" font-size="{number(size)}" '
            f'text-anchor="{anchor}" dominant-baseline="{baseline}" fill="{colour(fill)}"'
            f"{turn}>{spans}</text>"
        )

    def content(self) -> str:
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{number(self.width)}" '
            f'height="{number(self.height)}" viewBox="0 0 {number(self.width)} '
            f'{number(self.height)}" font-family="{FONT}">'
        )
        background = (
            f'<rect width="{number(self.width)}" height="{number(self.height)}" fill="white"/>'
        )
        return "\n".join([head, background, *self.items, "</svg>"]) + "\n"


_CROSS = (
    (-1, -0.6), (-0.6, -1), (0, -0.4), (0.6, -1), (1, -0.6), (0.4, 0),
    (1, 0.6), (0.6, 1), (0, 0.4), (-0.6, 1), (-1, 0.6), (-0.4, 0),
)  # fmt: skip
"""The outline of an X marker, in units of its half-size."""


def draw_axes(
    svg: Svg,
    axes: Axes,
    *,
    title: str = "",
    x_label: str = "",
    y_label: str = "",
    x_ticks: Sequence[tuple[float, str]] | None = None,
    y_ticks: bool = True,
) -> None:
    """The frame, the ticks with their labels and grid lines, the axis labels and the title."""
    bottom = axes.top + axes.height
    if y_ticks:
        for value in nice_ticks(*axes.y_range):
            y = axes.y(value)
            svg.line([(axes.left, y), (axes.left + axes.width, y)], "#eeeeee")
            svg.line([(axes.left - 4, y), (axes.left, y)], "black")
            svg.text(axes.left - 6, y + 3, tick_label(value), 9, anchor="end")
    ticks = (
        x_ticks if x_ticks is not None else [(v, tick_label(v)) for v in nice_ticks(*axes.x_range)]
    )
    for value, label in ticks:
        x = axes.x(value)
        svg.line([(x, bottom), (x, bottom + 4)], "black")
        svg.text(x, bottom + 15, label, 9, anchor="middle")
    svg.rect(axes.left, axes.top, axes.width, axes.height, "none", stroke="black")
    if title:
        lines = title.count("\n")
        svg.text(axes.left + axes.width / 2, axes.top - 10 - 13 * lines, title, 11, anchor="middle")
    if x_label:
        svg.text(axes.left + axes.width / 2, bottom + 38, x_label, 10, anchor="middle")
    if y_label:
        x = axes.left - 52
        svg.text(x, axes.top + axes.height / 2, y_label, 10, anchor="middle", rotate=-90)


def legend(svg: Svg, x: float, y: float, entries: Sequence[tuple[str, str, str]]) -> None:
    """(label, colour, kind) rows from (x, y) down, on a white box; kind `box`, `line`, `dash` or
    a marker."""
    width = 26 + 5.5 * max(len(label) for label, _, _ in entries)
    svg.rect(x - 4, y - 4, width, 16 * len(entries) + 4, "white", stroke="#cccccc")
    for i, (label, fill, kind) in enumerate(entries):
        top = y + i * 16
        if kind == "box":
            svg.rect(x, top, 14, 10, fill)
        elif kind in ("line", "dash"):
            svg.line([(x, top + 5), (x + 14, top + 5)], fill, 1.5, "4,3" if kind == "dash" else "")
        else:
            svg.marker(x + 7, top + 5, kind, 5, fill, stroke="black", stroke_width="0.5")
        svg.text(x + 20, top + 9, label, 9)
