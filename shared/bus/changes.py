"""Publishing the outbox of memory changes (shared.db.outbox) as `memory.changed.v1`.

Every process that changes memories (the API, the extraction and compaction
workers) runs a `ChangeRelay`: a thread that, every `AM_CHANGES_POLL_SECONDS`,
claims the waiting changes (at most PER_USER of a user, so that a round of them
fits well within the claim's lease) in one short transaction, publishes them with no
transaction open, and in another short transaction deletes those Pub/Sub
confirmed. So a change is published after its transaction committed, even if the
process that made it died in between (another relay claims it when the lease
runs out), and a redelivered event that changes nothing adds no row.

A user's changes go out in their order: the relay sends the first waiting change
of each user it claimed, waits for Pub/Sub, then the second, and so on; a user
whose change failed keeps the rest for the next round. A relay that dies after
Pub/Sub took a change but before deleting it publishes it again under the same
`event_id`: consumers treat `event_id` as the change's identity.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from concurrent.futures import Future
from dataclasses import replace

import structlog
from psycopg import Error as PostgresError
from psycopg_pool import ConnectionPool

from shared.bus.publisher import EventPublisher
from shared.config import Settings
from shared.db import outbox
from shared.errors import EventTooLarge
from shared.events import MemoryChanged
from shared.metrics import MEMORY_CHANGES_PUBLISHED

log = structlog.get_logger("agent_memory.changes")

CLAIM_LIMIT = 500
LEASE_SECONDS = 60.0  # longer than a round of publishes can take (their timeouts)


class ChangeRelay:
    def __init__(self, settings: Settings, pool: ConnectionPool, publisher: EventPublisher) -> None:
        self.pool = pool
        self.publisher = publisher
        self.poll_seconds = settings.changes_poll_seconds
        self.timeout = settings.publish_timeout_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="change-relay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the round in hand, then publish what waits once more."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout * 2 + 5)
        try:
            self.publish_waiting()
        except Exception as exc:  # noqa: BLE001 - what is left waits for another process
            log.warning("memory changes left for another process", error=repr(exc))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.publish_waiting()
            except Exception as exc:  # noqa: BLE001 - the thread outlives any one round
                log.exception("a round of memory changes failed; retried", error=repr(exc))
            self._stop.wait(self.poll_seconds)

    def publish_waiting(self) -> int:
        """Claim, publish and forget what waits; how many were published. Errors
        are logged: what was not confirmed is published by a later round."""
        published = 0
        try:
            while True:
                with self.pool.connection() as conn:
                    if not outbox.waiting(conn):
                        return published
                    with conn.transaction():
                        claimed = outbox.claim(conn, CLAIM_LIMIT, LEASE_SECONDS)
                if not claimed:
                    return published  # all waiting changes are leased by other relays
                confirmed, failed = self._publish(claimed)
                with self.pool.connection() as conn, conn.transaction():
                    outbox.done(conn, confirmed, failed, claimed[0].lease)
                published += len(confirmed)
                MEMORY_CHANGES_PUBLISHED.inc(len(confirmed))
                if failed or len(claimed) < CLAIM_LIMIT:
                    return published
        except PostgresError as exc:
            log.warning("memory changes not published now; retried", error=repr(exc))
        return published

    def _send(self, event: MemoryChanged) -> Future:
        """Publish `event`; one too large to publish goes without its texts (the
        memory's id says which to read), so that it never blocks its user's changes."""
        try:
            return self.publisher.publish(event)
        except EventTooLarge:
            log.warning(
                "a memory change too large to publish goes without its texts",
                memory_id=event.memory_id,
            )
            return self.publisher.publish(replace(event, text="", previous_text=""))

    def _publish(self, claimed: list[outbox.Claimed]) -> tuple[list[int], list[int]]:
        """Each user's changes in order, one round per rank; a user whose change
        fails keeps the rest for later."""
        per_user: dict[tuple[str, str], list[outbox.Claimed]] = defaultdict(list)
        for item in claimed:
            per_user[(item.event.app, item.event.user_id)].append(item)
        confirmed: list[int] = []
        failed: list[int] = []
        rank = 0
        while per_user:
            sent: list[tuple[tuple[str, str], outbox.Claimed, Future]] = []
            for user, items in list(per_user.items()):
                if rank >= len(items):
                    del per_user[user]
                    continue
                try:
                    future = self._send(items[rank].event)
                except Exception as exc:  # noqa: BLE001 - a full queue: the user's rest waits
                    log.warning("a memory change was not published", error=repr(exc))
                    failed.extend(i.id for i in per_user.pop(user)[rank:])
                    continue
                sent.append((user, items[rank], future))
            for user, item, future in sent:
                try:
                    future.result(timeout=self.timeout)
                except Exception as exc:  # noqa: BLE001 - any failure: handed back, retried
                    log.warning("a memory change was not published", error=repr(exc))
                    failed.extend(i.id for i in per_user.pop(user)[rank:])
                else:
                    confirmed.append(item.id)
            rank += 1
        return confirmed, failed
