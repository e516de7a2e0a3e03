"""`agent-memory demo` (what `make demo` runs) end to end."""

import subprocess
import sys

import pytest

from tests.e2e.test_up import _clean_env
from tests.support import REPO


@pytest.mark.slow
def test_the_demo_follows_each_turn_through_the_pipeline_and_passes():
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "demo"],
        env=_clean_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert out.count("recorded: 202") == 12
    assert out.count("buffered: True, readable at once: yes") == 12
    assert "the rolling summary is at version 1;" in out
    assert "every turn in exactly one place, in order: yes" in out
    # The rules summariser kept the constraint and the decisions, not the chatter.
    summary = next(line for line in out.splitlines() if line.startswith("  summary ("))
    assert "Never deploy to production on Fridays." in summary and "Thanks" not in summary
    assert "carries the previous summary (version 1): yes" in out
    assert "extraction worker: 12 episodes archived in Postgres" in out
    assert out.rstrip().endswith("PASS: every turn went API -> Pub/Sub -> both workers")
