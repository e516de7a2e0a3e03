"""The expiry sweep: an app's memories past their `expire_at` are retired as a
delete retires them (a DELETED revision; the change event says EXPIRED), and its
revisions past the app's revisions TTL are deleted. Reads never wait for it: an
expired memory is out of every read from the moment it expires (shared.db.memories
LIVE); the sweep only makes it history.

The compaction worker runs it with every compaction sweep of the app (the
scheduled request without a user). Batches of BATCH memories, each user's in one
short transaction under the user's lock; a memory whose expiry moved meanwhile
(an update) is left alone. Running it twice retires nothing twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from shared.db.planned_write import user_transaction
from shared.db.unit_of_work import UnitOfWork
from shared.events import utcnow
from shared.metrics import EXPIRED

BATCH = 500
EXPIRED_CHANGE = "EXPIRED"


@dataclass(frozen=True)
class Swept:
    memories: int
    revisions: int


def sweep(units: Callable[[], UnitOfWork], app: str) -> Swept:
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
    return Swept(memories, revisions)


def _retire(units: Callable[[], UnitOfWork], app: str, user_id: str, ids: list[str]) -> int:
    now = utcnow()
    retired = 0
    with user_transaction(units, app, user_id) as uow:
        for memory_id in ids:
            memory = uow.memories.get(app, user_id, memory_id)
            if memory is None or memory.valid_to is not None:
                continue
            if memory.expire_at is None or memory.expire_at > now:
                continue  # updated meanwhile: its expiry moved
            uow.memories.retire(memory, now, None, change=EXPIRED_CHANGE)
            retired += 1
    return retired
