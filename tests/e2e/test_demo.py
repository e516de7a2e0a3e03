"""`agent-memory demo` (what `make demo` runs) end to end: a fresh stack, the
reference scenario, the permission checks, the 45-turn session, the report."""

import json
import subprocess
import sys

import pytest

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
    stdout = result.stdout
    assert stdout.rstrip().endswith(f"PASS: {len(CHECKS)} of {len(CHECKS)} checks passed")
    for name in CHECKS:
        assert f"  PASS  {name}\n" in stdout
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] is True
    assert [c["name"] for c in report["checks"]] == CHECKS
    assert report["providers"] == {"llm": "rules", "embeddings": "hash"}
    turns = report["turns"]
    assert [t["turn"] for t in turns] == list(range(1, 46))
    # Naive stuffing grows with every turn; the tiered prompt stays within the budget.
    naive = [t["naive_tokens"] for t in turns]
    assert naive == sorted(naive) and naive[-1] > 50_000
    assert max(t["tiered_tokens"] for t in turns) < 2_100
    assert report["turn_45"]["naive_tokens"] == naive[-1]
    assert report["turn_45"]["reduction_percent"] >= 90
    total = report["cumulative"]
    assert total["naive_tokens"] == sum(naive)
    assert total["background_tokens"] > 0  # the workers' LLM calls are counted
    assert total["tiered_with_background_tokens"] == (
        total["tiered_prompt_tokens"] + total["background_tokens"]
    )
    assert total["savings_percent"] >= 80
    assert (out / "tokens_per_turn.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
