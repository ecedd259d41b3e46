"""Line charts as inline SVG, drawn on the server: no chart library, no CDN, no script needed.

One chart is an hour of one-minute points (gateway.service.metrics keeps them). The SVG uses
presentation attributes only (fill, stroke), never `style=`, so the page's Content-Security-
Policy can forbid inline styles; every label is escaped. Series share the y axis, which starts
at 0 and ends at a rounded-up maximum, so a quiet hour looks quiet.
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


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is >= value (1 for nothing)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10 * power


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.3g} s"
    return f"{value:.3g}"


def line_chart(title: str, series: list[Series], unit: str = "", minutes: int = 60) -> Markup:
    """An SVG line chart of `series` (each `minutes` values, oldest first), with its title."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    peak = max((v for s in series for v in s.values if math.isfinite(v)), default=0.0)
    top = nice_ceiling(peak)
    n = max(1, max((len(s.values) for s in series), default=1) - 1)
    esc = lambda text: html.escape(str(text), quote=True)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
        f'aria-label="{esc(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{esc(title)}</title>",
    ]
    for i in range(5):  # grid lines and y labels at 0, 1/4 .. the top
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e3e6ea"/>')
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#667">'
            f"{esc(_fmt(top * i / 4, unit))}</text>"
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
