"""What a worker's handlers promise the runtime, and what the runtime tells them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from shared.events import Event


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


# A handler's one result per event; an error it raises is the event's (settled
# by `settling`: retried, held for a dependency or dead-lettered).
Handler = Callable[[Event, Delivery], Outcome]


@dataclass(frozen=True)
class Continue:
    """A batch handler's result for an event that needs its second phase: the
    runtime runs the table entry's `then` with `value` on a handler thread."""

    value: Any = None


BatchResult = Outcome | Exception | Continue


@dataclass(frozen=True, eq=False)
class BatchHandler:
    """Takes every event of its type from one pull in one call, so that their
    common first step costs one round trip (the summary worker appends a whole
    pull to Valkey in one pipeline). `first` returns, for each (event, delivery)
    in order, the event's outcome, the exception it failed with (settled like a
    handler's error), or `Continue` when the event needs `then`, its slow second
    phase, which the runtime runs on a handler thread with the continuation's
    value. With streaming pull each call of `first` holds one event."""

    first: Callable[[Sequence[tuple[Event, Delivery]]], Sequence[BatchResult]]
    then: Callable[[Event, Delivery, Any], Outcome] | None = None


HandlerTable = Mapping[type, Sequence[Handler] | BatchHandler]


@dataclass(frozen=True)
class DeadLetter:
    """A message the runtime is about to dead-letter, for a subscription's hook."""

    subscription: str
    event: Event | None  # None when the message could not be decoded
    data: bytes
    attributes: Mapping[str, str]
    reason: str


# Runs before a message goes to the dead letters, so that what waits on it can be
# told (a generate operation becomes done with the reason). A dependency error
# holds the message like a handler's; any other error is logged and ignored.
DeadLetterHook = Callable[[DeadLetter], None]
