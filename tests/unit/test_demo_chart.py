"""The demo's chart: drawn with matplotlib when it is installed; without it the
report says where the chart would have been and how to get it."""

import json
import sys

from services.dev.demo import report
from services.dev.demo.chart import INSTALL_HINT
from services.dev.demo.long_session import TURN_COUNT, SessionResult

PNG = b"\x89PNG\r\n\x1a\n"


def _result() -> SessionResult:
    """A session shaped like the demo's: naive grows with every turn, tiered stays flat."""
    naive = [300 + 2_100 * n for n in range(TURN_COUNT)]
    tiered = [250 + min(n, 20) * 80 for n in range(TURN_COUNT)]
    background = [0 if n % 7 == 3 else 400 + 30 * n for n in range(TURN_COUNT)]
    return SessionResult(
        naive=naive,
        tiered=tiered,
        context_ms=[4.0] * TURN_COUNT,
        lag_ms=[120.0] * 6,
        background_tokens=sum(background),
        checks=[],
        turn45_context="",
        background_by_turn=background,
    )


def _write(out):
    result = _result()
    numbers = report.figures(result)
    providers = {"llm": "offline", "embeddings": "hash"}
    return report.write(out, providers, result, numbers, report.target_checks(numbers))


def test_the_chart_is_a_png_drawn_by_matplotlib(tmp_path):
    json_path, chart = _write(tmp_path)
    png = tmp_path / "tokens_per_turn.png"
    assert chart == str(png)
    data = png.read_bytes()
    assert data[:8] == PNG
    assert b"Matplotlib" in data  # the Software text chunk matplotlib's Agg writes
    turns = json.loads(json_path.read_text())["turns"]
    # The background tokens are a series of their own, per turn, in report.json too.
    assert sum(t["background_tokens"] for t in turns) == _result().background_tokens


def test_without_matplotlib_the_report_says_where_the_chart_would_be(tmp_path, monkeypatch):
    (tmp_path / "tokens_per_turn.png").write_bytes(PNG)  # an earlier run's chart
    # None in sys.modules makes `import matplotlib...` fail as if it were not installed.
    for name in [n for n in sys.modules if n == "matplotlib" or n.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    json_path, chart = _write(tmp_path)
    assert json_path.exists()
    assert chart.startswith("not drawn, matplotlib is not installed")
    assert INSTALL_HINT in chart
    assert str(tmp_path / "tokens_per_turn.png") in chart
    assert not (tmp_path / "tokens_per_turn.png").exists()
