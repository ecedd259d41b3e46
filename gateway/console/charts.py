"""Line charts as inline SVG, drawn on the server: no chart library, no CDN, no script needed.

One chart is an hour of one-minute points (gateway.service.metrics keeps them). The SVG uses
presentation attributes only (fill, stroke), never `style=`, so the page's Content-Security-
Policy can forbid inline styles; every label is escaped. Series share the y axis, which starts
at 0 and climbs in at most five round steps (1, 2 or 5 times a power of ten) to just above the
peak, so a quiet hour looks quiet; its labels speak one unit (all ms below a second, else all s:
quarters of a rounded top read "0 ms … 1.25 s … 5 s"), and counts never step by a fraction.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from markupsafe import Markup

from gateway.language import _

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 14, 26
COLOURS = ("#2f6fdf", "#d9822b", "#3a9a5b")


@dataclass
class Series:
    label: str
    values: list[float]


MAX_STEPS = 5  # y-axis intervals: enough to read a value off, few enough to label


def nice_step(value: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten that is >= value (> 0)."""
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10 * power


def y_axis(peak: float, unit: str) -> list[float]:
    """The y-axis ticks, 0 first: round steps up to the first tick at or above `peak` (1 when
    nothing happened); a count (no unit) steps by whole numbers."""
    reach = peak if peak > 0 and math.isfinite(peak) else 1.0
    step = nice_step(reach / MAX_STEPS)
    if not unit:
        step = max(1.0, step)
    steps = max(1, math.ceil(reach / step - 1e-9))
    return [round(step * i, 12) for i in range(steps + 1)]


def _labels(ticks: list[float], unit: str) -> list[str]:
    if unit != "s":
        return [f"{t:,.0f}" if t == int(t) else f"{t:g}" for t in ticks]
    if ticks[-1] < 1:
        return [f"{t * 1000:.0f} ms" for t in ticks]
    return [f"{t:g} s" for t in ticks]


def line_chart(title: str, series: list[Series], unit: str = "", minutes: int = 60) -> Markup:
    """An SVG line chart of `series` (each `minutes` values, oldest first), with its title."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    peak = max((v for s in series for v in s.values if math.isfinite(v)), default=0.0)
    ticks = y_axis(peak, unit)
    top = ticks[-1]
    n = max(1, max((len(s.values) for s in series), default=1) - 1)
    esc = lambda text: html.escape(str(text), quote=True)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
        f'aria-label="{esc(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{esc(title)}</title>",
    ]
    for tick, label in zip(ticks, _labels(ticks, unit)):  # grid lines and y labels
        y = TOP + plot_h - plot_h * tick / top
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e3e6ea"/>')
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#667">{esc(label)}</text>'
        )
    for minutes_ago in range(minutes, -1, -15):  # x labels every quarter hour
        x = LEFT + plot_w * (minutes - minutes_ago) / minutes
        label = _("now") if minutes_ago == 0 else _("-{n} min", n=minutes_ago)
        parts.append(
            f'<text x="{x:.1f}" y="{HEIGHT - 8}" text-anchor="middle" font-size="11" fill="#667">{esc(label)}</text>'
        )
    for index, s in enumerate(series):
        colour = COLOURS[index % len(COLOURS)]
        points = " ".join(
            f"{LEFT + plot_w * i / n:.1f},{TOP + plot_h - plot_h * (v if math.isfinite(v) else 0) / top:.1f}"
            for i, v in enumerate(s.values)
        )
        parts.append(
            f'<polyline class="series" data-label="{esc(s.label)}" fill="none" stroke="{colour}" '
            f'stroke-width="2" points="{points}"/>'
        )
        parts.append(
            f'<text x="{LEFT + 8 + 130 * index}" y="{TOP + 10}" font-size="11" fill="{colour}">{esc(s.label)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
