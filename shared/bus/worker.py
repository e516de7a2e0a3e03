"""The subscriber runtime every worker uses.

Streaming pull (on Pub/Sub) or unary pull (on the emulator; see `unary_pull`)
with explicit flow control and a thread pool of the same size (sized to the
worker's connection pool). For each message: decode and validate,
run the handlers, and only then acknowledge. A `PermanentError` (a bad message)
is dead-lettered at once; any other error is nacked so Pub/Sub redelivers it
with the subscription's backoff, and on the last allowed attempt the runtime
dead-letters it itself with the error as the reason. (On the emulator an ordered
subscription drops a message that exhausts its attempts instead of forwarding
it, so the runtime never leaves that step to Pub/Sub.) One log line per message.

A `BatchHandler` takes all events of its type from one unary pull in one call
(the summary worker appends them to Valkey in one pipeline instead of one round
trip and one thread hand-off each); every event still gets its own outcome,
ack, retry or dead letter, and slow remainders run on handler threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import partial
from typing import Any

import structlog
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber.message import Message
from google.cloud.pubsub_v1.subscriber.scheduler import ThreadScheduler
from google.cloud.pubsub_v1.types import FlowControl

from shared.bus.clients import subscriber_client
from shared.bus.publisher import EventPublisher
from shared.bus.topology import dead_letter_name, full_name
from shared.bus.unary_pull import PREFETCH_FACTOR, PulledMessage, UnaryPullDelivery
from shared.config import Settings
from shared.errors import PermanentError, is_permanent
from shared.events import Event, Limits, decode
from shared.metrics import (
    DEAD_LETTER_PUBLISHES,
    HANDLER_SECONDS,
    MESSAGES,
    count_store_error,
)
from shared.tracing import current, end_span, start_consumer_span

log = structlog.get_logger("agent_memory.worker")

# Attributes a dead-lettering step adds; replay removes them again.
DEAD_LETTER_REASON = "dead_letter_reason"
DEAD_LETTER_SUBSCRIPTION = "dead_letter_subscription"
DEAD_LETTER_ATTEMPT = "dead_letter_delivery_attempt"
DEAD_LETTER_ORDERING_KEY = "dead_letter_ordering_key"
# Set by `dlq replay`: the one subscription a replayed message is meant for. Every
# other subscription of its topic acknowledges it without handling it (a filter on
# the subscription would do the same on Pub/Sub, but the emulator ignores filters).
REPLAYED_FOR = "replayed_for"
MAX_ATTRIBUTE_BYTES = 1000  # Pub/Sub allows 1024 bytes per attribute value


def truncate_utf8(text: str, max_bytes: int) -> str:
    """At most `max_bytes` of UTF-8, cut on a character boundary."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")


