"""The console's readers outside the API's own parts, opened once per process at
their first use: a Valkey client for the workers' figures, and the dead-letter
queues (the code of `agent-memory dlq`).

The dead letters are counted at most every DLQ_COUNT_SECONDS for the whole
process, however many overviews are open: a count reads each dead-letter
subscription through and hands it back.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import structlog
import valkey
from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from shared.bootstrap import make_valkey
from shared.bus.dlq import DeadLetterQueues
from shared.config import Settings

log = structlog.get_logger("agent_memory.console")
DLQ_COUNT_SECONDS = 10.0
_opening = asyncio.Lock()


class Sources:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.valkey: valkey.Valkey = make_valkey(settings)
        self.queues = DeadLetterQueues(settings)
        self._lock = threading.Lock()
        self._counted_at = -DLQ_COUNT_SECONDS
        self._dead: dict[str, int | None] = {}

    def dead_letters(self) -> dict[str, int | None]:
        """Dead letters waiting per subscription; {} while Pub/Sub cannot be read."""
        with self._lock:
            if time.monotonic() - self._counted_at >= DLQ_COUNT_SECONDS:
                try:
                    self._dead = {spec.name: n for spec, _path, n in self.queues.counts()}
                except Exception as exc:  # noqa: BLE001 - shown as unknown, logged
                    log.warning("could not count the dead letters", error=repr(exc))
                    self._dead = {}
                self._counted_at = time.monotonic()
            return dict(self._dead)

    def forget_counts(self) -> None:
        """After a replay or purge: the next overview counts again."""
        with self._lock:
            self._counted_at = -DLQ_COUNT_SECONDS

    def close(self) -> None:
        self.queues.close()
        self.valkey.close()


async def sources(request: Request) -> Sources:
    state = request.app.state
    async with _opening:
        if getattr(state, "console_sources", None) is None:
            state.console_sources = await run_in_threadpool(Sources, state.api.settings)
    return state.console_sources


def close_sources(state: Any) -> None:  # the app's state: its fields are set at run time
    found = getattr(state, "console_sources", None)
    if found is not None:
        found.close()
        state.console_sources = None
