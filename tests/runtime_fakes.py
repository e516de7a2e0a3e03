"""Fakes of what the worker runtime talks to, for unit tests of its decisions:
a message that records what was done to it, a publisher whose dead-letter publish
succeeds or fails (or waits), Pub/Sub-free settings, and a unary pull that never
calls Pub/Sub. tests/integration proves the same runtime against the real
emulator."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

from google.pubsub_v1.types import ReceivedMessage

from shared.bus.contract import HandlerTable
from shared.bus.dependencies import Dependencies
from shared.bus.dispatch import Dispatcher
from shared.bus.message import PullOptions, Sink
from shared.bus.settling import Settler
from shared.bus.unary_pull import UnaryPull
from shared.config import load_settings
from shared.events import Event, encode

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
    """Takes dead-letter publishes (or refuses them, with `fail`); `before` runs
    first, on the settling thread (to hold a settle mid-flight)."""

    def __init__(self, fail: bool = False, before: Callable[[], object] | None = None) -> None:
        self.fail = fail
        self.before = before
        self.published: list[tuple[str, bytes, dict[str, str]]] = []

    def publish_raw(self, topic: str, data: bytes, attributes: Any, ordering_key: str = ""):
        if self.before is not None:
            self.before()
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


def dispatcher_of(
    table: HandlerTable,
    dependencies: Dependencies | None = None,
    publisher: FakePublisher | None = None,
    concurrency: int = 2,
) -> Dispatcher:
    dependencies = dependencies or Dependencies(retry_min=60, retry_max=60)
    settler = settler_of(publisher, dependencies)
    return Dispatcher(SETTINGS, SUBSCRIPTION, table, settler, dependencies, concurrency)


def received(n: int, event: Event | None = None, key: str = "") -> Any:
    """The raw protobuf of a pulled message (as a unary pull's response holds it):
    `event` encoded, or an empty body; ack id `ack-N`, message id `N`."""
    data, attributes = b"{}", {}
    if event is not None:
        out = encode(event)
        data, attributes, key = out.data, out.attributes, out.ordering_key
    message = {"data": data, "attributes": attributes, "ordering_key": key, "message_id": str(n)}
    return ReceivedMessage.pb(ReceivedMessage(ack_id=f"ack-{n}", message=message))


def offline_pull(sink: Sink, in_key_order: bool = True) -> UnaryPull:
    """A unary pull that never calls Pub/Sub: its pull, lease and settle threads are
    not started, so its acks and nacks stay in its lists (`_to_ack`, `_to_nack`),
    and what it pulled is given with `_take_in`. Its hand-off thread runs."""
    options = PullOptions(
        None,  # type: ignore[arg-type]  # no thread that calls Pub/Sub is started
        "projects/p/subscriptions/s",
        max_outstanding=100,
        lease_seconds=30,
        backoff_emulated=False,
    )
    pull = UnaryPull(options, sink, in_key_order=in_key_order)
    pull._handoff.start()
    return pull