class Outcome(StrEnum):
    """What a handler did with an event."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"  # already applied earlier: nothing changed
    # The event's user was deleted (GDPR) after the event was created: nothing applied.
    DROPPED = "dropped"
    # A replay meant for another subscription of the topic: acknowledged, not handled.
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Delivery:
    """Facts about the message being handled, for handlers that need them."""

    subscription: str
    message_id: str
    delivery_attempt: int
    publish_time: datetime | None
    ordering_key: str = ""
    attributes: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Event, Delivery], Outcome | None]
# The rest of one message's work, run on a handler thread (e.g. a slow LLM step).
Finish = Callable[[], Outcome | None]
BatchResult = Outcome | Exception | Finish


@dataclass(frozen=True, eq=False)
class BatchHandler:
    """Takes every event of its type from one pull in one call, so that their
    common first step costs one round trip (the summary worker appends a whole
    pull to Valkey in one pipeline). For each (event, delivery), in order, it
    returns the outcome, the exception that event failed with (nacked or
    dead-lettered like any handler error), or a `Finish` that completes the event
    on a handler thread. With streaming pull each call holds one event."""

    handle: Callable[[Sequence[tuple[Event, Delivery]]], Sequence[BatchResult]]


HandlerTable = Mapping[type, Sequence[Handler] | BatchHandler]


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
    ) -> None:
        self.settings = settings
        self.subscription = subscription
        self.handlers = handlers
        self.publisher = publisher
        self.subscriber = subscriber or subscriber_client()
        self.concurrency = concurrency
        self.limits = Limits(settings.max_message_bytes, settings.max_tool_events_bytes)
        project = settings.google_cloud_project
        self.subscription_path = self.subscriber.subscription_path(
            project, full_name(settings.topic_prefix, subscription)
        )
        self.dead_letter_topic = publisher.client.topic_path(
            project, full_name(settings.topic_prefix, dead_letter_name(subscription))
        )
        self.mode = resolve_pull_mode(settings)
        self._future: pubsub_v1.subscriber.futures.StreamingPullFuture | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._unary: UnaryPullDelivery | None = None
        self._duration = HANDLER_SECONDS.labels(subscription)

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> None:
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
        if self._unary is not None:
            self._unary.request_stop()
        if self._future is not None:
            self._future.cancel()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop pulling, let in-flight handlers finish for at most `timeout` seconds.

        Messages held but not started are nacked (redelivered elsewhere). Returns
        False if handlers were still running at the deadline; their messages are
        not acknowledged and come back when their lease ends.
        """
        timeout = self.settings.worker_shutdown_seconds if timeout is None else timeout
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

    # -- messages --------------------------------------------------------------
    def _on_message(self, message: Message | PulledMessage) -> None:
        """Streaming pull: one message on a handler thread, every step inline."""
        self._on_messages([message], _inline)

    def _on_pull(self, messages: list[PulledMessage]) -> None:
        """Unary pull. Whole pulls (a table with a `BatchHandler`): events of a
        `BatchHandler` are handled together here, every other message (and every
        `Finish`) on its own thread. Otherwise one message, every step inline."""
        assert self._unary is not None
        self._on_messages(messages, self._unary.run_later if self._unary.whole_pulls else _inline)

    def _on_messages(self, messages: Sequence[Message | PulledMessage], later: Later) -> None:
        started = time.perf_counter()
        batches: dict[BatchHandler, list[_Item]] = {}
        for message in messages:
            item = _Item(message, dict(message.attributes), message.delivery_attempt or 1, started)
            item.span = start_consumer_span(self.subscription, item.attributes)
            meant_for = item.attributes.get(REPLAYED_FOR)
            if meant_for and meant_for != self.subscription:
                self._conclude(item, outcomes=[Outcome.SKIPPED])
                continue
            try:
                item.event = decode(message.data, item.attributes, self.limits)
                entry = self.handlers.get(type(item.event))
                if not entry:
                    raise PermanentError(
                        f"no handler for {item.event.EVENT_TYPE} on {self.subscription}"
                    )
            except Exception as exc:
                self._conclude(item, error=exc)
                continue
            if isinstance(entry, BatchHandler):
                batches.setdefault(entry, []).append(item)
            else:
                work = partial(self._call_all, entry, item)
                later(
                    message,
                    partial(self._run, item, work, timed_from_here=True),
                    partial(self._abandoned, item),
                )
        for handler, items in batches.items():
            events = [(i.event, i.delivery(self.subscription)) for i in items]
            try:
                results = list(handler.handle(events))  # type: ignore[arg-type]
                if len(results) != len(items):
                    raise RuntimeError(f"{len(results)} results for {len(items)} events")
            except Exception as exc:
                results = [exc] * len(items)
            for item, result in zip(items, results, strict=True):
                if isinstance(result, Exception):
                    self._conclude(item, error=result)
                elif result is None or isinstance(result, Outcome):
                    self._conclude(item, outcomes=[result or Outcome.APPLIED])
                elif callable(result):
                    later(
                        item.message,
                        partial(self._run, item, result),
                        partial(self._abandoned, item),
                    )
                else:
                    error = TypeError(f"a batch handler returned {type(result).__name__}")
                    self._conclude(item, error=error)

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
    ) -> None:
        """Run the rest of `item` on this thread, its log context bound for the
        handlers' own log lines."""
        if timed_from_here:
            item.started = time.perf_counter()
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(**self._context(item))
        try:
            with current(item.span):
                done = work()
        except Exception as exc:
            self._conclude(item, error=exc)
        else:
            outcomes = done if isinstance(done, list) else [done or Outcome.APPLIED]
            self._conclude(item, outcomes=outcomes)
        finally:
            structlog.contextvars.clear_contextvars()

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
    ) -> None:
        """Ack, nack or dead-letter the message, then write its one log line."""
        outcome, reason = self._settle(item, outcomes or [], error)
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

    def _settle(
        self, item: _Item, outcomes: list[Outcome], error: Exception | None
    ) -> tuple[str, str]:
        message, attributes, attempt = item.message, item.attributes, item.attempt
        if error is not None:
            count_store_error(error)
            if is_permanent(error):
                return self._dead_letter(message, attributes, attempt, str(error))
            reason = f"{type(error).__name__}: {error}"
            if attempt >= self.settings.max_delivery_attempts:
                return self._dead_letter(
                    message, attributes, attempt, f"failed {attempt} attempts; last error {reason}"
                )
            message.nack()
            return "retried", reason
        message.ack()
        if all(o == Outcome.DUPLICATE for o in outcomes):
            return "duplicate", ""
        if all(o == Outcome.DROPPED for o in outcomes):
            return "dropped", "the user was deleted after this event was created"
        if all(o == Outcome.SKIPPED for o in outcomes):
            return "skipped", f"a replay for {attributes.get(REPLAYED_FOR)}"
        return "acked", ""

    def _dead_letter(
        self,
        message: Message | PulledMessage,
        attributes: dict[str, str],
        attempt: int,
        reason: str,
    ) -> tuple[str, str]:
        """Publish the message unchanged to the dead-letter topic with its reason, then ack.

        If the dead-letter publish is not confirmed the message is nacked instead,
        so it is never lost between the two topics.
        """
        dead = dict(attributes)
        dead[DEAD_LETTER_REASON] = truncate_utf8(reason, MAX_ATTRIBUTE_BYTES)
        dead[DEAD_LETTER_SUBSCRIPTION] = self.subscription
        dead[DEAD_LETTER_ATTEMPT] = str(attempt)
        if message.ordering_key:
            dead[DEAD_LETTER_ORDERING_KEY] = message.ordering_key
        try:
            self.publisher.publish_raw(self.dead_letter_topic, message.data, dead).result(
                timeout=self.settings.publish_timeout_seconds
            )
        except Exception as exc:
            DEAD_LETTER_PUBLISHES.labels(self.subscription, "failed").inc()
            message.nack()
            return "retried", f"dead-letter publish failed ({exc!r}); reason was: {reason}"
        DEAD_LETTER_PUBLISHES.labels(self.subscription, "ok").inc()
        message.ack()
        return "dead_lettered", reason
