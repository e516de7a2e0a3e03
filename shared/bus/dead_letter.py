"""A dead letter as the `dlq` commands and replay read it: the message, and what
its attributes say about how it got there (the reason, the attempts), whether a
worker dead-lettered it (`shared.bus.attributes`) or Pub/Sub did after its
maximum delivery attempts; and the message as first published, for a replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shared.bus.attributes import (
    DEAD_LETTER_ATTEMPT,
    DEAD_LETTER_ORDERING_KEY,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SUBSCRIPTION,
    REPLAY_RUN,
    REPLAYED_FOR,
)
from shared.bus.publisher import publishable
from shared.errors import InvalidEvent
from shared.events import decode

# Pub/Sub's own attributes on a message it dead-lettered.
_PUBSUB_PREFIX = "CloudPubSubDeadLetterSource"
# Added on the way into the dead letters or by a replay: never part of the original.
_ADDED_ATTRIBUTES = {
    DEAD_LETTER_REASON,
    DEAD_LETTER_SUBSCRIPTION,
    DEAD_LETTER_ATTEMPT,
    DEAD_LETTER_ORDERING_KEY,
    REPLAYED_FOR,
    REPLAY_RUN,
}


@dataclass
class DeadLetter:
    """One message read from a dead-letter subscription."""

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
    def label(self) -> str:
        return f"{self.event_id or self.message_id} ({self.event_type or '?'})"

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

    def line(self) -> str:
        """One line for `dlq show` and `dlq purge`."""
        return (
            f"{self.event_id or self.message_id}  {self.event_type or '?'}  "
            f"app={self.app or '?'}  attempts={self.attempts}  "
            f"age={int(self.age().total_seconds())}s  reason={self.reason}"
        )

    def original_attributes(self) -> dict[str, str]:
        """The attributes the message had when it was first published."""
        return {
            k: v
            for k, v in publishable(self.attributes).items()
            if k not in _ADDED_ATTRIBUTES and not k.startswith(_PUBSUB_PREFIX)
        }

    def ordering_key(self) -> str:
        """The original ordering key: recorded when we dead-lettered it, else from the event."""
        if DEAD_LETTER_ORDERING_KEY in self.attributes:
            return self.attributes[DEAD_LETTER_ORDERING_KEY]
        try:
            return decode(self.data, self.original_attributes()).ordering_key
        except InvalidEvent:
            return ""
