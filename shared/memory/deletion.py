"""Deleting memories: one by id, by query (adk-memory's semantics), by project,
and a whole user (GDPR), with the tombstone that keeps a deleted user deleted.

A GDPR deletion writes `deleted_users (app, user_id, deleted_at)` in the same
transaction that removes the rows, under the user's advisory lock, so it is
serialised with extraction and compaction. Every consumer then drops an event
of that user created before `deleted_at` (late, retried or replayed), and the
pipeline re-creates nothing. Events created after the deletion are a new start.

The Postgres functions work in the caller's unit of work, which commits. After
a project's or a user's rows are gone, `forget_project` and `forget_user` remove
their sessions from Valkey (the user's also sets the tombstone there, which
makes late events of the user drop; see shared/session_buffer).
"""

from __future__ import annotations

from datetime import datetime

import valkey.asyncio

from shared.db.memory_rows import MemoryRow
from shared.db.unit_of_work import UnitOfWork
from shared.memory.filters import Node
from shared.session_buffer import (
    meta_key_of,
    project_marker,
    tombstone_key,
    user_keys_pattern,
)

# Keys a SCAN asks for per round, and at most deleted per command.
_SCAN_COUNT = 1000
_DELETE_BATCH = 500


def delete_memory(uow: UnitOfWork, app: str, user_id: str, memory_id: str, now: datetime) -> bool:
    """Retire one live memory of the user (a DELETED revision); False if the user
    has no such live memory."""
    uow.memories.lock_user(app, user_id)
    memory = uow.memories.get(app, user_id, memory_id)
    if memory is None or memory.valid_to is not None:
        return False
    uow.memories.retire(memory, now, None)
    return True


def delete_matching(
    uow: UnitOfWork,
    app: str,
    user_id: str,
    project_id: str,
    query: str,
    now: datetime,
    admits: Node | None = None,
    agents: tuple[str, ...] = ("",),
) -> list[MemoryRow]:
    """Retire the user's live memories whose text holds every word of `query`
    (a deletion is precise, unlike a search) and that the filter `admits`: with a
    project, that project's memories only; without one, global memories only; of
    the owners `agents` (those a read as the agent sees). Each gets a DELETED
    revision. Returns them as they are now."""
    uow.memories.lock_user(app, user_id)
    matching = uow.memories.live_matching(app, user_id, project_id, query, admits, agents)
    return [uow.memories.retire(memory, now, None) for memory in matching]


def delete_project(uow: UnitOfWork, app: str, user_id: str, project_id: str) -> dict[str, int]:
    """Everything of one project of the user: its memories (any scope) with their
    revisions, its episodes and its permission rules. Returns rows removed by table."""
    uow.memories.lock_user(app, user_id)
    return uow.erasure.project(app, user_id, project_id)


def delete_user(
    uow: UnitOfWork, app: str, user_id: str, now: datetime
) -> tuple[dict[str, int], datetime]:
    """Everything of the user in the app (their profile too), and the tombstone at `now`: the API's
    clock, the one that stamps the `created_at` of recorded turns, so the two
    compare on one clock. Returns rows removed by table and the tombstone's time."""
    uow.memories.lock_user(app, user_id)
    when = uow.tombstones.set(app, user_id, now)
    return {**uow.erasure.user(app, user_id), **uow.profiles.erase(app, user_id)}, when


async def forget_project(
    client: valkey.asyncio.Valkey, app: str, user_id: str, project_id: str
) -> int:
    """Remove every session of the user that had a turn of the project (its summary
    may hold the project's facts): all its keys, allow-once grants included. One
    SCAN of the user's keys, grouped by session (their shared hash tag); one
    pipeline asks each session's `meta` for the project's marker. Returns the keys
    removed."""
    sessions: dict[str, list[str]] = {}  # meta key -> the session's keys
    async for key in client.scan_iter(match=user_keys_pattern(app, user_id), count=_SCAN_COUNT):
        name = key.decode() if isinstance(key, bytes) else key
        sessions.setdefault(meta_key_of(name), []).append(name)
    if not sessions:
        return 0
    metas = list(sessions)
    asks = client.pipeline(transaction=False)
    for meta in metas:
        asks.hexists(meta, project_marker(project_id))
    marked = [meta for meta, hit in zip(metas, await asks.execute(), strict=True) if hit]
    if not marked:
        return 0
    deletes = client.pipeline(transaction=False)
    for meta in marked:
        deletes.delete(*sessions[meta])  # one session's keys: one cluster slot
    return sum(await deletes.execute())


async def forget_user(client: valkey.asyncio.Valkey, app: str, user_id: str, when: datetime) -> int:
    """Set the user's tombstone at `when` (what `delete_user` returned), then remove
    every key of the user. Returns the keys removed."""
    await client.set(tombstone_key(app, user_id), repr(when.timestamp()))
    removed = 0
    batch: list[bytes] = []
    async for key in client.scan_iter(match=user_keys_pattern(app, user_id), count=_SCAN_COUNT):
        batch.append(key)
        if len(batch) >= _DELETE_BATCH:
            removed += await client.delete(*batch)
            batch = []
    if batch:
        removed += await client.delete(*batch)
    return removed
