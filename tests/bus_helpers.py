"""In-process subscriber runtimes with the real handlers, for integration tests."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import overload

import valkey
from prometheus_client import REGISTRY

from services.summary_worker.handlers import handlers
from shared.bootstrap import Resources
from shared.bus.dependencies import Dependencies, Probe
from shared.bus.publisher import EventPublisher
from shared.bus.topology import subscriptions_of
from shared.bus.worker import (
    BatchHandler,
    BatchResult,
    Continue,
    Delivery,
    Handler,
    HandlerTable,
    Outcome,
    SubscriberRuntime,
)
from shared.config import Settings
from shared.events import Event, ExtractionRequested, TurnRecorded
from shared.llm import LLM, OfflineLLM
from shared.llm.gemini import make_client
from shared.probes import check_gemini_generation, check_valkey
from shared.session_buffer import SessionBuffer, SessionKey
from tests.support import wait_for


def attempts_spent(subscription: str) -> float:
    """Messages of `subscription` this process has nacked or dead-lettered so far."""
    return sum(
        REGISTRY.get_sample_value(
            "agent_memory_messages_total", {"subscription": subscription, "outcome": outcome}
        )
        or 0.0
        for outcome in ("retried", "dead_lettered")
    )


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
    """Wraps a handler to record each event's result (attempt and outcome),
    thread-safely. A batch handler's event is recorded when it is settled: at
    `first`, or at `then` for an event that continued there."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []  # (turn_id or event_id, attempt, outcome)
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()

    @overload
    def wrap(self, handler: BatchHandler) -> BatchHandler: ...
    @overload
    def wrap(self, handler: Handler) -> Handler: ...
    def wrap(self, handler: Handler | BatchHandler) -> Handler | BatchHandler:
        if isinstance(handler, BatchHandler):
            return self._wrap_batch(handler)

        def recorded(event: Event, delivery: Delivery) -> Outcome:
            self._delivered(delivery)
            try:
                outcome = handler(event, delivery)
            except Exception as exc:
                self._record(event, delivery, exc)
                raise
            self._record(event, delivery, outcome)
            return outcome

        return recorded

    def _wrap_batch(self, handler: BatchHandler) -> BatchHandler:
        def first(items: Sequence[tuple[Event, Delivery]]) -> Sequence[BatchResult]:
            for _event, delivery in items:
                self._delivered(delivery)
            try:
                results = handler.first(items)
            except Exception as exc:
                for event, delivery in items:
                    self._record(event, delivery, exc)
                raise
            for (event, delivery), result in zip(items, results, strict=True):
                if not isinstance(result, Continue):
                    self._record(event, delivery, result)
            return results

        def then(event: Event, delivery: Delivery, value: object) -> Outcome:
            assert handler.then is not None
            try:
                outcome = handler.then(event, delivery, value)
            except Exception as exc:
                self._record(event, delivery, exc)
                raise
            self._record(event, delivery, outcome)
            return outcome

        return BatchHandler(first, then if handler.then is not None else None)

    def _delivered(self, delivery: Delivery) -> None:
        with self._lock:
            self.deliveries.append(delivery)

    def _record(self, event: Event, delivery: Delivery, result: object) -> None:
        label = getattr(event, "turn_id", event.event_id)
        outcome = f"error:{result}" if isinstance(result, Exception) else str(result)
        with self._lock:
            self.calls.append((label, delivery.delivery_attempt, outcome))

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
    dependencies: Dependencies | None = None,
) -> Iterator[SubscriberRuntime]:
    """A runtime of `subscription` for the block; with `dependencies`, the worker's
    view of them (closed after the runtime stops)."""
    runtime = SubscriberRuntime(
        settings,
        subscription,
        table,
        publisher,
        concurrency=settings.worker_concurrency or 8,
        dependencies=dependencies,
    )
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop(timeout=10)
        if dependencies is not None:
            dependencies.close()


def fill_then_cross(
    publisher: EventPublisher, buffer: SessionBuffer, key: SessionKey, turns: list[TurnRecorded]
) -> None:
    """Ten turns fill the buffer to its trigger, then the eleventh crosses it. (Sent
    together, several handlers running at once could each see eleven turns.)"""
    for turn in turns[:10]:
        publisher.publish(turn).result(timeout=10)
    wait_for(lambda: len(buffer.read(key).turns) == 10, 30, "ten turns buffered")
    publisher.publish(turns[10]).result(timeout=10)


