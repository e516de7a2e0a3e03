"""Budgets, in seconds. Every wait of the harness has one, so a run always ends."""

from __future__ import annotations

import time
from collections.abc import Callable

START_BUDGET = 120.0  # `agent-memory up` until everything answers
RESTART_BUDGET = 20.0  # `up` restarting a killed process
APPLY_BUDGET = 90.0  # from the fault's end until every accepted turn is applied
SEND_BUDGET = 60.0  # how long one turn is retried (503, connection errors)
STOP_SECONDS = 20.0  # SIGSTOP ... SIGCONT
REPLAY_BUDGET = 20.0  # `agent-memory dlq replay` must end within this
STACK_STOP_BUDGET = 20.0  # `up` stops within 10 s; then the harness kills what is left
POLL_SECONDS = 0.5
DLQ_CHECK_SECONDS = 5.0  # reading a dead-letter queue costs about 2 s of pulls


def wait_until(check: Callable[[], object], deadline: float, interval: float = 0.2) -> bool:
    """Poll `check` until it is truthy (True) or `deadline` (time.monotonic) passes (False)."""
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
