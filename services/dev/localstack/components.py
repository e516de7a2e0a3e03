"""What the three embedded components share (PostgreSQL with pgvector in
`postgres`, Valkey in `valkey_server`, the Pub/Sub emulator in `emulator`): each is
started as a child process on 127.0.0.1, waited for until it answers, and
described by the URL other processes use to reach it.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from services.dev.localstack.process import ManagedProcess, tail
from shared.waiting import poll

log = structlog.get_logger("agent_memory.up")

STARTUP_TIMEOUT_SECONDS = 60.0


class StackError(RuntimeError):
    """The stack could not start; the message says why."""


class ComponentError(RuntimeError):
    """A component could not be started; the message says why and where its log is."""


def wait_ready(check: Callable[[], bool], proc: ManagedProcess, what: str, timeout: float) -> None:
    """Wait until `check` succeeds; fail at once if the process exits meanwhile."""
    last_error: list[Exception] = []

    def ready() -> bool:
        if not proc.running:
            raise ComponentError(
                f"{what} exited with code {proc.exit_code()} while starting; "
                f"log {proc.log_path}:\n{tail(proc.log_path)}"
            )
        try:
            return bool(check())
        except Exception as exc:  # not ready yet; keep the reason for the error message
            last_error[:] = [exc]
            return False

    try:
        poll(ready, timeout, f"{what} to become ready", interval=0.1)
    except TimeoutError:
        reason = repr(last_error[0]) if last_error else "no answer"
        raise ComponentError(
            f"{what} did not become ready within {timeout:.0f} s ({reason}); "
            f"log {proc.log_path}:\n{tail(proc.log_path)}"
        ) from None
