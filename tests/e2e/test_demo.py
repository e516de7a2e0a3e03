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
    assert out.count("recorded: 202") == 3
    assert "summary worker: 3 turns in the Valkey buffer" in out and "in order: yes" in out
    assert "extraction worker: 3 episodes archived in Postgres" in out
    assert out.rstrip().endswith("PASS: every turn went API -> Pub/Sub -> both workers")
