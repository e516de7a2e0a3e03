"""The feedback repository: callers' feedback on a memory (useful, not useful,
wrong), each kept as given (migration 0018).

A caller (`source`, 'key:<id>' of its API key) may give feedback again: every one
is recorded, and the caller's latest is the one that counts (`tally`, and the
ranking's `BALANCE_SQL`). A `wrong` feedback retires the memory
(`shared.memory.feedback`) and keeps the events of the turns that wrote its texts:
while it stands, consolidation does not write those turns into the same memory
again (`suppressing`); a rollback that makes the memory live again ends it
(`restore`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from shared.db.memory_rows import MemoryRow
from shared.db.run import Statement, Steps, fetch

RATINGS = ("useful", "not_useful", "wrong")
# The longest reason kept, in characters.
MAX_REASON = 1000

# Per memory `m` of the ranked query: (useful - not useful) / (both + 1) over each
# caller's latest feedback, strictly between -1 and 1 (0: none); a `wrong` counts
# as neither. The search multiplies a memory's fused score by 1 + weight * this.
BALANCE_SQL = """(
    SELECT (count(*) FILTER (WHERE l.rating = 'useful')
            - count(*) FILTER (WHERE l.rating = 'not_useful'))::float8
           / (count(*) FILTER (WHERE l.rating <> 'wrong') + 1)
    FROM (SELECT DISTINCT ON (b.source) b.rating FROM memory_feedback b
          WHERE b.memory_id = m.id ORDER BY b.source, b.id DESC) l
)"""

# A text compared without case or extra spaces.
_FOLDED = "lower(regexp_replace(btrim({text}), '\\s+', ' ', 'g'))"

_COLUMNS = (
    "id, memory_id::text AS memory_id, rating, reason, source, restored_at, created_at, "
    "source_events::text[] AS source_events"
)


@dataclass(frozen=True)
class FeedbackRow:
    id: int
    memory_id: str
    rating: str
    reason: str
    source: str
    restored_at: datetime | None
    created_at: datetime
    source_events: list[str]


def _rows(rows: list[dict[str, Any]]) -> list[FeedbackRow]:
    return [FeedbackRow(**row) for row in rows]


def of_memory(app: str, user_id: str, memory_id: str) -> Steps[list[FeedbackRow]]:
    """The memory's feedback, oldest first (the console's read, on either pool)."""
    rows = yield Statement(
        f"SELECT {_COLUMNS} FROM memory_feedback "
        "WHERE app = %s AND user_id = %s AND memory_id = %s ORDER BY id",
        (app, user_id, memory_id),
    )
    return _rows(rows)


class Feedback:
    """Plain SQL over one connection (the caller's transaction, which holds the
    user's lock for a write)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def record(
        self, memory: MemoryRow, rating: str, reason: str, source: str, events: list[str]
    ) -> FeedbackRow:
        """Feedback on `memory` by `source`; `events`: the turns a wrong one holds back."""
        rows = fetch(
            self.conn,
            "INSERT INTO memory_feedback (memory_id, app, user_id, rating, reason, source, "
            f"source_events) VALUES (%s, %s, %s, %s, %s, %s, %s::uuid[]) RETURNING {_COLUMNS}",
            (memory.id, memory.app, memory.user_id, rating, reason, source, events),
        )
        return _rows(rows)[0]

    def tally(self, memory_id: str) -> dict[str, int]:
        """How many callers' latest feedback on the memory is each rating."""
        rows = self.conn.execute(
            "SELECT l.rating, count(*) FROM (SELECT DISTINCT ON (source) rating "
            "FROM memory_feedback WHERE memory_id = %s ORDER BY source, id DESC) l "
            "GROUP BY l.rating",
            (memory_id,),
        ).fetchall()
        return {rating: 0 for rating in RATINGS} | {rating: n for rating, n in rows}

    def source_events(self, memory_id: str) -> list[str]:
        """The events of the turns (or generate requests) whose texts the memory took."""
        rows = self.conn.execute(
            "SELECT DISTINCT event_id::text FROM memory_revisions WHERE memory_id = %s "
            "AND applied AND new_text IS NOT NULL AND event_id IS NOT NULL ORDER BY 1",
            (memory_id,),
        ).fetchall()
        return [row[0] for row in rows]

    def standing(self, memory_id: str) -> FeedbackRow | None:
        """The `wrong` feedback that retired the memory, if no rollback undid it."""
        rows = fetch(
            self.conn,
            f"SELECT {_COLUMNS} FROM memory_feedback WHERE memory_id = %s "
            "AND rating = 'wrong' AND restored_at IS NULL ORDER BY id DESC LIMIT 1",
            (memory_id,),
        )
        found = _rows(rows)
        return found[0] if found else None

    def restore(self, feedback_id: int, at: datetime) -> None:
        """The retirement `feedback_id` made is undone: it no longer holds turns back."""
        self.conn.execute(
            "UPDATE memory_feedback SET restored_at = %s WHERE id = %s", (at, feedback_id)
        )

    def suppressing(
        self, app: str, user_id: str, event_id: str, entity_name: str, texts: list[str]
    ) -> str | None:
        """The memory a standing `wrong` feedback retired that the turn of `event_id`
        wrote and that a candidate of it (of this entity, or with one of these texts,
        compared without case or extra spaces) would write again; None if none."""
        row = self.conn.execute(
            f"""
            SELECT f.memory_id::text FROM memory_feedback f JOIN memories m ON m.id = f.memory_id
            WHERE f.app = %(app)s AND f.user_id = %(user_id)s AND f.rating = 'wrong'
              AND f.restored_at IS NULL AND %(event)s::uuid = ANY (f.source_events)
              AND ((%(entity)s <> '' AND lower(m.entity_name) = lower(%(entity)s))
                   OR EXISTS (SELECT 1 FROM memory_revisions r WHERE r.memory_id = m.id
                              AND r.new_text IS NOT NULL
                              AND {_FOLDED.format(text="r.new_text")} IN (
                                  SELECT {_FOLDED.format(text="t")}
                                  FROM unnest(%(texts)s::text[]) t)))
            ORDER BY f.id DESC LIMIT 1
            """,
            {
                "app": app,
                "user_id": user_id,
                "event": event_id,
                "entity": entity_name.strip(),
                "texts": texts,
            },
        ).fetchone()
        return row[0] if row else None
