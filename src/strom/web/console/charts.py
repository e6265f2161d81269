"""Line charts as inline SVG, from the metric history's points (pure: values in, markup out).

A chart is one ``<figure class="chart">`` holding an ``<svg>``: a horizontal axis over the history's
window (minutes before now), a vertical one from zero to a rounded maximum, one polyline per series
(broken where a bucket has no value), the latest value of each series in the legend. Nothing is
scripted: the page is complete as served, and a reload redraws it. ``data-points`` counts the buckets
with a value, which tests and people reading the markup can check.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from strom.metrics.history import Point

COLOURS = ("#1f6fb2", "#d9730d", "#2e9c48", "#b0306b", "#6b4fbb", "#8a6d1d", "#1b9aaa", "#c03a2b")
WIDTH, HEIGHT = 560, 150
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 10, 10, 22


@dataclass(frozen=True, slots=True)
class Line:
    label: str
    points: Sequence[Point]


def nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten at or above ``value`` (1 for nothing)."""
    if value <= 0 or math.isnan(value):
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def human(value: float, unit: str = "") -> str:
    """``1.5 k``, ``12 M``: three significant figures at most."""
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}".rstrip()
    return f"{value:.3g} {unit}".rstrip()


def line_chart(chart_id: str, title: str, lines: Sequence[Line], unit: str = "") -> str:
    esc = html.escape
    values = [p.value for line in lines for p in line.points if p.value is not None]
    top = nice_max(max(values, default=0.0))
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    n = max((len(line.points) for line in lines), default=0)

    def xy(i: int, value: float) -> str:
        x = _LEFT + (plot_w * i / (n - 1) if n > 1 else 0)
        y = _TOP + plot_h * (1 - value / top)
        return f"{x:.1f},{y:.1f}"

    parts = [
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="{esc(title)}">',
        f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{WIDTH - _RIGHT}" y2="{_TOP + plot_h}" stroke="#999"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + plot_h}" stroke="#999"/>',
        f'<text x="{_LEFT - 4}" y="{_TOP + 8}" text-anchor="end" font-size="10">'
        f"{esc(human(top, unit))}</text>",
        f'<text x="{_LEFT - 4}" y="{_TOP + plot_h}" text-anchor="end" font-size="10">0</text>',
    ]
    if n > 1:
        span_min = _window_minutes(lines)
        for frac in (0.0, 0.5, 1.0):
            x = _LEFT + plot_w * frac
            label = "now" if frac == 1.0 else f"-{span_min * (1 - frac):.0f} min"
            parts.append(
                f'<text x="{x:.0f}" y="{HEIGHT - 6}" text-anchor="middle" font-size="10">{label}</text>'
            )
    legend = []
    for k, line in enumerate(lines):
        colour = COLOURS[k % len(COLOURS)]
        run: list[str] = []
        for i, point in enumerate(line.points):
            if point.value is None:
                parts.append(_polyline(run, colour))
                run = []
            else:
                run.append(xy(i, point.value))
        parts.append(_polyline(run, colour))
        latest = next((p.value for p in reversed(line.points) if p.value is not None), None)
        shown = "-" if latest is None else human(latest, unit)
        legend.append(f'<span style="color:{colour}">■</span> {esc(line.label)}: <b>{esc(shown)}</b>')
    parts.append("</svg>")
    return (
        f'<figure class="chart" id="{esc(chart_id)}" data-points="{len(values)}">'
        f"<figcaption>{esc(title)}</figcaption>{''.join(parts)}"
        f'<div class="legend">{" &nbsp; ".join(legend) or "no data yet"}</div></figure>'
    )


def _polyline(run: list[str], colour: str) -> str:
    if not run:
        return ""
    if len(run) == 1:  # a lone bucket: a dot, not an invisible zero-length line
        x, y = run[0].split(",")
        return f'<circle cx="{x}" cy="{y}" r="2" fill="{colour}"/>'
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{" ".join(run)}"/>'


def _window_minutes(lines: Sequence[Line]) -> float:
    points = next((line.points for line in lines if len(line.points) > 1), None)
    if not points:
        return 0.0
    return (points[-1].time_ms - points[0].time_ms) / 60_000
