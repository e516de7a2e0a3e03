"""`agent-memory demo` (what `make demo` runs) end to end: a fresh stack, the
reference scenario, the permission checks, the 45-turn session, the report and
its chart, no log lines among them; and a `gemini` provider without credentials,
or out of reach, stopping at once."""

import json
import re
import subprocess
import sys
import time

import pytest

from services.dev.localstack.process import free_port
from tests.e2e.test_up import _clean_env
from tests.support import REPO

CHECKS = [
    "global preference recalled in a new session",
    "project architecture recalled in a new session",
    "no leak into another project or user",
    "Light Mode supersedes Dark Mode",
    "the permission decisions",
    "rolling summary created and buffer trimmed",
    "every rule stated in turns 1-5 is in the context of turn 45",
    "turn-45 prompt reduction at least 90%",
    "cumulative savings, background tokens included, at least 80%",
]


@pytest.mark.slow
def test_the_demo_passes_every_check_and_writes_its_report(tmp_path):
    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "demo", "--out", str(out)],
        env=_clean_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    _assert_no_log_lines(result)
    stdout = result.stdout
    # The stack's start-up steps are told as they complete, before the story.
    assert re.search(r"\n  PostgreSQL ready on port \d+ \(\d+\.\d s\)\n", stdout)
    assert stdout.index("  services started: api, ") < stdout.index("stack up: API")
    assert stdout.rstrip().endswith(f"PASS: {len(CHECKS)} of {len(CHECKS)} checks passed")
    for name in CHECKS:
        assert f"  PASS  {name}\n" in stdout
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] is True
    assert [c["name"] for c in report["checks"]] == CHECKS
    assert report["providers"] == {"llm": "offline", "embeddings": "hash"}
    turns = report["turns"]
    assert [t["turn"] for t in turns] == list(range(1, 46))
    # Naive stuffing grows with every turn; the tiered prompt stays within the budget.
    naive = [t["naive_tokens"] for t in turns]
    assert naive == sorted(naive) and naive[-1] > 50_000
    assert max(t["tiered_tokens"] for t in turns) < 2_100
    assert report["turn_45"]["naive_tokens"] == naive[-1]
    assert report["turn_45"]["reduction_percent"] >= 90
    # The turn-45 context by section: the session's older turns come back recalled.
    sections = report["turn_45"]["context_tokens_by_section"]
    assert set(sections) <= {"rules", "summary", "recent_turns", "memories", "recalled_turns"}
    assert sections["rules"] > 0 and sections["recalled_turns"] > 0
    assert sum(sections.values()) < report["turn_45"]["tiered_tokens"]
    assert "\n  turn 45 context by section: rules " in stdout
    total = report["cumulative"]
    assert total["naive_tokens"] == sum(naive)
    assert total["background_tokens"] > 0  # the workers' LLM calls are counted
    assert total["tiered_with_background_tokens"] == (
        total["tiered_prompt_tokens"] + total["background_tokens"]
    )
    assert total["savings_percent"] >= 80
    chart = (out / "tokens_per_turn.png").read_bytes()
    assert chart[:8] == b"\x89PNG\r\n\x1a\n" and b"Matplotlib" in chart
    assert f"chart: {out / 'tokens_per_turn.png'}\n" in stdout
    assert [t["background_tokens"] for t in turns].count(0) < len(turns)
    assert sum(t["background_tokens"] for t in turns) == total["background_tokens"]


def _log_lines(text: str) -> list[str]:
    """Lines of a log renderer: JSON objects, or the console's ISO timestamps."""
    return [
        line
        for line in text.splitlines()
        if line.lstrip().startswith("{")
        or re.match(r"\d{4}-\d\d-\d\dT\d\d:", line)
        or "running as root" in line
    ]


def _assert_no_log_lines(result: subprocess.CompletedProcess) -> None:
    # The demo's own story only: the stack's log lines go to the run's logs folder.
    assert _log_lines(result.stdout) == []
    assert _log_lines(result.stderr) == []


def _refused_at_once(env: dict[str, str], option: str) -> subprocess.CompletedProcess:
    """`demo <option> gemini`, which must stop at its check: exit 2, within seconds."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "demo", option, "gemini"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.monotonic() - started < 20  # the interpreter's start-up, not a stack's
    assert result.returncode == 2, result.stdout + result.stderr
    return result


@pytest.mark.parametrize("option", ["--llm", "--embeddings"])
def test_the_demo_without_gemini_credentials_fails_fast_and_says_why(tmp_path, option):
    env = _clean_env(CLOUDSDK_CONFIG=str(tmp_path / "gcloud"))  # no gcloud ADC file
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    result = _refused_at_once(env, option)
    assert result.stdout == ""  # no stack was started
    for words in (f"{option} gemini", "AM_GEMINI_API_KEY", "GOOGLE_CLOUD_PROJECT"):
        assert words in result.stderr
    assert "Application Default Credentials" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_demo_with_gemini_out_of_reach_fails_fast_and_says_why():
    # A key, but nothing answers where Gemini should be (no network, a wrong URL).
    url = f"http://127.0.0.1:{free_port()}"
    env = _clean_env(AM_GEMINI_API_KEY="a-key", AM_GEMINI_BASE_URL=url)
    result = _refused_at_once(env, "--llm")
    assert result.stdout == ""
    assert result.stderr == (
        f"agent-memory demo: --llm gemini: cannot reach {url} ([Errno 111] Connection "
        "refused); check the network or AM_GEMINI_BASE_URL\n"
    )


def test_a_failed_demo_keeps_its_folder_and_logs_and_says_where(tmp_path):
    # A stack that cannot start: the emulator is not where the setting says.
    env = _clean_env(AM_PUBSUB_EMULATOR_BIN=str(tmp_path / "no-emulator"), TMPDIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "demo", "--out", str(tmp_path / "report")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "could not start the stack" in result.stdout
    [kept] = tmp_path.glob("agent-memory-demo-*")
    assert f"the run failed: its data and logs are kept in {kept} " in result.stdout
    assert (kept / "logs" / "demo.log").stat().st_size > 0
    _assert_no_log_lines(result)
