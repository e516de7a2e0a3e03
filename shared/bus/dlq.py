"""The dead-letter subscriptions: count, inspect and purge their letters
(`agent-memory dlq list|show|purge`); a letter itself is `dead_letter.DeadLetter`,
replay is in `shared.bus.replay`.

Reading is done with synchronous pulls on the dead-letter subscription, whose
ack deadline is the maximum (600 s). What one command has read stays with it (a
`Lease`) until it acknowledges it (replayed, purged) or hands it back with
modifyAckDeadline 0, which it does with everything else before it ends, also
when interrupted. Since nothing is handed back earlier, no pull of a command
returns a message twice, and a pull that finds nothing new means all is read.

On the emulator a pull asks to be answered at once (`return_immediately`,
deprecated on Pub/Sub but accepted): an empty pull then takes milliseconds
instead of its whole timeout. Pub/Sub itself may answer such a pull with
nothing while messages wait, so there a pull waits up to PULL_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType

import structlog
from google.api_core import exceptions as gexc
from google.api_core import retry as retries
from google.cloud import pubsub_v1

from shared.bus.attributes import REPLAY_RUN
from shared.bus.clients import subscriber_client
from shared.bus.dead_letter import DeadLetter
from shared.bus.publisher import EventPublisher, counted_publishes
from shared.bus.topology import (
    SUBSCRIPTIONS,
    SubscriptionSpec,
    dead_letter_name,
    full_name,
    subscription_spec,
)
from shared.bus.unary_pull import ack_id_chunks
from shared.config import Settings

# DeadLetter and REPLAY_RUN too: the commands' callers read letters and runs.
__all__ = [
    "COUNT_CAP",
    "PULL_BATCH",
    "REPLAY_RUN",
    "DeadLetter",
    "DeadLetterQueues",
    "Lease",
    "Listing",
    "MissingEvents",
    "Progress",
    "parse_age",
]

log = structlog.get_logger(__name__)

PULL_BATCH = 100  # the emulator never returns more per pull
COUNT_CAP = 10_000
PULL_TIMEOUT_SECONDS = 3.0
# Each call, retries included, ends within this: a Pub/Sub that does not answer
# is reported after seconds, not after the library's default of 60 s.
CALL_SECONDS = 3.0
_RETRY = retries.Retry(
    initial=0.1,
    maximum=1.0,
    multiplier=2.0,
    predicate=retries.if_exception_type(
        gexc.Aborted, gexc.InternalServerError, gexc.ServiceUnavailable, gexc.Unknown
    ),
    timeout=CALL_SECONDS,
)


def parse_age(text: str) -> timedelta:
    """`90s`, `15m`, `2h`, `7d`, `1w` (a bare number is seconds)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not match:
        raise ValueError(f"{text!r} is not a duration such as 90s, 15m, 2h, 7d")
    unit = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[match.group(2)]
    return timedelta(seconds=float(match.group(1)) * unit)


class MissingEvents(ValueError):
    """Event ids asked for that are not in the dead-letter subscription."""


@dataclass(frozen=True)
class Listing:
    """What `dlq show` prints: how many wait (at least, if COUNT_CAP) and the oldest."""

    total: int
    letters: list[DeadLetter]


Progress = Callable[[int], None]


def _no_progress(_count: int) -> None:
    pass


class Lease:
    """The messages one command has pulled from one dead-letter subscription and
    not acknowledged; leaving the `with` block hands them all back."""

    def __init__(self, queues: DeadLetterQueues, path: str) -> None:
        self.queues = queues
        self.path = path
        self.held: dict[str, str] = {}  # message id -> ack id
        self._seen: set[str] = set()

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def pull(self, want: int = PULL_BATCH) -> list[DeadLetter]:
        """Up to `want` messages this lease has not read before; [] when none are left."""
        self.queues.check_stop()
        subscriber = self.queues.subscriber
        request = {"subscription": self.path, "max_messages": want}
        if self.queues.return_immediately:
            request["return_immediately"] = True
        try:
            response = subscriber.pull(request=request, timeout=PULL_TIMEOUT_SECONDS, retry=_RETRY)
        except gexc.DeadlineExceeded:
            if self.queues.return_immediately:
                raise  # the emulator answers at once: this one does not answer at all
            return []  # Pub/Sub had nothing for the whole timeout
        letters = []
        for received in response.received_messages:
            message = received.message
            self.held[message.message_id] = received.ack_id
            if message.message_id in self._seen:
                continue  # its lease ran out during a long command: only its ack id is new
            self._seen.add(message.message_id)
            letters.append(
                DeadLetter(
                    ack_id=received.ack_id,
                    message_id=message.message_id,
                    data=bytes(message.data),
                    attributes=dict(message.attributes),
                    dead_lettered_at=message.publish_time,
                )
            )
        return letters

    def ack(self, letters: list[DeadLetter]) -> None:
        """Remove `letters` from the dead-letter subscription for good."""
        for chunk in ack_id_chunks([self.held[letter.message_id] for letter in letters]):
            self.queues.subscriber.acknowledge(
                request={"subscription": self.path, "ack_ids": chunk},
                timeout=CALL_SECONDS,
                retry=_RETRY,
            )
        for letter in letters:
            del self.held[letter.message_id]

    def release(self) -> None:
        """Hand everything held back to the subscription, unacknowledged."""
        ack_ids, self.held = list(self.held.values()), {}
        for chunk in ack_id_chunks(ack_ids):
            try:
                self.queues.subscriber.modify_ack_deadline(
                    request={
                        "subscription": self.path,
                        "ack_ids": chunk,
                        "ack_deadline_seconds": 0,
                    },
                    timeout=CALL_SECONDS,
                    retry=_RETRY,
                )
            except gexc.GoogleAPIError as exc:
                # Not lost: they come back by themselves when the lease ends.
                log.warning(
                    "could not hand dead letters back; they return within 10 minutes",
                    subscription=self.path,
                    count=len(chunk),
                    error=repr(exc),
                )

    def batches(
        self, cap: int | None = None, progress: Progress = _no_progress
    ) -> Iterator[list[DeadLetter]]:
        """Pull until the subscription has nothing new left (or `cap` messages are read)."""
        count = 0
        while cap is None or count < cap:
            batch = self.pull(PULL_BATCH if cap is None else min(PULL_BATCH, cap - count))
            if not batch:
                return
            count += len(batch)
            progress(len(batch))
            yield batch


