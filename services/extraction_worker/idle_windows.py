"""The extraction worker's idle-window check: a thread that, every few seconds,
claims the windows with no new turn for `AM_EXTRACTION_WINDOW_SECONDS` and
publishes an extraction request for each.

Every replica checks; closing a window marks its turns with the id of its
request in one statement, so two replicas never both close a window. A window
still waiting `RESEND_SECONDS` after it closed (its request may have been lost: a
worker died between the close and the publish) gets its request again, under the
same id: a copy of a request that was not lost finds the window extracted, or
waits behind it on the session's ordering key, and never resets its attempts.
The check also ends the flush marks of sessions flushed long ago. It pauses while
a dependency is down.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from services.extraction_worker.archiving import request
from shared.db.unit_of_work import UnitOfWork
from shared.events import ExtractionRequested
from shared.metrics import EXTRACTION_WINDOWS_WAITING

log = structlog.get_logger("agent_memory.extraction")

Units = Callable[[], UnitOfWork]

RESEND_SECONDS = 60.0
FLUSH_MARK_SECONDS = 24 * 3600.0  # turns in flight at a flush arrive well within this
CLAIM_LIMIT = 500  # windows claimed per check


def check_interval(idle_seconds: float) -> float:
    """How often to check: a fifth of the idle time, between 0.2 and 5 seconds."""
    return min(5.0, max(0.2, idle_seconds / 5))


class IdleWindows:
    def __init__(
        self,
        units: Units,
        publish: Callable[[ExtractionRequested], None],
        idle_seconds: float,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.units = units
        self.publish = publish
        self.idle_seconds = idle_seconds
        self.ready = ready
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> int:
        """One check: the requests published."""
        with self.units() as uow:
            closed = uow.windows.close_idle(self.idle_seconds, CLAIM_LIMIT)
            closed += uow.windows.unfinished(RESEND_SECONDS, CLAIM_LIMIT)
            uow.windows.forget_flushes(FLUSH_MARK_SECONDS)
            EXTRACTION_WINDOWS_WAITING.set(uow.windows.waiting())
            now = uow.now()
            uow.commit()
        for session, window_id in closed:
            # A failed publish leaves the window closed: it is closed again later.
            self.publish(request(session, "idle", window_id, now))
        return len(closed)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="idle-windows", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        interval = check_interval(self.idle_seconds)
        while not self._stop.wait(interval):
            if not self.ready():
                continue
            try:
                published = self.check()
            except Exception as exc:  # the next check tries again
                log.warning("idle-window check failed", error=repr(exc))
                continue
            if published:
                log.info("idle windows closed", windows=published)
