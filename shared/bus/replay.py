"""`agent-memory dlq replay`: re-publish dead letters for the subscription that
dead-lettered them.

Targeted: each message goes to its original topic with its original data,
attributes and ordering key, plus REPLAYED_FOR naming the subscription; the
topic's other subscriptions acknowledge it without handling it.

Bounded: a run replays only the dead letters that were there when it started.
One that fails again during the run comes back to the same dead-letter
subscription as a new message; the run reads it, leaves it alone and hands it
back at the end, for a later run. It knows such a message by either of:
- REPLAY_RUN, an attribute with this run's random id on everything it
  publishes, which a worker keeps when it dead-letters the message again
  (exact, whatever the clocks);
- a publish time after the run started, which also covers messages the live
  pipeline dead-letters meanwhile (this machine's clock against Pub/Sub's: a
  skew only moves such a message between this run and the next).
Since a run hands nothing back before it ends, it pulls each message once and
ends at the first pull with nothing new, also while messages keep failing.

A message is acknowledged in the dead-letter subscription only after its
re-publish is confirmed. With `event_ids` the whole subscription is read first,
so that an id that is not there changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from google.api_core import exceptions as gexc

from shared.bus.attributes import REPLAY_RUN, REPLAYED_FOR
from shared.bus.dead_letter import DeadLetter
from shared.bus.dlq import PULL_BATCH, DeadLetterQueues, Lease, Progress


@dataclass(frozen=True)
class ReplayFilter:
    event_type: str | None = None
    app: str | None = None
    older_than: timedelta | None = None
    newer_than: timedelta | None = None
    event_ids: frozenset[str] = frozenset()

    def matches(self, letter: DeadLetter, now: datetime) -> bool:
        if self.event_ids and letter.event_id not in self.event_ids:
            return False
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
    interrupted: bool = False
    # The Pub/Sub error that ended the run early, if one did.
    error: gexc.GoogleAPICallError | gexc.RetryError | None = None

    def summary(self, dry_run: bool = False) -> str:
        verb = "would replay" if dry_run else "replayed"
        return f"{verb} {self.replayed}, skipped {self.skipped}, failed {self.failed}"


def replay(
    queues: DeadLetterQueues,
    name: str,
    flt: ReplayFilter | None = None,
    limit: int | None = None,
    dry_run: bool = False,
    say: Callable[[str], None] | None = None,
    progress: Progress | None = None,
) -> ReplayResult:
    """Replay the matching dead letters of subscription `name` (at most `limit`).

    Ctrl-C (`queues.stop`) ends the run after the batch in hand, a Pub/Sub error
    where it happens: the result says so, and everything read and not replayed
    is handed back. MissingEvents (raised) if an event id is not there: nothing
    has changed then."""
    spec = queues.spec(name)
    flt = flt or ReplayFilter()
    with queues.lease(name) as lease:
        run = _Run(
            queues,
            lease,
            spec.name,
            queues.publisher.topic_path(spec.topic) if not dry_run else "",
            flt,
            limit,
            dry_run,
            say or (lambda _line: None),
            progress or (lambda _count: None),
        )
        try:
            if flt.event_ids:
                run.selected()
            else:
                for batch in lease.batches():
                    run.take(batch)
                    if run.done:
                        break
        except KeyboardInterrupt:
            run.result.interrupted = True
        except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
            run.result.error = exc
    return run.result


@dataclass
class _Run:
    queues: DeadLetterQueues
    lease: Lease
    subscription: str
    topic_path: str
    flt: ReplayFilter
    limit: int | None
    dry_run: bool
    say: Callable[[str], None]
    progress: Progress
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    result: ReplayResult = field(default_factory=ReplayResult)
    done: bool = False

    def selected(self) -> None:
        """Replay the letters of the filter's event ids, all of which must be there."""
        found, total = self.queues.find(self.lease, self.flt.event_ids)
        # Everything read is held until the end, so `found` cannot hold a letter
        # that came back during this run; the others are skipped.
        self.result.skipped += total - len(found)
        self.progress(total - len(found))
        for start in range(0, len(found), PULL_BATCH):
            self.queues.check_stop()
            self.take(found[start : start + PULL_BATCH])
            if self.done:
                return

    def take(self, letters: list[DeadLetter]) -> None:
        """Decide each letter of one pull; publish the chosen, then acknowledge
        those whose publish was confirmed."""
        now = datetime.now(UTC)
        chosen: list[DeadLetter] = []
        for letter in letters:
            if letter.attributes.get(REPLAY_RUN) == self.run_id or (
                letter.dead_lettered_at >= self.started
            ):
                continue  # not in this run's snapshot: held, handed back at the end
            if self.limit is not None and self.result.replayed + len(chosen) >= self.limit:
                self.done = True  # read but not considered: handed back untouched
            elif not self.flt.matches(letter, now):
                self.result.skipped += 1
                self.progress(1)
            else:
                chosen.append(letter)
        if self.dry_run:
            for letter in chosen:
                self.result.replayed += 1
                self.progress(1)
                self.say(f"would replay {letter.label} for {self.subscription}")
        else:
            self._publish(chosen)
        if self.limit is not None and self.result.replayed >= self.limit:
            self.done = True  # no need to read further

    def _publish(self, chosen: list[DeadLetter]) -> None:
        publisher = self.queues.publisher
        timeout = self.queues.settings.publish_timeout_seconds
        pending = [
            (
                letter,
                publisher.publish_raw(
                    self.topic_path,
                    letter.data,
                    {
                        **letter.original_attributes(),
                        REPLAYED_FOR: self.subscription,
                        REPLAY_RUN: self.run_id,
                    },
                    letter.ordering_key(),
                ),
            )
            for letter in chosen
        ]
        confirmed = []
        for letter, future in pending:
            try:
                future.result(timeout=timeout)
            except Exception as exc:
                self.result.failed += 1
                self.progress(1)
                self.say(f"failed {letter.label}: {exc!r}")
            else:
                confirmed.append(letter)
        if chosen and not confirmed:
            # Not one publish of the batch went through: Pub/Sub is the problem, not
            # these messages; the next batch would fail the same way.
            self.say("stopping: no publish of this batch was confirmed")
            self.done = True
            return
        try:
            # Only now, with the publishes confirmed, may the dead letters go.
            self.lease.ack(confirmed)
        except gexc.GoogleAPIError as exc:
            # Replayed, but still in the dead letters: handed back at the end, and
            # replayed again by a later run, which the consumers' ledgers make harmless.
            self.result.failed += len(confirmed)
            self.progress(len(confirmed))
            self.say(f"republished {len(confirmed)} but could not acknowledge them: {exc!r}")
            return
        self.result.replayed += len(confirmed)
        self.progress(len(confirmed))
        for letter in confirmed:
            self.say(f"replayed {letter.label} for {self.subscription}")
