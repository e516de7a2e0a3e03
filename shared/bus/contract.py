"""What a worker's handlers promise the runtime, and what the runtime tells them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from shared.events import Event


class Outcome(StrEnum):
    """What became of a message. A handler returns one of the first four; the
    runtime settles with the others. The value is the `outcome` of the message's
    log line and of `agent_memory_messages_total`."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"  # already applied earlier: nothing changed
    # The event's user was deleted (GDPR) after the event was created: nothing applied.
    DROPPED = "dropped"
    # A replay meant for another subscription of the topic: acknowledged, not handled.
    SKIPPED = "skipped"
    RETRIED = "retried"  # nacked (after its backoff): Pub/Sub delivers it again
    DEAD_LETTERED = "dead_lettered"
    HELD = "held"  # kept, leased, until a dependency answers: not settled yet


# What a handler may return; each of them acknowledges the message.
HANDLER_OUTCOMES = frozenset({Outcome.APPLIED, Outcome.DUPLICATE, Outcome.DROPPED, Outcome.SKIPPED})
# Outcomes that end a message's life on its subscription.
SETTLED = HANDLER_OUTCOMES | {Outcome.DEAD_LETTERED}


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
    runtime runs the handler's `then` with `value` on a handler thread of its own."""

    value: Any = None


BatchResult = Outcome | Exception | Continue


@dataclass(frozen=True, eq=False)
class BatchHandler:
    """Takes the events waiting for a handler together, in one call, so that their
    common first step costs one round trip (the summary worker appends them to
    Valkey in one pipeline). `first` returns, for each (event, delivery) in order,
    the event's outcome, the exception it failed with (settled like a handler's
    error), or `Continue` when the event needs `then`, its slow second phase, which
    the runtime runs on another handler thread with the continuation's value."""

    first: Callable[[Sequence[tuple[Event, Delivery]]], Sequence[BatchResult]]
    then: Callable[[Event, Delivery, Any], Outcome] | None = None


# The handler of each event type a subscription carries. A table is either all
# batch handlers or none: a batch takes every waiting message onto one thread.
HandlerTable = Mapping[type, Handler | BatchHandler]


@dataclass(frozen=True)
class DeadLetterNotice:
    """A message the runtime is about to dead-letter, for a subscription's hook."""

    subscription: str
    event: Event | None  # None when the message could not be decoded
    data: bytes
    attributes: Mapping[str, str]
    reason: str


# Runs before a message goes to the dead letters, so that what waits on it can be
# told (a generate operation becomes done with the reason). A dependency error
# holds the message like a handler's; any other error is logged and ignored.
DeadLetterHook = Callable[[DeadLetterNotice], None]
