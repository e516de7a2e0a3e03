"""What the context reads besides its searches (`shared.db.search`): where each of
its memories comes from (read with them, as two more columns of the memory
search), and the scope's long-term summaries (the compaction worker's).

A memory is cited by its id and the number of the revision that made its current
text (revisions are numbered from 1 in the order written, as a rollback names
them); its sources are the archived turns whose events its applied revisions
came from, oldest first. A memory written directly, or whose turns compaction
has since folded, has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.db.memory_reads import MEMORY_COLUMNS
from shared.db.memory_rows import COMPACTED_ENTITY, MemoryRow
from shared.db.run import Statement, Steps
from shared.db.search_filters import memory_filter
from shared.memory.ranking import Scope


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


# A memory's citation, as two more columns of a statement over `memories m`: the
# number of the revision that made its text, and the turns its applied revisions'
# events archived (JSON, oldest revision first). Each turn is found by its event
# alone (`OFFSET 0` keeps the app and user out of that lookup): given them, a
# planner with stale statistics walked all the user's episodes per revision.
CITED_COLUMNS = """,
    (SELECT max(r.n) FROM (
        SELECT applied, row_number() OVER (ORDER BY id) AS n
        FROM memory_revisions WHERE memory_id = m.id
    ) r WHERE r.applied) AS cited_revision,
    (SELECT json_agg(json_build_object(
                'episode_id', e.id, 'turn_id', e.turn_id, 'session_id', e.session_id,
                'created_at', e.created_at) ORDER BY r.id)
     FROM memory_revisions r CROSS JOIN LATERAL (
         SELECT * FROM episodes WHERE event_id = r.event_id OFFSET 0
     ) e
     WHERE r.memory_id = m.id AND r.applied AND e.app = m.app AND e.user_id = m.user_id
    ) AS cited_sources"""


def pop_cited(row: dict[str, Any]) -> Cited:
    """The citation of a row with `CITED_COLUMNS`, taken out of it."""
    turns: list[SourceTurn] = []
    for source in row.pop("cited_sources") or []:
        if all(t.episode_id != source["episode_id"] for t in turns):
            at = datetime.fromisoformat(source["created_at"])
            turns.append(
                SourceTurn(source["episode_id"], source["turn_id"], source["session_id"], at)
            )
    return Cited(row.pop("cited_revision") or 0, tuple(turns))


def long_term_summaries(scope: Scope, citations: dict[str, Cited]) -> Steps[list[MemoryRow]]:
    """The live long-term summaries `scope` may see (the user's global one and its
    project's, and its agent's of each), the project's first; where each comes
    from, into `citations`."""
    whose = Scope(scope.app, scope.user_id, scope.project_id, agent_id=scope.agent_id)
    where, params = memory_filter(whose, None)
    params["entity"] = COMPACTED_ENTITY
    rows = yield Statement(
        f"""SELECT {MEMORY_COLUMNS}{CITED_COLUMNS} FROM memories m
        WHERE {where} AND m.entity_name = %(entity)s ORDER BY m.scope = 'global', m.id""",
        params,
    )
    summaries = []
    for row in rows:
        citations[row["id"]] = pop_cited(row)
        summaries.append(MemoryRow.from_row(row))
    return summaries
