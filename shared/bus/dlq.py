"""Dead letters: count, inspect and replay (`agent-memory dlq list|show|replay`).

Reading is done with synchronous pulls on the dead-letter subscription, whose
ack deadline is the maximum (600 s), so what one command has read stays with
it until it acknowledges (replayed) or nacks (shown, skipped, failed) it.
A message is acknowledged in the dead-letter subscription only after its
re-publish to the original topic is confirmed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1

from shared.bus.clients import subscriber_client
from shared.bus.publisher import EventPublisher, publishable
from shared.bus.topology import (
    SUBSCRIPTIONS,
    SubscriptionSpec,
    dead_letter_name,
    full_name,
    subscription_spec,
)
from shared.bus.unary_pull import ack_id_chunks
from shared.bus.worker import (
    DEAD_LETTER_ATTEMPT,
    DEAD_LETTER_ORDERING_KEY,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SUBSCRIPTION,
)
from shared.config import Settings
from shared.errors import InvalidEvent
from shared.events import decode

PULL_BATCH = 100
COUNT_CAP = 10_000
PULL_TIMEOUT_SECONDS = 3.0
_PUBSUB_PREFIX = "CloudPubSubDeadLetterSource"
_OUR_ATTRIBUTES = {
    DEAD_LETTER_REASON,
    DEAD_LETTER_SUBSCRIPTION,
    DEAD_LETTER_ATTEMPT,
    DEAD_LETTER_ORDERING_KEY,
}


def parse_age(text: str) -> timedelta:
    """`90s`, `15m`, `2h`, `7d`, `1w` (a bare number is seconds)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not match:
        raise ValueError(f"{text!r} is not a duration such as 90s, 15m, 2h, 7d")
    unit = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[match.group(2)]
    return timedelta(seconds=float(match.group(1)) * unit)


@dataclass
class DeadLetter:
    ack_id: str
    message_id: str
    data: bytes
    attributes: dict[str, str]
    dead_lettered_at: datetime

    @property
    def event_id(self) -> str:
        return self.attributes.get("event_id", "")

    @property
    def event_type(self) -> str:
        return self.attributes.get("event_type", "")

    @property
    def app(self) -> str:
        return self.attributes.get("app", "")

    @property
    def attempts(self) -> int:
        raw = self.attributes.get(DEAD_LETTER_ATTEMPT) or self.attributes.get(
            f"{_PUBSUB_PREFIX}DeliveryCount", "0"
        )
        return int(raw) if raw.isdigit() else 0

    @property
    def reason(self) -> str:
        if DEAD_LETTER_REASON in self.attributes:
            return self.attributes[DEAD_LETTER_REASON]
        if f"{_PUBSUB_PREFIX}DeliveryCount" in self.attributes:
            return "Pub/Sub: maximum delivery attempts reached"
        return "unknown"

    def age(self, now: datetime | None = None) -> timedelta:
        return (now or datetime.now(UTC)) - self.dead_lettered_at

    def original_attributes(self) -> dict[str, str]:
        """The attributes the message had before it was dead-lettered."""
        return {
            k: v
            for k, v in publishable(self.attributes).items()
            if k not in _OUR_ATTRIBUTES and not k.startswith(_PUBSUB_PREFIX)
        }

    def ordering_key(self) -> str:
        """The original ordering key: recorded when we dead-lettered it, else from the event."""
        if DEAD_LETTER_ORDERING_KEY in self.attributes:
            return self.attributes[DEAD_LETTER_ORDERING_KEY]
        try:
            return decode(self.data, self.original_attributes()).ordering_key
        except InvalidEvent:
            return ""


@dataclass(frozen=True)
class ReplayFilter:
    event_type: str | None = None
    app: str | None = None
    older_than: timedelta | None = None
    newer_than: timedelta | None = None

    def matches(self, letter: DeadLetter, now: datetime) -> bool:
        if self.event_type and letter.event_type != self.event_type:
            return False
        if self.app and letter.app != self.app:
            return False
        if self.older_than is not None and letter.age(now) < self.older_than:
            return False
        return not (self.newer_than is not None and letter.age(now) > self.newer_than)


@dataclass
class ReplayResult:
    replayed: int = 0
    skipped: int = 0
    failed: int = 0

    def summary(self, dry_run: bool = False) -> str:
        verb = "would replay" if dry_run else "replayed"
        return f"{verb} {self.replayed}, skipped {self.skipped}, failed {self.failed}"


