"""What becomes of a message once its handlers are done: acknowledged, held for a
dependency, retried after a backoff, or dead-lettered with its reason.

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
  after the subscription's retry backoff. Pub/Sub waits that backoff itself; the
  emulator redelivers a nacked message at once, so there the worker holds the
  message for the backoff before it nacks, and `AM_MAX_DELIVERY_ATTEMPTS` means
  the same on both.
"""

from __future__ import annotations

import heapq
import threading
import time
from dataclasses import dataclass
from typing import Any

import structlog

from shared.bus.attributes import REPLAYED_FOR, dead_letter_attributes
from shared.bus.contract import DeadLetter, DeadLetterHook, Outcome
from shared.bus.dependencies import Dependencies
from shared.bus.publisher import EventPublisher
from shared.bus.unary_pull import PulledMessage
from shared.config import Settings
from shared.embeddings.base import EmbeddingRateLimited
from shared.errors import DependencyError, dependency_of, is_permanent
from shared.events import Event
from shared.llm.base import LLMRateLimited
from shared.metrics import DEAD_LETTER_PUBLISHES, count_store_error

log = structlog.get_logger("agent_memory.worker")

HELD = "held"  # the outcome of a message kept for a dependency: not settled
SETBACKS_ALLOWED = 3
_MAX_TRACKED = 10_000  # message ids whose setbacks are remembered


@dataclass
class Pending:
    """One message being settled, with what the runtime knows of it."""

    message: Any  # a streaming `Message` or a `PulledMessage`
    attributes: dict[str, str]
    attempt: int
    event: Event | None
    dependency: str = ""  # set when the outcome is HELD


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
        # Pub/Sub honours the retry policy; the emulator does not.
        self.delayed = DelayedNacks() if settings.pubsub_emulator_host else None
        self._setbacks: dict[str, int] = {}
        self._lock = threading.Lock()

    def settle(
        self, pending: Pending, outcomes: list[Outcome], error: Exception | None
    ) -> tuple[str, str]:
        """Ack, hold, nack or dead-letter; the outcome and its reason."""
        message, attempt = pending.message, pending.attempt
        if error is None:
            message.ack()
            self._forget(message.message_id)
            return _acked(outcomes, pending.attributes)
        count_store_error(error)
        if is_permanent(error):
            return self._dead_letter(pending, str(error))
        reason = f"{type(error).__name__}: {error}"
        dependency = dependency_of(error)
        if dependency and (_rate_limited(error) or self._hold(message.message_id, dependency)):
            pending.dependency = dependency
            self.dependencies.report(dependency, error)
            return HELD, reason
        if dependency:
            reason = (
                f"failed on {dependency} {SETBACKS_ALLOWED + 1} times although it answered "
                f"its probe; {reason}"
            )
        if attempt >= self.settings.max_delivery_attempts:
            return self._dead_letter(pending, f"failed {attempt} attempts; last error {reason}")
        self._retry_later(message, attempt)
        return "retried", reason

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

    def _retry_later(self, message: Any, attempt: int) -> None:
        delay = retry_backoff(self.settings, attempt)
        if self.delayed is None or delay <= 0:
            message.nack()
            return
        if isinstance(message, PulledMessage):
            message.defer()  # settled by the delayed nack, not by the pull's thread
        self.delayed.add(message, delay)

    def _dead_letter(self, pending: Pending, reason: str) -> tuple[str, str]:
        """Publish the message unchanged to the dead-letter topic with its reason, then ack.

        If the dead-letter publish is not confirmed the message is nacked instead,
        so it is never lost between the two topics."""
        message = pending.message
        if self.on_dead_letter is not None:
            letter = DeadLetter(
                self.subscription, pending.event, message.data, pending.attributes, reason
            )
            try:
                self.on_dead_letter(letter)
            except Exception as exc:
                dependency = dependency_of(exc)
                if dependency:  # told nobody yet: hold it, like a handler's failure
                    pending.dependency = dependency
                    self.dependencies.report(dependency, exc)
                    return HELD, f"dead-letter hook: {type(exc).__name__}: {exc}"
                log.error("dead-letter hook failed", error=repr(exc), reason=reason)
        dead = dead_letter_attributes(
            pending.attributes, reason, self.subscription, pending.attempt, message.ordering_key
        )
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
        self._forget(message.message_id)
        return "dead_lettered", reason

    def flush(self) -> None:
        """Nack at once what waits for its backoff (the worker is stopping)."""
        if self.delayed is not None:
            self.delayed.flush()

    def close(self) -> None:
        if self.delayed is not None:
            self.delayed.close()


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


def _acked(outcomes: list[Outcome], attributes: dict[str, str]) -> tuple[str, str]:
    if all(o == Outcome.DUPLICATE for o in outcomes):
        return "duplicate", ""
    if all(o == Outcome.DROPPED for o in outcomes):
        return "dropped", "the user was deleted after this event was created"
    if all(o == Outcome.SKIPPED for o in outcomes):
        return "skipped", f"a replay for {attributes.get(REPLAYED_FOR)}"
    return "acked", ""


class DelayedNacks:
    """Nacks messages once their backoff has passed: one thread, a heap of due times.
    A message waiting here stays leased (its lease is extended as usual)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def add(self, message: Any, delay: float) -> None:
        with self._cond:
            if self._closed:
                message.nack()
                return
            self._count += 1
            heapq.heappush(self._heap, (time.monotonic() + delay, self._count, message))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="nack-later", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._heap)

    def flush(self) -> None:
        with self._cond:
            due, self._heap = self._heap, []
        for _at, _n, message in due:
            message.nack()

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
                _at, _n, message = heapq.heappop(self._heap)
            message.nack()
