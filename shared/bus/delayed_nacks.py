"""A nack after a delay: Pub/Sub's retry backoff kept by the worker.

Pub/Sub waits a nacked message's backoff itself; the emulator redelivers it at
once. Against the emulator a pull therefore keeps the message leased for the
delay and nacks it then (`backoff_emulated`).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable


class DelayedNacks:
    """Runs nacks once their delay has passed: one thread, a heap of due times."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def add(self, nack: Callable[[], None], delay: float) -> None:
        with self._cond:
            if self._closed:
                nack()
                return
            self._count += 1
            heapq.heappush(self._heap, (time.monotonic() + delay, self._count, nack))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="nack-later", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._heap)

    def flush(self) -> None:
        """Nack now whatever waits (the worker is stopping)."""
        with self._cond:
            due, self._heap = self._heap, []
        for _at, _n, nack in due:
            nack()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.flush()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout=wait)
                if self._closed:
                    return
                _at, _n, nack = heapq.heappop(self._heap)
            nack()