class DeadLetterQueues:
    """Operations on the dead-letter subscriptions of one project and prefix."""

    def __init__(
        self,
        settings: Settings,
        subscriber: pubsub_v1.SubscriberClient | None = None,
        publisher: EventPublisher | None = None,
    ) -> None:
        self.settings = settings
        self.subscriber = subscriber or subscriber_client()
        self._publisher = publisher

    @property
    def publisher(self) -> EventPublisher:
        if self._publisher is None:
            self._publisher = EventPublisher(self.settings)
        return self._publisher

    def close(self) -> None:
        """Flush and stop the publisher, if a replay created one."""
        if self._publisher is not None:
            self._publisher.stop()
            self._publisher = None

    def dead_letter_path(self, spec: SubscriptionSpec) -> str:
        return self.subscriber.subscription_path(
            self.settings.google_cloud_project,
            full_name(self.settings.topic_prefix, dead_letter_name(spec.name)),
        )

    def spec(self, name: str) -> SubscriptionSpec:
        return subscription_spec(name, self.settings.topic_prefix)

    # -- reading ---------------------------------------------------------------
    def _batches(self, path: str, limit: int | None) -> Iterator[list[DeadLetter]]:
        """Yield batches of unread messages until the subscription has none left (or `limit`)."""
        seen: set[str] = set()
        while limit is None or len(seen) < limit:
            want = PULL_BATCH if limit is None else min(PULL_BATCH, limit - len(seen))
            try:
                response = self.subscriber.pull(
                    request={"subscription": path, "max_messages": want},
                    timeout=PULL_TIMEOUT_SECONDS,
                )
            except (gexc.DeadlineExceeded, gexc.RetryError):
                return
            fresh = [r for r in response.received_messages if r.message.message_id not in seen]
            if not fresh:
                return
            batch = []
            for received in fresh:
                seen.add(received.message.message_id)
                message = received.message
                batch.append(
                    DeadLetter(
                        ack_id=received.ack_id,
                        message_id=message.message_id,
                        data=bytes(message.data),
                        attributes=dict(message.attributes),
                        dead_lettered_at=message.publish_time,
                    )
                )
            yield batch

    def _release(self, path: str, letters: list[DeadLetter]) -> None:
        """Hand messages back to the subscription unacknowledged."""
        for chunk in ack_id_chunks([letter.ack_id for letter in letters]):
            self.subscriber.modify_ack_deadline(
                request={"subscription": path, "ack_ids": chunk, "ack_deadline_seconds": 0}
            )

    def _read_and_release(self, path: str, limit: int | None) -> list[DeadLetter]:
        letters: list[DeadLetter] = []
        try:
            for batch in self._batches(path, limit):
                letters.extend(batch)
        finally:
            self._release(path, letters)
        return letters

    def peek(self, name: str, limit: int | None = None) -> list[DeadLetter]:
        """Read messages without consuming them."""
        return self._read_and_release(self.dead_letter_path(self.spec(name)), limit)

    def counts(self) -> list[tuple[SubscriptionSpec, str, int]]:
        """Per subscription: its dead-letter subscription and how many messages wait
        there (read, then handed back; at most COUNT_CAP are counted)."""
        found = []
        for spec in SUBSCRIPTIONS:
            path = self.dead_letter_path(spec)
            found.append((spec, path, len(self._read_and_release(path, COUNT_CAP))))
        return found

    # -- replay ------------------------------------------------------------------
    def replay(
        self,
        name: str,
        flt: ReplayFilter | None = None,
        limit: int | None = None,
        dry_run: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> ReplayResult:
        """Re-publish matching dead letters to their original topic, then ack each one."""
        spec = self.spec(name)
        run = _ReplayRun(
            queues=self,
            path=self.dead_letter_path(spec),
            topic_path=self.publisher.topic_path(spec.topic),
            flt=flt or ReplayFilter(),
            dry_run=dry_run,
            say=progress or (lambda _line: None),
        )
        try:
            for batch in self._batches(run.path, None):
                for letter in batch:
                    if limit is not None and run.result.replayed >= limit:
                        run.held.append(letter)  # read but not considered: handed back untouched
                    else:
                        run.consider(letter)
                if limit is not None and run.result.replayed >= limit:
                    break
        finally:
            self._release(run.path, run.held)
        return run.result


@dataclass
class _ReplayRun:
    """One `dlq replay`: what it has decided so far and what it must hand back."""

    queues: DeadLetterQueues
    path: str
    topic_path: str
    flt: ReplayFilter
    dry_run: bool
    say: Callable[[str], None]
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    result: ReplayResult = field(default_factory=ReplayResult)
    held: list[DeadLetter] = field(default_factory=list)

    def consider(self, letter: DeadLetter) -> None:
        if not self.flt.matches(letter, self.now):
            self.result.skipped += 1
            self.held.append(letter)
            return
        label = f"{letter.event_id or letter.message_id} ({letter.event_type or '?'})"
        topic = self.topic_path.rsplit("/", 1)[1]
        if self.dry_run:
            self.result.replayed += 1
            self.held.append(letter)
            self.say(f"would replay {label} to {topic}")
            return
        try:
            self.queues.publisher.publish_raw(
                self.topic_path, letter.data, letter.original_attributes(), letter.ordering_key()
            ).result(timeout=self.queues.settings.publish_timeout_seconds)
        except Exception as exc:
            self.result.failed += 1
            self.held.append(letter)
            self.say(f"failed {label}: {exc!r}")
            return
        # Only now, with the publish confirmed, may the dead letter go.
        try:
            self.queues.subscriber.acknowledge(
                request={"subscription": self.path, "ack_ids": [letter.ack_id]}
            )
        except gexc.GoogleAPICallError as exc:
            # Replayed, but still in the dead letters, leased to this run: it becomes
            # visible again when that lease ends, and a later replay then sends it
            # again, which the consumers' ledgers make harmless.
            self.result.failed += 1
            self.say(f"republished {label} but could not acknowledge it: {exc!r}")
            return
        self.result.replayed += 1
        self.say(f"replayed {label} to {topic}")
