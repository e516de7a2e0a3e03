"""What becomes of a message once its handler is done, decided and done in one
place: acknowledged, held for a dependency, nacked for a retry after a backoff,
dead-lettered with its reason, or handed back when the worker stops. Every
message ends here with its one log line.

- A `PermanentError` (the event can never succeed) is dead-lettered at once.
- An error that says a dependency is down (`shared.errors.dependency_of`) is not
  the event's fault: the message is held, neither acknowledged nor nacked, and
  the runtime runs it again once the dependency answers. If it keeps failing on
  a dependency whose probe says it is up, the event is the likelier cause: after
  `SETBACKS_ALLOWED` such failures it is treated as the event's error. Not so a
  provider's quota (the model's or the embeddings' retries ended on 429): a quota
  says nothing about the event, and a probe may pass while it lasts, so such a
  message is held however often it comes back.
- Any other error is the event's: on the last allowed attempt the runtime
  dead-letters it itself (on the emulator an ordered subscription drops a message
  that exhausts its attempts instead of forwarding it); before that it is nacked
  with the subscription's retry backoff as its delay, so that
  `AM_MAX_DELIVERY_ATTEMPTS` means the same on Pub/Sub and on the emulator.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import structlog

from shared.bus.attributes import REPLAYED_FOR, dead_letter_attributes
from shared.bus.contract import (
    HANDLER_OUTCOMES,
    DeadLetterHook,
    DeadLetterNotice,
    Delivery,
    Outcome,
)
from shared.bus.dependencies import Dependencies
from shared.bus.message import Message
from shared.bus.publisher import EventPublisher
from shared.config import Settings
from shared.embeddings.base import EmbeddingRateLimited
from shared.errors import DependencyError, dependency_of, is_permanent
from shared.events import Event
from shared.llm.base import LLMRateLimited
from shared.metrics import (
    DEAD_LETTER_PUBLISHES,
    HANDLER_SECONDS,
    MESSAGES,
    count_store_error,
)
from shared.tracing import end_span

log = structlog.get_logger("agent_memory.worker")

SETBACKS_ALLOWED = 3
_MAX_TRACKED = 10_000  # message ids whose setbacks are remembered


@dataclass
class Pending:
    """One message on its way through the runtime, with what is known of it."""

    message: Message
    attributes: dict[str, str]  # the message's, copied once
    attempt: int
    started: float
    event: Event | None = None
    span: Any = None  # its tracing span (None when tracing is off)
    dependency: str = ""  # what it is held for
    settled: bool = False

    @classmethod
    def of(cls, message: Message) -> Pending:
        return cls(
            message, dict(message.attributes), message.delivery_attempt or 1, time.perf_counter()
        )

    @property
    def decoded(self) -> Event:
        """Its event, once the dispatcher has decoded it (handlers run only then)."""
        if self.event is None:
            raise RuntimeError(f"message {self.message.message_id} was not decoded")
        return self.event

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

    def context(self, subscription: str) -> dict[str, object]:
        """The fields of its log lines."""
        attributes = self.attributes
        found: dict[str, object] = {
            "event_id": attributes.get("event_id"),
            "event_type": attributes.get("event_type"),
            "app": attributes.get("app"),
            "subscription": subscription,
            "delivery_attempt": self.attempt,
            "message_id": self.message.message_id,
        }
        key = getattr(self.event, "ordering_key", "")
        if key:
            found["session"] = key
        return found


def retry_backoff(settings: Settings, attempt: int) -> float:
    """The subscription's retry policy: exponential from the minimum to the maximum."""
    low, high = settings.retry_min_backoff_seconds, settings.retry_max_backoff_seconds
    return min(max(low, high), low * 2 ** (attempt - 1))