def intercept(handler: BatchHandler, check: Callable[[Event, Delivery], object]) -> BatchHandler:
    """`handler`, with `check` run first on each event: an event it raises for
    fails alone with that error; the others go on to `handler`."""

    def first(items: Sequence[tuple[Event, Delivery]]) -> list[BatchResult | None]:
        results: list[BatchResult | None] = []
        passed = []
        for event, delivery in items:
            try:
                check(event, delivery)
            except Exception as exc:
                results.append(exc)
            else:
                passed.append(len(results))
                results.append(None)  # replaced below
        handled = handler.first([items[place] for place in passed]) if passed else []
        for place, result in zip(passed, handled, strict=True):
            results[place] = result
        return results

    return BatchHandler(first, handler.then)  # type: ignore[arg-type]


def failing(
    times: int | None, handler: BatchHandler, only: Callable[[Event], bool]
) -> BatchHandler:
    """`handler`, failing for matching events `times` times (None: always) first."""
    failures: dict[str, int] = {}
    lock = threading.Lock()

    def flaky(event: Event, _delivery: Delivery) -> None:
        if only(event):
            with lock:
                count = failures.get(event.event_id, 0)
                if times is None or count < times:
                    failures[event.event_id] = count + 1
                    raise RuntimeError(f"injected failure {count + 1}")

    return intercept(handler, flaky)


def summary_handler(
    settings: Settings, buffer: SessionBuffer, llm: LLM | None = None
) -> BatchHandler:
    """The summary worker's handler, from the table its process runs (`handlers`),
    with the `offline` LLM by default."""
    resources = Resources(settings=settings, buffer=buffer, llm=llm or OfflineLLM())
    return handlers(resources)[TurnRecorded]  # type: ignore[return-value]


def inline_extraction(pool, llm, embedder, settings: Settings, window: int = 1):
    """The extraction worker's handlers with windows of `window` turns, where each
    extraction request is handled at once, in the call that makes it: for tests
    that run the turns subscription without the requests one (a window's failure
    then fails the turn that closed it)."""
    from services.extraction_worker.handlers import Extraction
    from shared.db.unit_of_work import UnitsOfWork

    local = settings.model_copy(update={"extraction_window_turns": window})
    extraction: Extraction

    def handle(request: ExtractionRequested) -> None:
        extraction.handle_request(request, None)

    extraction = Extraction(UnitsOfWork(pool, "extraction"), llm, embedder, local, handle)
    return extraction


@contextmanager
def extraction_worker(
    settings: Settings,
    pool,
    llm,
    embedder,
    publisher: EventPublisher,
    recorder=None,
    only: set[str] | None = None,
) -> Iterator[dict[str, SubscriberRuntime]]:
    """The extraction worker's subscriptions as `agent-memory worker extraction`
    runs them (its handlers, publishing its extraction requests, and its dead-letter
    hooks, and its check of idle windows), in this process; every handler wrapped by
    `recorder` when given; `only` these subscriptions when given."""
    from services.extraction_worker import handlers as extraction
    from services.extraction_worker.idle_windows import IdleWindows
    from shared.db.unit_of_work import UnitsOfWork

    resources = Resources(
        settings=settings, pool=pool, llm=llm, embedder=embedder, publisher=publisher
    )
    hooks = extraction.dead_letter_hooks(resources)
    handlers = extraction.handlers(resources)
    runtimes = {}
    for subscription in subscriptions_of("extraction"):
        if only is not None and subscription.name not in only:
            continue
        handler = handlers[subscription.event]
        if recorder is not None:
            handler = recorder.wrap(handler)
        runtimes[subscription.name] = SubscriberRuntime(
            settings,
            subscription.name,
            {subscription.event: handler},
            publisher,
            concurrency=settings.worker_concurrency or 8,
            on_dead_letter=hooks.get(subscription.event),
        )
    idle = IdleWindows(
        UnitsOfWork(pool, "extraction"),
        extraction.publishing(publisher, settings),
        settings.extraction_window_seconds,
    )
    for runtime in runtimes.values():
        runtime.start()
    idle.start()
    try:
        yield runtimes
    finally:
        idle.stop()
        for runtime in runtimes.values():
            runtime.request_stop()
        for runtime in runtimes.values():
            runtime.stop(timeout=10)


def watched_model(settings: Settings, retry_min: float, retry_max: float) -> Dependencies:
    """A worker's view of the settings' Gemini model, probed with a one-token request."""
    probe = partial(check_gemini_generation, make_client(settings), settings.llm_model)
    return Dependencies({"llm": Probe(probe)}, retry_min=retry_min, retry_max=retry_max)


def watched_valkey(client: valkey.Valkey) -> Dependencies:
    """A worker's view of `client`'s Valkey, probed often (tests wait seconds, not minutes)."""
    return Dependencies(
        {"valkey": Probe(partial(check_valkey, client), periodic=True)},
        retry_min=0.1,
        retry_max=0.5,
        probe_interval=0.5,
    )
