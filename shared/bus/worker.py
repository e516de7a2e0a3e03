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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

import structlog
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber.message import Message
from google.cloud.pubsub_v1.subscriber.scheduler import ThreadScheduler
from google.cloud.pubsub_v1.types import FlowControl

from shared.bus.publisher import EventPublisher
from shared.bus.topology import dead_letter_name, full_name
from shared.bus.unary_pull import PREFETCH_FACTOR, PulledMessage, UnaryPullDelivery
from shared.config import Settings
from shared.errors import PermanentError, is_permanent
from shared.events import Event, Limits, decode

log = structlog.get_logger("agent_memory.worker")

# Attributes a dead-lettering step adds; replay removes them again.
DEAD_LETTER_REASON = "dead_letter_reason"
DEAD_LETTER_SUBSCRIPTION = "dead_letter_subscription"
DEAD_LETTER_ATTEMPT = "dead_letter_delivery_attempt"
DEAD_LETTER_ORDERING_KEY = "dead_letter_ordering_key"
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
HandlerTable = Mapping[type, Sequence[Handler]]


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
        self.subscriber = subscriber or pubsub_v1.SubscriberClient()
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

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> None:
        threads = f"handler-{self.subscription}"
        if self.mode == "unary":
            self._unary = UnaryPullDelivery(
                self.subscriber,
                self.subscription_path,
                self._on_message,
                self.concurrency,
                self.settings.lease_extension_seconds,
                threads,
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

    # -- one message -----------------------------------------------------------
    def _on_message(self, message: Message | PulledMessage) -> None:
        started = time.perf_counter()
        attempt = message.delivery_attempt or 1
        attributes = dict(message.attributes)
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(
            event_id=attributes.get("event_id"),
            event_type=attributes.get("event_type"),
            app=attributes.get("app"),
            subscription=self.subscription,
            delivery_attempt=attempt,
            message_id=message.message_id,
        )
        outcome, error = self._handle(message, attributes, attempt)
        fields = {
            "outcome": outcome,
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        }
        if error:
            fields["error"] = error
        if outcome in ("acked", "duplicate", "dropped"):
            log.info("message handled", **fields)
        else:
            log.warning("message handled", **fields)
        structlog.contextvars.clear_contextvars()

    def _handle(
        self, message: Message, attributes: dict[str, str], attempt: int
    ) -> tuple[str, str]:
        try:
            event = decode(message.data, attributes, self.limits)
            handlers = self.handlers.get(type(event))
            if not handlers:
                raise PermanentError(f"no handler for {event.EVENT_TYPE} on {self.subscription}")
            if "session" not in structlog.contextvars.get_contextvars():
                key = getattr(event, "ordering_key", "")
                if key:
                    structlog.contextvars.bind_contextvars(session=key)
            delivery = Delivery(
                self.subscription,
                message.message_id,
                attempt,
                message.publish_time,
                message.ordering_key,
                attributes,
            )
            outcomes = [handler(event, delivery) or Outcome.APPLIED for handler in handlers]
        except Exception as exc:
            if is_permanent(exc):
                return self._dead_letter(message, attributes, attempt, str(exc))
            reason = f"{type(exc).__name__}: {exc}"
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
            message.nack()
            return "retried", f"dead-letter publish failed ({exc!r}); reason was: {reason}"
        message.ack()
        return "dead_lettered", reason
