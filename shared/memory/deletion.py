"""Deleting memories: by query (adk-memory's semantics), by project, and a whole
user (GDPR), with the tombstone that keeps a deleted user deleted.

A GDPR deletion writes `deleted_users (app, user_id, deleted_at)` in the same
transaction that removes the rows, under the user's advisory lock, so it is
serialised with extraction and compaction. Every consumer then drops an event
of that user created before `deleted_at` (late, retried or replayed), and the
pipeline re-creates nothing. Events created after the deletion are a new start.

Each function works in the caller's unit of work, which commits.
"""

from __future__ import annotations

from datetime import datetime

from shared.db.memories import MemoryRow
from shared.db.unit_of_work import UnitOfWork


def delete_matching(
    uow: UnitOfWork, app: str, user_id: str, project_id: str, query: str, now: datetime
) -> list[MemoryRow]:
    """Retire the user's live memories whose text holds every word of `query`
    (a deletion is precise, unlike a search): with a project, that project's
    memories only; without one, global memories only. Each gets a DELETED
    revision. Returns them as they are now."""
    uow.memories.lock_user(app, user_id)
    matching = uow.memories.live_matching(app, user_id, project_id, query)
    return [uow.memories.retire(memory, now, None) for memory in matching]


def delete_project(uow: UnitOfWork, app: str, user_id: str, project_id: str) -> dict[str, int]:
    """Everything of one project of the user: its memories (any scope) with their
    revisions, its episodes and its permission rules. Returns rows removed by table."""
    uow.memories.lock_user(app, user_id)
    return uow.erasure.project(app, user_id, project_id)


def delete_user(
    uow: UnitOfWork, app: str, user_id: str, now: datetime
) -> tuple[dict[str, int], datetime]:
    """Everything of the user in the app, and the tombstone at `now`: the API's
    clock, the one that stamps the `created_at` of recorded turns, so the two
    compare on one clock. Returns rows removed by table and the tombstone's time."""
    uow.memories.lock_user(app, user_id)
    when = uow.tombstones.set(app, user_id, now)
    return uow.erasure.user(app, user_id), when
