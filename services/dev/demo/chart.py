"""The demo's chart, `tokens_per_turn.png`, drawn with matplotlib from the data of
`report.json` (so a report can be charted again later).

Two panels over the 45 turns, both on a log scale: on a linear one the tiered
prompt (about 2k tokens) lies flat on the x axis under the naive one (about
90k). Top: the prompt tokens of each turn, naive and tiered, and the tokens the
workers' LLM calls used during that turn. Bottom: the same, summed from turn 1.
The turn-45 and cumulative savings are written on the figure.

matplotlib is the optional `report` extra: without it the demo still runs and
its report says where the chart would have been.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

INSTALL_HINT = "pip install 'agent-memory[report]'"
NAIVE, TIERED, BACKGROUND = "#c0392b", "#1f6fb2", "#7f7f7f"


class ChartUnavailable(Exception):
    """matplotlib is not installed."""


def draw(report: dict[str, Any], path: Path) -> Path:
    """Write the chart of `report` (the dict of `report.json`) to `path` as a PNG."""
    try:
        # The object API on the Agg canvas: no display, no pyplot global state.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ChartUnavailable(f"matplotlib is not installed ({INSTALL_HINT})") from None
    turns = [t["turn"] for t in report["turns"]]
    naive = [t["naive_tokens"] for t in report["turns"]]
    tiered = [t["tiered_tokens"] for t in report["turns"]]
    background = [t.get("background_tokens", 0) for t in report["turns"]]
    figure = Figure(figsize=(11, 8.5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    top, bottom = figure.subplots(2, 1, sharex=True)
    providers = report["providers"]
    figure.suptitle(
        "agent-memory demo: prompt tokens, whole history (naive) against tiered memory\n"
        f"LLM {providers['llm']}, embeddings {providers['embeddings']}",
        fontsize=14,
    )
    _per_turn(top, turns, naive, tiered, background, report["turn_45"])
    _cumulative(bottom, turns, naive, tiered, background, report["cumulative"])
    bottom.set_xlabel("turn")
    bottom.set_xlim(1, max(turns))
    figure.savefig(path, format="png")
    return path


def _per_turn(
    axes: Any,
    turns: list[int],
    naive: list[int],
    tiered: list[int],
    background: list[int],
    turn_45: dict[str, Any],
) -> None:
    axes.set_yscale("log")
    axes.plot(turns, naive, color=NAIVE, linewidth=2, label="naive: every earlier turn verbatim")
    axes.plot(turns, tiered, color=TIERED, linewidth=2, label="tiered: /v1/context + the message")
    # A turn in which no worker called the LLM has nothing to draw on a log scale.
    shown = [(n, b) for n, b in zip(turns, background, strict=True) if b > 0]
    if shown:
        axes.plot(
            *zip(*shown, strict=True),
            color=BACKGROUND,
            linestyle="none",
            marker="o",
            markersize=4,
            label="background: the workers' LLM calls in that turn",
        )
    axes.set_ylabel("prompt tokens per turn (log scale)")
    axes.set_title("each turn's prompt")
    axes.grid(True, which="major", alpha=0.4)
    axes.legend(loc="upper left")
    last = turns[-1]
    axes.annotate(
        f"turn {last}: naive {turn_45['naive_tokens']:,}, tiered {turn_45['tiered_tokens']:,} "
        f"tokens\n{turn_45['reduction_percent']}% smaller",
        xy=(last, turn_45["tiered_tokens"]),
        xytext=(0.98, 0.12),
        textcoords="axes fraction",
        ha="right",
        fontsize=11,
        bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": TIERED},
        arrowprops={"arrowstyle": "->", "color": TIERED},
    )


def _cumulative(
    axes: Any,
    turns: list[int],
    naive: list[int],
    tiered: list[int],
    background: list[int],
    total: dict[str, Any],
) -> None:
    def running(values: list[int]) -> list[int]:
        sums, acc = [], 0
        for value in values:
            acc += value
            sums.append(acc)
        return sums

    with_background = running([t + b for t, b in zip(tiered, background, strict=True)])
    axes.set_yscale("log")
    axes.plot(turns, running(naive), color=NAIVE, linewidth=2, label="naive")
    axes.plot(
        turns, with_background, color=TIERED, linewidth=2, label="tiered, background included"
    )
    axes.plot(
        turns,
        running(background),
        color=BACKGROUND,
        linewidth=2,
        linestyle="--",
        label="background alone (the workers' LLM calls)",
    )
    axes.set_ylabel("tokens since turn 1 (log scale)")
    axes.set_title("the whole session")
    axes.grid(True, which="major", alpha=0.4)
    axes.legend(loc="upper left")
    axes.text(
        0.98,
        0.08,
        f"{len(turns)} turns: naive {total['naive_tokens']:,} tokens; tiered "
        f"{total['tiered_prompt_tokens']:,} + background {total['background_tokens']:,} = "
        f"{total['tiered_with_background_tokens']:,}\n"
        f"{total['savings_percent']}% saved, background included",
        transform=axes.transAxes,
        ha="right",
        fontsize=11,
        bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": TIERED},
    )
