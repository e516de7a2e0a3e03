"""What the context reads besides its searches (`shared.db.search`): where each of
its memories comes from, and the scope's long-term summaries (the compaction
worker's folds).

A memory is cited by its id and the number of the revision that made its current
text (revisions are numbered from 1 in the order written, as a rollback names
them); its sources are the archived turns whose events its applied revisions
came from, oldest first. A memory written directly, or whose turns compaction
has since folded, has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.db.memories import COMPACTED_ENTITY, MEMORY_COLUMNS, MemoryRow
from shared.db.run import Statement, Steps
from shared.db.search_filters import memory_filter
from shared.memory.search import Scope


@dataclass(frozen=True, slots=True)
class SourceTurn:
    """An archived turn a memory was extracted from."""

    episode_id: str
    turn_id: str
    session_id: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Cited:
    """A memory's current revision number and the turns it came from."""

    revision: int
    sources: tuple[SourceTurn, ...] = ()


def memory_sources(app: str, user_id: str, memory_ids: list[str]) -> Steps[dict[str, Cited]]:
    """Memory id -> `Cited`, for the memories of `memory_ids` (all of `app` and
    `user_id`'s; the turns are looked up within them only)."""
    if not memory_ids:
        return {}
    rows = yield Statement(
        """
        SELECT r.memory_id::text AS memory_id, r.n, r.applied,
               e.id::text AS episode_id, e.turn_id, e.session_id, e.created_at
        FROM (
            SELECT memory_id, id, applied, event_id,
                   row_number() OVER (PARTITION BY memory_id ORDER BY id) AS n
            FROM memory_revisions WHERE memory_id = ANY(%(ids)s::uuid[])
        ) r
        LEFT JOIN episodes e ON r.applied AND e.event_id = r.event_id
            AND e.app = %(app)s AND e.user_id = %(user_id)s
        ORDER BY r.memory_id, r.id
        """,
        {"ids": memory_ids, "app": app, "user_id": user_id},
    )
    revision: dict[str, int] = {}
    sources: dict[str, list[SourceTurn]] = {}
    for row in rows:
        memory_id = row["memory_id"]
        if row["applied"]:
            revision[memory_id] = row["n"]
        turns = sources.setdefault(memory_id, [])
        if row["episode_id"] is not None and all(t.episode_id != row["episode_id"] for t in turns):
            turns.append(
                SourceTurn(row["episode_id"], row["turn_id"], row["session_id"], row["created_at"])
            )
    return {
        memory_id: Cited(revision.get(memory_id, 0), tuple(turns))
        for memory_id, turns in sources.items()
    }


def long_term_summaries(scope: Scope) -> Steps[list[MemoryRow]]:
    """The live compaction folds `scope` may see (the user's global one and its
    project's), the project's first."""
    where, params = memory_filter(Scope(scope.app, scope.user_id, scope.project_id), None)
    params["entity"] = COMPACTED_ENTITY
    rows = yield Statement(
        f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE {where} AND m.entity_name = %(entity)s "
        "ORDER BY m.scope = 'global', m.id",
        params,
    )
    return [MemoryRow.from_row(row) for row in rows]
