"""Making a retired memory live again: the rollback of one that `wrong` feedback
retired (`shared.memory.restoring`). Its id, history and feedback stay; it takes
the text and fields of the revision rolled back to, as a new revision (`UPDATED`,
the change `ROLLED_BACK`, its source the caller), and names its entities and fact
again from then on. In the caller's transaction, which holds the user's lock.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from shared.db.entities import Entities, Owner
from shared.db.memories import Memories
from shared.db.memory_reads import MEMORY_COLUMNS
from shared.db.memory_rows import MemoryEdit, MemoryRow
from shared.db.pool import as_vector
from shared.db.run import fetch
from shared.llm.base import Action


def reopen(
    conn: psycopg.Connection, memory: MemoryRow, edit: MemoryEdit, embedding: Any
) -> MemoryRow | None:
    """The retired `memory` live again as `edit` leaves it (`embedding`: its new
    text's; None: the text is kept); None if it is not retired any more."""
    rows = fetch(
        conn,
        f"""
        UPDATE memories AS m SET valid_to = NULL, text = %s, kind = %s, entity_name = %s,
               topic = %s, metadata = %s, expire_at = %s,
               embedding = coalesce(%s, m.embedding), observed_at = %s,
               updated_at = now(), source_event_id = NULL
        WHERE m.id = %s AND m.valid_to IS NOT NULL
        RETURNING {MEMORY_COLUMNS}
        """,
        (
            edit.text,
            edit.kind,
            edit.entity_name,
            edit.topic,
            Jsonb(edit.metadata),
            edit.expire_at,
            as_vector(embedding),
            edit.observed_at,
            memory.id,
        ),
    )
    if not rows:
        return None
    restored = MemoryRow.from_row(rows[0])
    Memories(conn).revise(
        restored,
        Action.UPDATED,
        memory.text,
        edit.text,
        None,
        edit.observed_at,
        change=edit.change,
        source=edit.source,
    )
    owner = Owner(restored.app, restored.user_id, restored.project_id)
    Entities(conn).link_memory(owner, restored.id, restored.text, restored.observed_at, None)
    return restored
