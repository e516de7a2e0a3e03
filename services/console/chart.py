"""The overview's chart: each subscription's backlog, oldest unsettled message's
age and events per second over the last hour (shared.bus.figure_history), as SVG
written on the server: no script, no library, nothing from another origin.

Three panels share the time axis (an hour ago to now) and the subscriptions'
colours (CSS classes `s0`…, in console.css: the CSP allows no inline style). A
gap of more than two steps between samples (no API sampled) breaks a line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from markupsafe import Markup, escape

from shared.bus.figure_history import HISTORY_SECONDS, History

WIDTH, HEIGHT = 360, 150
LEFT, RIGHT, TOP, BOTTOM = 46, 338, 10, 122  # the plot area within the panel
MINUTES = (60, 45, 30, 15, 0)  # the time axis' ticks, minutes ago


@dataclass(frozen=True)
class Panel:
    id: str
    title: str
    unit: str  # after a value in the titles
    field: str  # of shared.bus.figure_history.Point


PANELS = (
    Panel("backlog", "Backlog", "messages", "backlog"),
    Panel("oldest", "Oldest unsettled", "s", "oldest_seconds"),
    Panel("rate", "Events per second", "/s", "events_per_second"),
)


def chart(history: History, subscriptions: list[str]) -> Markup:
    """The three panels, for `subscriptions` in this order (their colours)."""
    return Markup("").join(_panel(panel, history, subscriptions) for panel in PANELS)


def _panel(panel: Panel, history: History, subscriptions: list[str]) -> Markup:
    series = {
        name: [
            (sample.at, getattr(sample.points[name], panel.field))
            for sample in history.samples
            if name in sample.points
        ]
        for name in subscriptions
    }
    values = [v for points in series.values() for _, v in points if v is not None]
    top = _nice(max(values, default=0.0))
    start = history.now - HISTORY_SECONDS

    def x(at: float) -> float:
        return LEFT + (at - start) / HISTORY_SECONDS * (RIGHT - LEFT)

    def y(value: float) -> float:
        return BOTTOM - value / top * (BOTTOM - TOP)

    parts = [
        f'<svg class="chart" id="chart-{panel.id}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-labelledby="chart-{panel.id}-title">',
        f'<title id="chart-{panel.id}-title">{escape(panel.title)} over the last hour</title>',
        f'<text class="axis-title" x="{LEFT}" y="{TOP - 1}">{escape(panel.title)}</text>',
    ]
    for value in (0.0, top / 2, top):
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{RIGHT}" y1="{y(value):.1f}" y2="{y(value):.1f}"/>'
            f'<text class="tick" x="{LEFT - 4}" y="{y(value) + 4:.1f}" text-anchor="end">'
            f"{_number(value)}</text>"
        )
    for minutes in MINUTES:
        at = x(history.now - minutes * 60)
        label = "now" if minutes == 0 else f"−{minutes} min"
        parts.append(
            f'<text class="tick" x="{at:.1f}" y="{BOTTOM + 16}" text-anchor="middle">{label}</text>'
        )
    for n, (name, points) in enumerate(series.items()):
        known = [v for _, v in points if v is not None]
        latest = points[-1][1] if points else None
        summary = (
            f"{name}: now {_number(latest)} {panel.unit}, "
            f"at most {_number(max(known, default=0))} {panel.unit} in the last hour"
        )
        parts.append(
            f'<g class="series s{n % 8}" data-subscription="{escape(name)}" '
            f'data-latest="{_number(latest)}" data-highest="{_number(max(known, default=0))}">'
            f"<title>{escape(summary)}</title>"
        )
        for line in _lines(points, history.step):
            coords = " ".join(f"{x(at):.1f},{y(v):.1f}" for at, v in line)
            if len(line) == 1:  # a lone sample: a dot, not an invisible line
                parts.append(f'<circle cx="{x(line[0][0]):.1f}" cy="{y(line[0][1]):.1f}" r="1.5"/>')
            else:
                parts.append(f'<polyline points="{coords}"/>')
        parts.append("</g>")
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every text in it is escaped above


def _lines(
    points: list[tuple[float, float | None]], step: float
) -> list[list[tuple[float, float]]]:
    """The points as runs without gaps: a missing value or more than two steps
    without a sample ends a run."""
    lines: list[list[tuple[float, float]]] = []
    last_at = None
    for at, value in points:
        if value is None:
            last_at = None
            continue
        if last_at is None or at - last_at > 2 * step:
            lines.append([])
        lines[-1].append((at, value))
        last_at = at
    return lines


def _nice(highest: float) -> float:
    """The top of the value axis: 1, 2 or 5 times a power of ten, at or above `highest`."""
    if highest <= 0:
        return 1.0
    scale = 10 ** math.floor(math.log10(highest))
    return next(scale * f for f in (1, 2, 5, 10) if scale * f >= highest)


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}".rstrip("0").rstrip(".")
