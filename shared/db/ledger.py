"""The processed-events ledger: `(applier, event_id)` recorded in the same
transaction as the event's effects, so that each applier (a subscription's name,
or `compaction`; the table's column `consumer`) applies an event once.

`claim_or_skip` is the first step of every handler's transaction: it takes the
user's lock, records the event, and says whether to go on. `peek` answers the
same question without writing, before a handler spends LLM or embedding calls.
Handlers ask through `claimed` and `peeked`, which answer in the handlers' own
words: the `Outcome` of an event not to apply (a duplicate, or dropped because
its user was deleted), or None to apply it.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Protocol

import psycopg

from shared.bus.contract import Outcome
from shared.db.tombstones import DELETED_AT_SQL, Tombstones, covers
from shared.db.user_lock import user_lock

_APPLIED_SQL = "SELECT 1 FROM processed_events WHERE consumer = %s AND event_id = %s"


class Claim(enum.Enum):
    NEW = "new"  # this transaction applies the event
    DUPLICATE = "duplicate"  # this applier applied it already
    DELETED = "deleted"  # its user was deleted after it was created: drop it


# A claim that stops a handler, as the handler's outcome.
_STOPS = {Claim.DUPLICATE: Outcome.DUPLICATE, Claim.DELETED: Outcome.DROPPED}


class Owned(Protocol):
    """What the ledger reads of an event: its id, its owner and when it was made."""

    @property
    def event_id(self) -> str: ...

    @property
    def app(self) -> str: ...

    @property
    def user_id(self) -> str: ...

    @property
    def created_at(self) -> datetime: ...


class Ledger:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def claim_or_skip(
        self, applier: str, event_id: str, *, app: str, user_id: str, created_at: datetime
    ) -> Claim:
        """Under the user's lock (held to the end of the transaction): record the
        event for this applier. DUPLICATE: it was recorded already (write nothing).
        DELETED: recorded now, but the user's tombstone covers it, so the ledger row
        is all it leaves (commit). NEW: apply its effects, then commit.

        A concurrent delivery of the same event waits on the primary key until the
        first transaction ends, then sees the conflict, so exactly one applies."""
        user_lock(self.conn, app, user_id)
        if not self.record(applier, event_id):
            return Claim.DUPLICATE
        if Tombstones(self.conn).covers(app, user_id, created_at):
            return Claim.DELETED
        return Claim.NEW

    def record(self, applier: str, event_id: str) -> bool:
        """Record the event for this applier in the caller's transaction (which holds
        the user's lock); False if it was recorded already."""
        row = self.conn.execute(
            "INSERT INTO processed_events (consumer, event_id) VALUES (%s, %s) "
            "ON CONFLICT DO NOTHING RETURNING 1",
            (applier, event_id),
        ).fetchone()
        return row is not None

    def applied(self, applier: str, event_id: str) -> bool:
        return self.conn.execute(_APPLIED_SQL, (applier, event_id)).fetchone() is not None

    def peek(
        self, applier: str, event_id: str, *, app: str, user_id: str, created_at: datetime
    ) -> Claim:
        """What `claim_or_skip` would answer now, writing nothing and taking no lock
        (one statement): a hint that saves the work of an event that is done or
        whose user is gone. The claim in the handler's transaction decides."""
        row = self.conn.execute(
            f"SELECT EXISTS ({_APPLIED_SQL}), ({DELETED_AT_SQL})",
            (applier, event_id, app, user_id),
        ).fetchone()
        assert row is not None  # a SELECT without FROM gives one row
        applied, deleted_at = row
        if applied:
            return Claim.DUPLICATE
        if covers(deleted_at, created_at):
            return Claim.DELETED
        return Claim.NEW


def claimed(ledger: Ledger, applier: str, event: Owned, *, record: bool = True) -> Outcome | None:
    """The ledger check of a handler's transaction (which holds the user's lock):
    DUPLICATE (write nothing), DROPPED (its user was deleted since: the ledger row,
    written now, is all it leaves; commit), or None: apply the event. With `record`
    false the row of an event to apply is not written here (it comes with the
    effects, later: a turn's, when its window is extracted)."""
    if record:
        return _STOPS.get(
            ledger.claim_or_skip(
                applier,
                event.event_id,
                app=event.app,
                user_id=event.user_id,
                created_at=event.created_at,
            )
        )
    claim = _peek(ledger, applier, event)
    if claim is Claim.DELETED:
        ledger.record(applier, event.event_id)
    return _STOPS.get(claim)


def peeked(ledger: Ledger, applier: str, event: Owned) -> Outcome | None:
    """What `claimed` would answer now, writing nothing and taking no lock: a hint
    that saves a done event's model calls, or keeps a deleted user's text from them."""
    return _STOPS.get(_peek(ledger, applier, event))


def _peek(ledger: Ledger, applier: str, event: Owned) -> Claim:
    return ledger.peek(
        applier, event.event_id, app=event.app, user_id=event.user_id, created_at=event.created_at
    )
