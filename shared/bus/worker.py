"""The subscriber runtime every worker uses.

Streaming pull (on Pub/Sub) or unary pull (on the emulator; see `unary_pull`)
with explicit flow control and a thread pool of the same size (sized to the
worker's connection pool). For each message: decode and validate, run the
handlers, and only then acknowledge; `settling` decides what an error means
(dead-letter now, hold for a dependency, retry after a backoff). One log line
per message.

While a dependency is down (`dependencies`) the runtime pulls nothing new, and
every message it holds waits, leased, until the dependency answers; then it is
handled again from the start. Its delivery attempts are not spent on it.

A `BatchHandler` takes all events of its type from one unary pull in one call
(the summary worker appends them to Valkey in one pipeline instead of one round
trip and one thread hand-off each); every event still gets its own outcome,
ack, retry or dead letter, and slow remainders run on handler threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import structlog
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber.message import Message
from google.cloud.pubsub_v1.subscriber.scheduler import ThreadScheduler
from google.cloud.pubsub_v1.types import FlowControl

from shared.bus.attributes import REPLAYED_FOR
from shared.bus.clients import subscriber_client
from shared.bus.contract import (
    BatchHandler,
    BatchResult,
    DeadLetter,
    DeadLetterHook,
    Delivery,
    Finish,
    Handler,
    HandlerTable,
    Outcome,
)
from shared.bus.dependencies import Dependencies
from shared.bus.publisher import EventPublisher
from shared.bus.settling import HELD, Pending, Settler
from shared.bus.topology import dead_letter_name, full_name
from shared.bus.unary_pull import PREFETCH_FACTOR, PulledMessage, UnaryPullDelivery
from shared.config import Settings
from shared.errors import PermanentError
from shared.events import Event, Limits, decode
from shared.metrics import (
    DELIVERY_LAG_SECONDS,
    HANDLER_SECONDS,
    MESSAGES,
    MESSAGES_HELD,
    MESSAGES_IN_FLIGHT,
    WORKER_CONCURRENCY,
)
from shared.tracing import current, end_span, start_consumer_span

__all__ = [
    "BatchHandler",
    "BatchResult",
    "DeadLetter",
    "DeadLetterHook",
    "Delivery",
    "Finish",
    "Handler",
    "HandlerTable",
    "Outcome",
    "SubscriberRuntime",
]

log = structlog.get_logger("agent_memory.worker")

# Streaming pull: how long the library keeps extending a held message's lease. A
# message held through a longer outage comes back as a new delivery attempt.
MAX_LEASE_SECONDS = 7 * 24 * 3600


@dataclass
class _Item:
    """One message on its way through the runtime."""

    message: Message | PulledMessage
    attributes: dict[str, str]
    attempt: int
    started: float
    event: Event | None = None
    span: Any = None  # its tracing span (None when tracing is off)

    def delivery(self, subscription: str) -> Delivery:
        m = self.message
        return Delivery(
            subscription,
            m.message_id,
            self.attempt,
            m.publish_time,
            m.ordering_key,
            self.attributes,
        )


# Runs the rest of a message's work (second argument) elsewhere, or the third
# argument when the worker stops first.
Later = Callable[[Message | PulledMessage, Callable[[], None], Callable[[], None]], None]


def _inline(
    _message: Message | PulledMessage, work: Callable[[], None], _abandoned: Callable[[], None]
) -> None:
    work()


def resolve_pull_mode(settings: Settings) -> str:
    if settings.pull_mode != "auto":
        return settings.pull_mode
    return "unary" if settings.pubsub_emulator_host else "streaming"


class SubscriberRuntime:
    """Consumes one subscription with a handler table until stopped."""

    def __init__(
        self,
        settings: Settings,
        subscription: str,
        handlers: HandlerTable,
        publisher: EventPublisher,
        *,
        concurrency: int,
        subscriber: pubsub_v1.SubscriberClient | None = None,
        dependencies: Dependencies | None = None,
        on_dead_letter: DeadLetterHook | None = None,
    ) -> None:
        self.settings = settings
        self.subscription = subscription
        self.handlers = handlers
        self.publisher = publisher
        self.subscriber = subscriber or subscriber_client()
        self.concurrency = concurrency
        self.limits = Limits(settings.max_message_bytes, settings.max_tool_events_bytes)
        # Without probes a dependency counts as back once its backoff has passed.
        self._own_dependencies = dependencies is None
        self.dependencies = dependencies or Dependencies(
            retry_min=settings.dependency_retry_min_seconds,
            retry_max=settings.dependency_retry_max_seconds,
        )
        project = settings.google_cloud_project
        self.subscription_path = self.subscriber.subscription_path(
            project, full_name(settings.topic_prefix, subscription)
        )
        self.settler = Settler(
            settings,
            subscription,
            publisher,
            publisher.client.topic_path(
                project, full_name(settings.topic_prefix, dead_letter_name(subscription))
            ),
            self.dependencies,
            on_dead_letter,
        )
        self.mode = resolve_pull_mode(settings)
        self._future: pubsub_v1.subscriber.futures.StreamingPullFuture | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._unary: UnaryPullDelivery | None = None
        self._duration = HANDLER_SECONDS.labels(subscription)
        self._held = MESSAGES_HELD.labels(subscription)
        self._lag = DELIVERY_LAG_SECONDS.labels(subscription)
        WORKER_CONCURRENCY.labels(subscription).set(concurrency)
        MESSAGES_IN_FLIGHT.labels(subscription).set_function(self.in_flight)
        self._handling = 0  # streaming pull: messages in a handler's callback now
        self._handling_lock = threading.Lock()
        self._stopping = threading.Event()

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> None:
        self.dependencies.start()  # shared by the process's runtimes: once is enough
        threads = f"handler-{self.subscription}"
        if self.mode == "unary":
            # A pull goes to one thread only where a batch handler can take it
            # whole; otherwise each message is decoded and handled on its own.
            batches = any(isinstance(e, BatchHandler) for e in self.handlers.values())
            self._unary = UnaryPullDelivery(
                self.subscriber,
                self.subscription_path,
                self._on_pull,
                self.concurrency,
                self.settings.lease_extension_seconds,
                threads,
                whole_pulls=batches,
                may_pull=lambda: self.dependencies.ready,
                on_error=lambda exc: self.dependencies.report("pubsub", exc),
            )
            self._unary.start()
        else:
            self._executor = ThreadPoolExecutor(
                max_workers=self.concurrency, thread_name_prefix=threads
            )
            self._future = self.subscriber.subscribe(
                self.subscription_path,
                callback=self._on_message,
                flow_control=FlowControl(
                    max_messages=self.concurrency * PREFETCH_FACTOR,
                    max_duration_per_lease_extension=self.settings.lease_extension_seconds,
                    max_lease_duration=MAX_LEASE_SECONDS,
                ),
                scheduler=ThreadScheduler(executor=self._executor),
                await_callbacks_on_shutdown=True,
            )
        log.info(
            "worker started",
            subscription=self.subscription,
            concurrency=self.concurrency,
            pull_mode=self.mode,
        )

    def request_stop(self) -> None:
        """Stop taking new messages (returns at once; `stop` waits for the drain)."""
        self._stopping.set()
        self.settler.flush()
        if self._unary is not None:
            self._unary.request_stop()
        if self._future is not None:
            self._future.cancel()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop pulling, let in-flight handlers finish for at most `timeout` seconds.

        Messages held but not started (or held for a dependency) are nacked
        (redelivered elsewhere). Returns False if handlers were still running at
        the deadline; their messages are not acknowledged and come back when their
        lease ends.
        """
        timeout = self.settings.worker_shutdown_seconds if timeout is None else timeout
        self._stopping.set()
        self.settler.flush()
        if self._unary is not None:
            drained = self._unary.stop(timeout)
        elif self._future is not None:
            self._future.cancel()
            drained = True
            try:
                self._future.result(timeout=timeout)
            except TimeoutError:
                drained = False
            except Exception as exc:  # the stream had already failed; it is stopped either way
                log.warning("worker stream ended with an error", error=repr(exc))
        else:
            return True
        self.settler.close()
        if self._own_dependencies:
            self.dependencies.close()
        if not drained:
            log.warning(
                "worker stop deadline passed with handlers running",
                subscription=self.subscription,
                in_flight=self._unary.in_flight() if self._unary else None,
                timeout_s=timeout,
            )
        log.info("worker stopped", subscription=self.subscription, drained=drained)
        return drained

    def wait(self, timeout: float | None = None) -> None:
        """Block until delivery ends; raise its error if it failed."""
        if self._unary is not None:
            if self._unary.error is not None:
                raise self._unary.error
            return
        assert self._future is not None
        self._future.result(timeout=timeout)

    @property
    def running(self) -> bool:
        if self._unary is not None:
            return self._unary.running
        return self._future is not None and not self._future.done()

    def in_flight(self) -> int:
        """Messages leased and not yet settled (streaming pull: those in a handler)."""
        return self._unary.in_flight() if self._unary is not None else self._handling

    # -- messages --------------------------------------------------------------
    def _on_message(self, message: Message | PulledMessage) -> None:
        """Streaming pull: one message on a handler thread, every step inline."""
        with self._handling_lock:
            self._handling += 1
        try:
            self._on_messages([message], _inline)
        finally:
            with self._handling_lock:
                self._handling -= 1

    def _on_pull(self, messages: list[PulledMessage]) -> None:
        """Unary pull. Whole pulls (a table with a `BatchHandler`): events of a
        `BatchHandler` are handled together here, every other message (and every
        `Finish`) on its own thread. Otherwise one message, every step inline."""
        assert self._unary is not None
        self._on_messages(messages, self._unary.run_later if self._unary.whole_pulls else _inline)

    def _on_messages(self, messages: Sequence[Message | PulledMessage], later: Later) -> None:
        """Handle `messages`; those held for a dependency wait here, leased, until
        it answers, and are handled again from the start."""
        now = datetime.now(UTC)
        for message in messages:
            if message.publish_time is not None:
                self._lag.observe(max(0.0, (now - message.publish_time).total_seconds()))
        pending = list(messages)
        while pending:
            if not self._await_dependencies(pending):
                return
            pending = self._dispatch(pending, later)

    def _await_dependencies(self, held: list[Message | PulledMessage]) -> bool:
        """Wait until every dependency answers: True; or the worker stops first:
        False, and `held` is handed back (nacked) for redelivery."""
        if self.dependencies.ready:
            return True
        self._held.inc(len(held))
        try:
            while not self.dependencies.wait_until_ready(self._stopping, timeout=60.0):
                if self._stopping.is_set():
                    break
                for message in held:  # however long the outage, they stay ours
                    if isinstance(message, PulledMessage):
                        message.keep_leased()
            else:
                return True
        finally:
            self._held.dec(len(held))
        down = ", ".join(sorted(self.dependencies.down())) or "a dependency"
        reason = f"the worker stopped while {down} was down; nacked for redelivery"
        for message in held:
            message.nack()
            MESSAGES.labels(self.subscription, "retried").inc()
            log.warning(
                "message handled",
                outcome="retried",
                error=reason,
                subscription=self.subscription,
                message_id=message.message_id,
                event_id=message.attributes.get("event_id"),
            )
        return False

    def _dispatch(
        self, messages: Sequence[Message | PulledMessage], later: Later
    ) -> list[Message | PulledMessage]:
        """Decode and handle `messages`; the ones held for a dependency are returned
        (work run elsewhere waits for its dependency there)."""
        started = time.perf_counter()
        held: list[Message | PulledMessage] = []
        batches: dict[BatchHandler, list[_Item]] = {}
        for message in messages:
            item = _Item(message, dict(message.attributes), message.delivery_attempt or 1, started)
            item.span = start_consumer_span(self.subscription, item.attributes)
            meant_for = item.attributes.get(REPLAYED_FOR)
            if meant_for and meant_for != self.subscription:
                self._conclude(item, outcomes=[Outcome.SKIPPED])
                continue
            if item.attempt > self.settings.max_delivery_attempts:
                # Not run again: whatever happened on its last attempt may happen again.
                unsettled = PermanentError(
                    f"delivered {item.attempt} times; attempt {item.attempt - 1} ended "
                    "without an outcome (a worker crashed or was stopped while handling it)"
                )
                if not self._conclude(item, error=unsettled):
                    held.append(message)
                continue
            try:
                item.event = decode(message.data, item.attributes, self.limits)
                entry = self.handlers.get(type(item.event))
                if not entry:
                    raise PermanentError(
                        f"no handler for {item.event.EVENT_TYPE} on {self.subscription}"
                    )
            except Exception as exc:
                if not self._conclude(item, error=exc):
                    held.append(message)
                continue
            if isinstance(entry, BatchHandler):
                batches.setdefault(entry, []).append(item)
            else:
                work = partial(self._call_all, entry, item)
                if later is _inline:
                    if not self._run(item, work, timed_from_here=True):
                        held.append(message)
                else:
                    later(
                        message,
                        partial(self._run_elsewhere, item, work, timed_from_here=True),
                        partial(self._abandoned, item),
                    )
        for handler, items in batches.items():
            held.extend(self._run_batch(handler, items, later))
        return held

    def _run_batch(
        self, handler: BatchHandler, items: list[_Item], later: Later
    ) -> list[Message | PulledMessage]:
        events = [(i.event, i.delivery(self.subscription)) for i in items]
        try:
            results = list(handler.handle(events))  # type: ignore[arg-type]
            if len(results) != len(items):
                raise RuntimeError(f"{len(results)} results for {len(items)} events")
        except Exception as exc:
            results = [exc] * len(items)
        held = []
        for item, result in zip(items, results, strict=True):
            if isinstance(result, Exception):
                settled = self._conclude(item, error=result)
            elif result is None or isinstance(result, Outcome):
                settled = self._conclude(item, outcomes=[result or Outcome.APPLIED])
            elif callable(result):
                if later is _inline:
                    settled = self._run(item, result)
                else:
                    later(
                        item.message,
                        partial(self._run_elsewhere, item, result),
                        partial(self._abandoned, item),
                    )
                    settled = True
            else:
                error = TypeError(f"a batch handler returned {type(result).__name__}")
                settled = self._conclude(item, error=error)
            if not settled:
                held.append(item.message)
        return held

    def _call_all(self, handlers: Sequence[Handler], item: _Item) -> list[Outcome]:
        assert item.event is not None
        delivery = item.delivery(self.subscription)
        return [handler(item.event, delivery) or Outcome.APPLIED for handler in handlers]

    def _run(
        self,
        item: _Item,
        work: Callable[[], list[Outcome] | Outcome | None],
        *,
        timed_from_here: bool = False,
    ) -> bool:
        """Run the rest of `item` on this thread, its log context bound for the
        handlers' own log lines. False: held for a dependency."""
        if timed_from_here:
            item.started = time.perf_counter()
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(**self._context(item))
        try:
            with current(item.span):
                done = work()
        except Exception as exc:
            return self._conclude(item, error=exc)
        else:
            outcomes = done if isinstance(done, list) else [done or Outcome.APPLIED]
            return self._conclude(item, outcomes=outcomes)
        finally:
            structlog.contextvars.clear_contextvars()

    def _run_elsewhere(
        self,
        item: _Item,
        work: Callable[[], list[Outcome] | Outcome | None],
        *,
        timed_from_here: bool = False,
    ) -> None:
        """`_run` on a handler thread; held, the message is handled again from the
        start once its dependency answers."""
        if not self._run(item, work, timed_from_here=timed_from_here):
            self._on_messages([item.message], _inline)

    def _abandoned(self, item: _Item) -> None:
        """The worker stopped before `item`'s work began; its message was nacked."""
        reason = "the worker stopped before handling it; nacked for redelivery"
        MESSAGES.labels(self.subscription, "retried").inc()
        end_span(item.span, "retried", reason)
        log.warning("message handled", outcome="retried", error=reason, **self._context(item))

    def _context(self, item: _Item) -> dict[str, object]:
        found = {
            "event_id": item.attributes.get("event_id"),
            "event_type": item.attributes.get("event_type"),
            "app": item.attributes.get("app"),
            "subscription": self.subscription,
            "delivery_attempt": item.attempt,
            "message_id": item.message.message_id,
        }
        key = getattr(item.event, "ordering_key", "")
        if key:
            found["session"] = key
        return found

    def _conclude(
        self,
        item: _Item,
        outcomes: list[Outcome] | None = None,
        error: Exception | None = None,
    ) -> bool:
        """Ack, nack or dead-letter the message, then write its one log line; or
        hold it for a dependency (False), to be handled again."""
        pending = Pending(item.message, item.attributes, item.attempt, item.event)
        outcome, reason = self.settler.settle(pending, outcomes or [], error)
        if outcome == HELD:
            end_span(item.span, HELD, reason)
            log.debug(
                "message held", dependency=pending.dependency, error=reason, **self._context(item)
            )
            return False
        seconds = time.perf_counter() - item.started
        MESSAGES.labels(self.subscription, outcome).inc()
        self._duration.observe(seconds)
        end_span(item.span, outcome, reason if outcome in ("retried", "dead_lettered") else "")
        fields: dict[str, object] = {"outcome": outcome, "duration_ms": round(seconds * 1000, 3)}
        if reason:
            fields["error"] = reason
        fields.update(self._context(item))
        if outcome in ("acked", "duplicate", "dropped", "skipped"):
            log.info("message handled", **fields)
        else:
            log.warning("message handled", **fields)
        return True