class DeadLetterQueues:
    """Operations on the dead-letter subscriptions of one project and prefix.

    `stop` ends a command at its next pull (Ctrl-C): it raises KeyboardInterrupt
    there, and what was read is handed back on the way out."""

    def __init__(
        self,
        settings: Settings,
        subscriber: pubsub_v1.SubscriberClient | None = None,
        publisher: EventPublisher | None = None,
    ) -> None:
        self.settings = settings
        self.subscriber = subscriber or subscriber_client()
        self.return_immediately = bool(settings.pubsub_emulator_host)
        self.stop = threading.Event()
        self._publisher = publisher

    @property
    def publisher(self) -> EventPublisher:
        if self._publisher is None:
            self._publisher = EventPublisher(
                self.settings, counted=counted_publishes(self.settings)
            )
        return self._publisher

    def close(self) -> None:
        """Flush and stop the publisher, if a replay created one."""
        if self._publisher is not None:
            self._publisher.stop()
            self._publisher = None

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise KeyboardInterrupt

    def dead_letter_path(self, spec: SubscriptionSpec) -> str:
        return self.subscriber.subscription_path(
            self.settings.google_cloud_project,
            full_name(self.settings.topic_prefix, dead_letter_name(spec.name)),
        )

    def spec(self, name: str) -> SubscriptionSpec:
        """The subscription `name` stands for; KeyError naming the known ones if none."""
        return subscription_spec(name, self.settings.topic_prefix)

    def lease(self, name: str) -> Lease:
        return Lease(self, self.dead_letter_path(self.spec(name)))

    # -- reading ---------------------------------------------------------------
    def peek(self, name: str, limit: int | None = None) -> list[DeadLetter]:
        """Read up to `limit` messages (all without one) without consuming them."""
        with self.lease(name) as lease:
            return [letter for batch in lease.batches(limit) for letter in batch]

    def show(self, name: str, limit: int, progress: Progress = _no_progress) -> Listing:
        """How many messages wait (up to COUNT_CAP) and the `limit` oldest of those read."""
        oldest: list[DeadLetter] = []
        total = 0
        with self.lease(name) as lease:
            for batch in lease.batches(COUNT_CAP, progress):
                total += len(batch)
                oldest.extend(batch)
                if len(oldest) > 2 * limit:  # memory stays bounded: only `limit` are shown
                    oldest = sorted(oldest, key=_published)[:limit]
        return Listing(total, sorted(oldest, key=_published)[:limit])

    def counts(self, progress: Progress = _no_progress) -> list[tuple[SubscriptionSpec, str, int]]:
        """Per subscription: its dead-letter subscription and how many messages wait
        there (read, then handed back; at most COUNT_CAP are counted). The four are
        read at once."""
        lock = threading.Lock()

        def counted(count: int) -> None:
            with lock:
                progress(count)

        def count(spec: SubscriptionSpec) -> tuple[SubscriptionSpec, str, int]:
            path = self.dead_letter_path(spec)
            with Lease(self, path) as lease:
                return spec, path, sum(len(b) for b in lease.batches(COUNT_CAP, counted))

        with ThreadPoolExecutor(len(SUBSCRIPTIONS), thread_name_prefix="dlq-count") as pool:
            return list(pool.map(count, SUBSCRIPTIONS))

    def find(
        self, lease: Lease, event_ids: Collection[str], progress: Progress = _no_progress
    ) -> tuple[list[DeadLetter], int]:
        """Read the whole subscription into `lease`: the messages of `event_ids` and how
        many messages were read. MissingEvents (nothing changed) if an id is not there."""
        found: list[DeadLetter] = []
        total = 0
        for batch in lease.batches(None, progress):
            total += len(batch)
            found.extend(letter for letter in batch if letter.event_id in event_ids)
        missing = sorted(set(event_ids) - {letter.event_id for letter in found})
        if missing:
            listed = ", ".join(missing)
            ids = f"event id {listed} is" if len(missing) == 1 else f"event ids {listed} are"
            raise MissingEvents(f"{ids} not in {lease.path.rsplit('/', 1)[1]}; nothing was changed")
        return found, total

    # -- purge -------------------------------------------------------------------
    def purge(
        self,
        name: str,
        event_ids: Collection[str],
        confirmed: bool,
        show: Callable[[DeadLetter], None],
        progress: Progress = _no_progress,
    ) -> int:
        """Acknowledge (delete) the dead letters of `event_ids` if `confirmed`, after
        passing each to `show`; all ids must be there, or nothing changes. How many."""
        with self.lease(name) as lease:
            found, _total = self.find(lease, event_ids, progress)
            for letter in found:
                show(letter)
            if confirmed:
                self.check_stop()
                lease.ack(found)
        return len(found)


def _published(letter: DeadLetter) -> datetime:
    return letter.dead_lettered_at
