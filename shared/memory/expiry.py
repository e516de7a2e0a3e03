"""When memories expire: an app's time-to-live settings (`PUT /v1/config/ttl`).

A TTL is chosen per scope and per action, the most specific one set winning:

    scopes.<scope>.<action>  >  scopes.<scope>.default  >  <action>  >  default

where the action is `create` (a memory written through the API),
`generate_created` (a memory the extraction made) or `generate_updated` (one the
extraction changed, whose expiry moves to now + that TTL). None set: it never
expires (an update keeps the expiry it had). `revisions` is how long a revision
is kept. An expired memory is out of every read at once (shared.db.memories
LIVE); `retire_expired`, which every compaction sweep of the app runs, later makes
it history as a delete does, and deletes the revisions past their TTL.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from shared.db.memory_rows import NewMemory
from shared.db.planned_write import user_transaction
from shared.db.unit_of_work import UnitOfWork
from shared.events import utcnow
from shared.metrics import EXPIRED

ACTIONS = ("create", "generate_created", "generate_updated")
SCOPES = ("global", "project", "session")
MIN_SECONDS = 60
MAX_SECONDS = 100 * 365 * 86400  # a century: beyond it, leave it unset
TTL_SETTING = "ttl"


@dataclass(frozen=True)
class Ttl:
    """The app's TTLs in seconds, as stored (see `parse`), and the database's time
    when they were read: expiries count from it, so a writer whose clock is off
    sets the same `expire_at` as any other (reads compare it with the database's
    `now()` too)."""

    config: dict[str, Any]
    read_at: datetime | None = None

    def seconds(self, scope: str, action: str) -> int | None:
        scoped = self.config.get("scopes", {}).get(scope, {})
        for value in (
            scoped.get(action),
            scoped.get("default"),
            self.config.get(action),
            self.config.get("default"),
        ):
            if value is not None:
                return int(value)
        return None

    def expire_at(self, scope: str, action: str) -> datetime | None:
        seconds = self.seconds(scope, action)
        if seconds is None:
            return None
        return (self.read_at or utcnow()) + timedelta(seconds=seconds)

    @property
    def revisions(self) -> int | None:
        value = self.config.get("revisions")
        return int(value) if value is not None else None


NO_TTL = Ttl({})


def load(uow: UnitOfWork, app: str) -> Ttl:
    """The app's TTLs as stored (none set: nothing expires), read at the database's
    time."""
    config, read_at = uow.app_settings.get_at(app, TTL_SETTING)
    return Ttl(config or {}, read_at)


def with_expiry(new: NewMemory, ttl: Ttl, created: str, updated: str) -> NewMemory:
    """`new` with the expiry it gets when created (action `created`) and when it
    updates a memory (action `updated`)."""
    return replace(
        new,
        expire_at=ttl.expire_at(new.scope, created),
        updated_expire_at=ttl.expire_at(new.scope, updated),
    )


BATCH = 500
EXPIRED_CHANGE = "EXPIRED"


@dataclass(frozen=True)
class Retired:
    memories: int
    revisions: int


def retire_expired(units: Callable[[], UnitOfWork], app: str) -> Retired:
    """Retire the app's memories past their `expire_at` (a DELETED revision; the
    change event says EXPIRED) and delete its revisions past the revisions TTL.
    Batches of BATCH memories, each user's in one short transaction under the
    user's lock; a memory whose expiry moved meanwhile (an update) is left alone.
    Running it twice retires nothing twice."""
    memories = 0
    while True:
        with units() as uow:
            rows = uow.memories.expired(app, BATCH)
        by_user: dict[str, list[str]] = defaultdict(list)
        for user_id, memory_id in rows:
            by_user[user_id].append(memory_id)
        for user_id, ids in by_user.items():
            memories += _retire(units, app, user_id, ids)
        if len(rows) < BATCH:
            break
    revisions = 0
    while True:
        with units() as uow:
            deleted = uow.memories.delete_expired_revisions(app, BATCH * 10)
            uow.commit()
        revisions += deleted
        if deleted < BATCH * 10:
            break
    EXPIRED.labels("memories").inc(memories)
    EXPIRED.labels("revisions").inc(revisions)
    return Retired(memories, revisions)


def _retire(units: Callable[[], UnitOfWork], app: str, user_id: str, ids: list[str]) -> int:
    retired = 0
    with user_transaction(units, app, user_id) as uow:
        now = uow.now()  # the clock the sweep chose them by, not this process's
        for memory_id in ids:
            memory = uow.memories.get(app, user_id, memory_id)
            if memory is None or memory.valid_to is not None:
                continue
            if memory.expire_at is None or memory.expire_at > now:
                continue  # updated meanwhile: its expiry moved
            uow.memories.retire(memory, now, None, change=EXPIRED_CHANGE)
            retired += 1
    return retired
