"""`up`'s restart backoff: 1, 2, 4 … seconds after a process's last start, up to
30 s for a service and 4 s for a component (one that cannot start, as PostgreSQL
on a full disk, must be back within seconds of the cause being fixed)."""

from __future__ import annotations

import sys
import time

import pytest

from services.dev.localstack.process import ManagedProcess
from services.dev.localstack.supervision import (
    COMPONENT_BACKOFF_SECONDS,
    SERVICE_BACKOFF_SECONDS,
    RestartBackoff,
)
from tests.support import wait_for


@pytest.mark.parametrize(
    ("longest", "waits"),
    [
        (SERVICE_BACKOFF_SECONDS, [1, 2, 4, 8, 16, 30, 30]),
        (COMPONENT_BACKOFF_SECONDS, [1, 2, 4, 4, 4, 4, 4]),
    ],
)
def test_an_exited_process_is_due_after_its_backoff_up_to_the_longest(tmp_path, longest, waits):
    proc = ManagedProcess("exits", [sys.executable, "-c", "pass"], tmp_path / "exits.log")
    proc.start()
    wait_for(lambda: not proc.running, 10, "the process to exit")
    backoff = RestartBackoff(longest)
    for wait in waits:
        # As if the last start were that long ago (a hair less, then just past it).
        proc.started_at = time.monotonic() - wait + 0.5
        assert not backoff.due("exits", proc, stopping=False)
        proc.started_at = time.monotonic() - wait - 0.01
        assert backoff.due("exits", proc, stopping=False)
    assert not backoff.due("exits", proc, stopping=True)
    proc.close_log()
