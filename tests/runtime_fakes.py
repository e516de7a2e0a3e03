"""Fakes of what the worker runtime talks to, for unit tests of its decisions:
a message that records what was done to it, a publisher whose dead-letter publish
succeeds or fails, and Pub/Sub-free settings. tests/integration proves the same
runtime against the real emulator."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

from shared.bus.dependencies import Dependencies
from shared.bus.settling import Settler
from shared.config import load_settings
from shared.events import encode

SETTINGS = load_settings(
    max_delivery_attempts=5, retry_min_backoff_seconds=1, retry_max_backoff_seconds=60
)
SUBSCRIPTION = "turns-summary"
DEAD_LETTER_TOPIC = "projects/p/topics/turns-summary-dlq"


class FakeMessage:
    """A delivered message that records each ack, nack (with its delay) and extend."""

    def __init__(self, data: bytes, attributes: dict[str, str], attempt: int = 1, key: str = ""):
        self.data = data
        self.attributes = attributes
        self.ordering_key = key
        self.message_id = str(uuid.uuid4())
        self.delivery_attempt = attempt
        self.publish_time = datetime.now(UTC)
        self.done: list[tuple[str, float]] = []  # ("ack", 0) / ("nack", delay) / ("extend", 0)
        self.settled = threading.Event()

    @classmethod
    def of(cls, event: Any, attempt: int = 1, **attributes: str) -> FakeMessage:
        out = encode(event)
        return cls(out.data, {**out.attributes, **attributes}, attempt, out.ordering_key)

    def ack(self) -> None:
        self.done.append(("ack", 0.0))
        self.settled.set()

    def nack(self, delay: float = 0.0) -> None:
        self.done.append(("nack", delay))
        self.settled.set()

    def extend(self) -> None:
        self.done.append(("extend", 0.0))


class FakePublisher:
    """Takes dead-letter publishes (or refuses them, with `fail`)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.published: list[tuple[str, bytes, dict[str, str]]] = []

    def publish_raw(self, topic: str, data: bytes, attributes: Any, ordering_key: str = ""):
        future: Future = Future()
        if self.fail:
            future.set_exception(RuntimeError("the dead-letter topic refused"))
        else:
            self.published.append((topic, data, dict(attributes)))
            future.set_result("1")
        return future


def settler_of(
    publisher: FakePublisher | None = None,
    dependencies: Dependencies | None = None,
    hook: Any = None,
) -> Settler:
    return Settler(
        SETTINGS,
        SUBSCRIPTION,
        publisher or FakePublisher(),  # type: ignore[arg-type]
        DEAD_LETTER_TOPIC,
        dependencies or Dependencies(retry_min=60, retry_max=60),
        hook,
    )
