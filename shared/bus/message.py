"""A message as the worker runtime sees it, and what a pull promises the runtime.

A pull brings a subscription's messages to a worker: streaming pull on Pub/Sub
(`streaming_pull.StreamingPull`), unary pull with leases of its own on the
emulator (`unary_pull.UnaryPull`). It hands them to a sink (the dispatcher's
`receive`) from threads of its own, never from a handler thread, and messages
of one ordering key one at a time: the next once the one before is settled.
A message leaves the runtime through one of its three methods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from shared.bus.delayed_nacks import DelayedNacks

if TYPE_CHECKING:
    from google.cloud import pubsub_v1


class Message(Protocol):
    """One pulled message: what the runtime reads of it, and the three things it
    can do with it. The first ack or nack counts; later ones are ignored."""

    # Read-only: a pull may keep them in any mapping or type of its own.
    @property
    def data(self) -> bytes: ...
    @property
    def attributes(self) -> Mapping[str, str]: ...
    @property
    def ordering_key(self) -> str: ...
    @property
    def message_id(self) -> str: ...
    @property
    def delivery_attempt(self) -> int: ...
    @property
    def publish_time(self) -> datetime | None: ...

    def ack(self) -> None: ...

    def nack(self, delay: float = 0.0) -> None:
        """Give it back for redelivery, after `delay` seconds (the retry backoff)."""

    def extend(self) -> None:
        """Held for a dependency, not stuck: keep its lease however long that takes
        (and the leases of the messages of its ordering key waiting behind it)."""


# Where a pull hands its messages: the dispatcher's `receive`.
Sink = Callable[[Sequence[Message]], None]


@dataclass(frozen=True)
class PullOptions:
    """What a pull is given, whichever it is: the subscriber client and the
    subscription's path, how many messages may be leased at once, how long each
    lease extension is, and whether a nack's delay is kept by the pull (the
    emulator does not honour the subscription's retry policy)."""

    subscriber: pubsub_v1.SubscriberClient
    path: str
    max_outstanding: int
    lease_seconds: int
    backoff_emulated: bool

    def delayed_nacks(self) -> DelayedNacks | None:
        """Where nacks wait for their delay, when the pull keeps it."""
        return DelayedNacks() if self.backoff_emulated else None


class Pull(Protocol):
    """A pull as the runtime drives it."""

    def start(self) -> None: ...

    def request_stop(self) -> None:
        """Pull nothing more and hand nothing more on (returns at once). What was
        pulled and never handed to the sink goes back to Pub/Sub unopened."""

    def stop(self, timeout: float) -> bool:
        """Wait up to `timeout` for every message handed on to be settled; True if
        every one was."""

    @property
    def running(self) -> bool: ...

    @property
    def error(self) -> BaseException | None: ...

    def in_flight(self) -> int:
        """Messages pulled and not yet settled."""