class Settler:
    """Settles the messages of one subscription."""

    def __init__(
        self,
        settings: Settings,
        subscription: str,
        publisher: EventPublisher,
        dead_letter_topic: str,
        dependencies: Dependencies,
        on_dead_letter: DeadLetterHook | None = None,
    ) -> None:
        self.settings = settings
        self.subscription = subscription
        self.publisher = publisher
        self.dead_letter_topic = dead_letter_topic
        self.dependencies = dependencies
        self.on_dead_letter = on_dead_letter
        self._setbacks: dict[str, int] = {}
        self._lock = threading.Lock()
        self._duration = HANDLER_SECONDS.labels(subscription)

    def settle(
        self, pending: Pending, outcome: object = None, error: Exception | None = None
    ) -> Outcome:
        """Settle `pending` after its handler returned `outcome` (anything but a
        handler's Outcome is the event's error) or raised `error`; what became of it
        (HELD: not settled, it runs again once its dependency answers)."""
        if pending.settled:  # never twice: a second ack or nack would release its key again
            log.error("settled twice", **pending.context(self.subscription))
            return Outcome.RETRIED
        pending.settled = True
        if error is None and isinstance(outcome, Outcome) and outcome in HANDLER_OUTCOMES:
            pending.message.ack()
            self._forget(pending.message.message_id)
            return self._record(pending, outcome, _why(outcome, pending))
        if error is None:
            error = TypeError(f"a handler returned {type(outcome).__name__}, not an Outcome")
        settled, reason = self._after(pending, error)
        if settled is Outcome.HELD:
            pending.settled = False
            end_span(pending.span, Outcome.HELD, reason)
            log.debug(
                "message held",
                dependency=pending.dependency,
                error=reason,
                **pending.context(self.subscription),
            )
            return settled
        return self._record(pending, settled, reason)

    def hand_back(self, pending: Pending, reason: str) -> None:
        """Nack `pending` at once without handling it (the worker is stopping)."""
        if pending.settled:
            return
        pending.settled = True
        pending.message.nack()
        self._record(pending, Outcome.RETRIED, reason, handled=False)

    def _after(self, pending: Pending, error: Exception) -> tuple[Outcome, str]:
        """Hold, nack or dead-letter after `error`; the outcome and its reason."""
        count_store_error(error)
        if is_permanent(error):
            return self._dead_letter(pending, str(error))
        reason = f"{type(error).__name__}: {error}"
        message_id = pending.message.message_id
        dependency = dependency_of(error)
        if dependency and (_rate_limited(error) or self._hold(message_id, dependency)):
            pending.dependency = dependency
            self.dependencies.report(dependency, error)
            return Outcome.HELD, reason
        if dependency:
            reason = (
                f"failed on {dependency} {SETBACKS_ALLOWED + 1} times although it answered "
                f"its probe; {reason}"
            )
        if pending.attempt >= self.settings.max_delivery_attempts:
            return self._dead_letter(
                pending, f"failed {pending.attempt} attempts; last error {reason}"
            )
        pending.message.nack(retry_backoff(self.settings, pending.attempt))
        return Outcome.RETRIED, reason

    def _hold(self, message_id: str, dependency: str) -> bool:
        """Hold the message for `dependency`, unless it has failed on it too often
        right after it came back (only a probed dependency can say so)."""
        if not self.dependencies.has_probe(dependency):
            return True
        with self._lock:
            if len(self._setbacks) >= _MAX_TRACKED:
                self._setbacks.clear()
            # The first failure is the outage beginning; later ones follow a probe
            # that found the dependency up.
            count = self._setbacks.get(message_id, -1) + 1
            self._setbacks[message_id] = count
        return count <= SETBACKS_ALLOWED

    def _forget(self, message_id: str) -> None:
        with self._lock:
            self._setbacks.pop(message_id, None)

    def _dead_letter(self, pending: Pending, reason: str) -> tuple[Outcome, str]:
        """Publish the message unchanged to the dead-letter topic with its reason, then ack.

        If the dead-letter publish is not confirmed the message is nacked instead,
        so it is never lost between the two topics."""
        message, attributes = pending.message, pending.attributes
        if self.on_dead_letter is not None:
            notice = DeadLetterNotice(
                self.subscription, pending.event, message.data, attributes, reason
            )
            try:
                self.on_dead_letter(notice)
            except Exception as exc:
                dependency = dependency_of(exc)
                if dependency:  # told nobody yet: hold it, like a handler's failure
                    pending.dependency = dependency
                    self.dependencies.report(dependency, exc)
                    return Outcome.HELD, f"dead-letter hook: {type(exc).__name__}: {exc}"
                log.error("dead-letter hook failed", error=repr(exc), reason=reason)
        dead = dead_letter_attributes(
            attributes, reason, self.subscription, pending.attempt, message.ordering_key
        )
        try:
            self.publisher.publish_raw(self.dead_letter_topic, message.data, dead).result(
                timeout=self.settings.publish_timeout_seconds
            )
        except Exception as exc:
            DEAD_LETTER_PUBLISHES.labels(self.subscription, "failed").inc()
            message.nack(retry_backoff(self.settings, pending.attempt))  # not at once, in a loop
            return Outcome.RETRIED, f"dead-letter publish failed ({exc!r}); reason was: {reason}"
        DEAD_LETTER_PUBLISHES.labels(self.subscription, "ok").inc()
        message.ack()
        self._forget(message.message_id)
        return Outcome.DEAD_LETTERED, reason

    def _record(
        self, pending: Pending, outcome: Outcome, reason: str, *, handled: bool = True
    ) -> Outcome:
        """The settled message's metrics, span and one log line (a message handed
        back unhandled has no handler time)."""
        seconds = time.perf_counter() - pending.started
        MESSAGES.labels(self.subscription, outcome).inc()
        if handled:
            self._duration.observe(seconds)
        failed = outcome in (Outcome.RETRIED, Outcome.DEAD_LETTERED)
        end_span(pending.span, outcome, reason if failed else "")
        fields: dict[str, object] = {"outcome": outcome, "duration_ms": round(seconds * 1000, 3)}
        if reason:
            fields["error"] = reason
        fields.update(pending.context(self.subscription))
        (log.warning if failed else log.info)("message handled", **fields)
        return outcome


def _why(outcome: Outcome, pending: Pending) -> str:
    if outcome is Outcome.DROPPED:
        return "the user was deleted after this event was created"
    if outcome is Outcome.SKIPPED:
        return f"a replay for {pending.attributes.get(REPLAYED_FOR)}"
    return ""


def _rate_limited(error: BaseException | None) -> bool:
    """Is the dependency error in `error`'s chain a provider's quota?"""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, (LLMRateLimited, EmbeddingRateLimited)):
            return True
        if isinstance(error, DependencyError):
            return False
        error = error.__cause__ or error.__context__
        seen += 1
    return False
