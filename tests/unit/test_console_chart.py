"""The overview's chart (services.console.chart): SVG of the last hour, each
subscription a line broken where samples are missing, its names escaped."""

from __future__ import annotations

import re

from services.console.chart import chart
from shared.bus.figure_history import History, Point, Sample

NOW = 1_800_000_000.0
STEP = 10.0


def _history(values: dict[float, dict[str, Point]]) -> History:
    return History(NOW, STEP, [Sample(NOW - ago, points) for ago, points in values.items()])


def _series(svg: str, panel: str, name: str) -> str:
    body = svg.split(f'id="chart-{panel}"', 1)[1].split("</svg>", 1)[0]
    return re.search(rf'<g class="series s\d" data-subscription="{re.escape(name)}".*?</g>', body)[
        0
    ]


def test_each_panel_draws_each_subscription_with_its_latest_and_highest():
    samples = {
        60.0: {"turns-summary": Point(3, 12.0, 1.5), "turns-extraction": Point(0, None, 0.0)},
        50.0: {"turns-summary": Point(7, 22.0, 2.0), "turns-extraction": Point(0, None, 0.0)},
        40.0: {"turns-summary": Point(1, 2.0, 0.25), "turns-extraction": Point(2, 5.0, 0.0)},
    }
    svg = str(chart(_history(samples), ["turns-summary", "turns-extraction"]))
    assert svg.count("<svg") == 3
    backlog = _series(svg, "backlog", "turns-summary")
    assert 'data-latest="1" data-highest="7"' in backlog
    assert "<title>turns-summary: now 1 messages, at most 7 messages in the last hour</title>" in (
        backlog
    )
    assert backlog.count("<polyline") == 1 and len(re.findall(r"\d,\d", backlog)) == 3
    assert 'data-latest="0.25" data-highest="2"' in _series(svg, "rate", "turns-summary")
    # No known age but the last: one dot, no line.
    oldest = _series(svg, "oldest", "turns-extraction")
    assert "<polyline" not in oldest and oldest.count("<circle") == 1
    # The value axis ends at a round number at or above the highest: 10 for 7.
    assert '<text class="tick" x="42" y="14.0" text-anchor="end">10</text>' in svg


def test_a_gap_of_more_than_two_steps_breaks_the_line():
    samples = {ago: {"s": Point(1, None, 0.0)} for ago in (300.0, 290.0, 280.0, 100.0, 90.0)}
    svg = str(chart(_history(samples), ["s"]))
    assert _series(svg, "backlog", "s").count("<polyline") == 2


def test_names_are_escaped_and_nothing_sampled_is_an_empty_chart():
    svg = str(chart(_history({}), ['<b x="1">']))
    assert "<b x=" not in svg and "&lt;b x=&#34;1&#34;&gt;" in svg
    assert 'data-latest="—" data-highest="0"' in svg
