"""In-process subscriber runtimes with the real handlers, for integration tests."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial

from services.summary_worker.folding import Folder, FoldPolicy
from services.summary_worker.handlers import record_turn
from shared.bus.publisher import EventPublisher
from shared.bus.worker import Delivery, Handler, HandlerTable, Outcome, SubscriberRuntime
from shared.config import Settings
from shared.events import Event, TurnRecorded
from shared.llm import LLM, RulesLLM
from shared.session_buffer import SessionBuffer


def make_turn(ids: dict[str, str], n: int, **overrides: object) -> TurnRecorded:
    values: dict[str, object] = {
        "event_id": str(uuid.uuid4()),
        "app": ids["app"],
        "user_id": ids["user_id"],
        "session_id": ids["session_id"],
        "turn_id": f"turn-{n:04d}",
        "created_at": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n),
        "user": f"user message {n}",
        "assistant": f"assistant answer {n}",
    }
    values.update(overrides)
    return TurnRecorded(**values)  # type: ignore[arg-type]


class Recorder:
    """Wraps a handler to record each call (attempt and outcome), thread-safely."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []  # (turn_id or event_id, attempt, outcome)
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()

    def wrap(self, handler: Handler) -> Handler:
        def recorded(event: Event, delivery: Delivery) -> Outcome | None:
            label = getattr(event, "turn_id", event.event_id)
            with self._lock:
                self.deliveries.append(delivery)
            try:
                outcome = handler(event, delivery)
            except Exception as exc:
                with self._lock:
                    self.calls.append((label, delivery.delivery_attempt, f"error:{exc}"))
                raise
            with self._lock:
                self.calls.append((label, delivery.delivery_attempt, str(outcome)))
            return outcome

        return recorded

    def outcomes(self, label: str) -> list[str]:
        with self._lock:
            return [o for (lbl, _a, o) in self.calls if lbl == label]

    def count(self) -> int:
        with self._lock:
            return len(self.calls)


@contextmanager
def running(
    settings: Settings,
    subscription: str,
    table: HandlerTable,
    publisher: EventPublisher,
) -> Iterator[SubscriberRuntime]:
    runtime = SubscriberRuntime(
        settings, subscription, table, publisher, concurrency=settings.worker_concurrency or 8
    )
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop(timeout=10)


def failing(times: int | None, handler: Handler, only: Callable[[Event], bool]) -> Handler:
    """A handler that raises for matching events `times` times (None: always), then delegates."""
    failures: dict[str, int] = {}
    lock = threading.Lock()

    def flaky(event: Event, delivery: Delivery) -> Outcome | None:
        if only(event):
            with lock:
                count = failures.get(event.event_id, 0)
                if times is None or count < times:
                    failures[event.event_id] = count + 1
                    raise RuntimeError(f"injected failure {count + 1}")
        return handler(event, delivery)

    return flaky


def summary_handler(buffer: SessionBuffer, llm: LLM | None = None) -> Handler:
    """The summary worker's real handler, with the offline `rules` LLM by default."""
    folder = Folder(buffer, llm or RulesLLM(), FoldPolicy())
    return partial(record_turn, buffer=buffer, folder=folder)
