"""The memories repository: live memories and their revisions.

A memory keeps its id for life. `create` inserts it; `update` changes its text,
embedding and `observed_at` in place; `retire` closes it (`valid_to`), which
takes it out of the live view. Each change writes a revision with the old and
new text, the event that caused it and when that was observed; a revision with
`applied` false records an observation that changed nothing (see
`shared.memory.consolidate`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from shared.db import entity_facts, filter_sql, outbox
from shared.db.entities import Entities, Owner
from shared.db.memory_reads import LIVE, MEMORY_COLUMNS, as_of_columns, time_clauses
from shared.db.memory_rows import MemoryEdit, MemoryRow, NewMemory, PageFilter, Revision
from shared.db.pool import as_vector
from shared.db.run import fetch
from shared.db.user_lock import try_user_lock, user_lock
from shared.llm.base import Action
from shared.memory.filters import Node


def revision_state(memory: MemoryRow) -> dict[str, Any]:
    """What a revision keeps of the memory besides its text."""
    return {
        "kind": memory.kind,
        "entity_name": memory.entity_name,
        "topic": memory.topic,
        "metadata": memory.metadata,
    }


class Memories:
    """Plain SQL over one connection (the caller's transaction)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def lock_user(self, app: str, user_id: str) -> None:
        user_lock(self.conn, app, user_id)

    def try_lock_user(self, app: str, user_id: str) -> bool:
        return try_user_lock(self.conn, app, user_id)

    def _memories(self, sql: str, params: Any) -> list[MemoryRow]:
        return [MemoryRow.from_row(row) for row in fetch(self.conn, sql, params)]

    def _memory(self, sql: str, params: Any) -> MemoryRow | None:
        found = self._memories(sql, params)
        return found[0] if found else None

    def get(self, app: str, user_id: str, memory_id: str) -> MemoryRow | None:
        return self._memory(
            f"SELECT {MEMORY_COLUMNS} FROM memories m "
            "WHERE m.id = %s AND m.app = %s AND m.user_id = %s",
            (memory_id, app, user_id),
        )

    def page(self, where: PageFilter, limit: int) -> list[MemoryRow]:
        """Live memories in creation order, at most `limit` (with `where.time`, those
        live at its `as_of`, as they were then, in its observed range)."""
        params: dict[str, Any] = {"app": where.app, "user_id": where.user_id, "limit": limit}
        live, observed = time_clauses(where.time, params)
        clauses = ["m.app = %(app)s", "m.user_id = %(user_id)s", live + observed]
        clauses.append("m.agent_id = ANY(%(agents)s)")
        params["agents"] = list(where.agents)
        for column in ("project_id", "scope", "kind", "topic"):
            value = getattr(where, column)
            if value:
                clauses.append(f"m.{column} = %({column})s")
                params[column] = value
        if where.after is not None:
            params["after_created"], params["after_id"] = where.after
            clauses.append("(m.created_at, m.id) > (%(after_created)s, %(after_id)s::uuid)")
        columns = as_of_columns(MEMORY_COLUMNS) if "as_of" in params else MEMORY_COLUMNS
        if where.matching is not None:
            clauses.append(filter_sql.where(where.matching, params))
        return self._memories(
            f"SELECT {columns} FROM memories m WHERE {' AND '.join(clauses)} "
            "ORDER BY m.created_at, m.id LIMIT %(limit)s",
            params,
        )

    def live_matching(
        self,
        app: str,
        user_id: str,
        project_id: str,
        query: str,
        matching: Node | None = None,
        agents: tuple[str, ...] = ("",),
    ) -> list[MemoryRow]:
        """The user's live memories whose text holds every word of `query` (full
        text, AND of its lexemes) and that the filter `matching` admits: with a
        project, that project's memories only; without one, global memories only;
        of the owners `agents` (shared.memory.agents.visible_to). Oldest first."""
        params: dict[str, Any] = {"app": app, "user_id": user_id, "query": query}
        if project_id:
            where = "scope = 'project' AND project_id = %(project)s"
            params["project"] = project_id
        else:
            where = "scope = 'global'"
        where += " AND agent_id = ANY(%(agents)s)"
        params["agents"] = list(agents)
        if matching is not None:
            where += " AND " + filter_sql.where(matching, params)
        return self._memories(
            f"""
            SELECT {MEMORY_COLUMNS} FROM memories AS m
            WHERE app = %(app)s AND user_id = %(user_id)s AND {LIVE} AND {where}
              AND plainto_tsquery('english', %(query)s) <> ''::tsquery
              AND tsv @@ plainto_tsquery('english', %(query)s)
            ORDER BY created_at, id
            """,
            params,
        )

    def latest_of_entity(self, new: NewMemory) -> MemoryRow | None:
        """The newest memory, live or closed, of this entity in this exact scope."""
        return self._of_entity(new, "ORDER BY m.observed_at DESC LIMIT 1")

    def live_of_entity(self, new: NewMemory) -> MemoryRow | None:
        return self._of_entity(new, "AND m.valid_to IS NULL")

    def _of_entity(self, new: NewMemory, tail: str) -> MemoryRow | None:
        if not new.entity_name:
            return None
        return self._memory(
            f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.app = %s AND m.user_id = %s "
            "AND m.scope = %s AND m.project_id = %s AND m.session_id = %s AND m.agent_id = %s "
            f"AND lower(m.entity_name) = lower(%s) {tail}",
            (
                new.app,
                new.user_id,
                new.scope,
                new.project_id,
                new.session_id,
                new.agent_id,
                new.entity_name,
            ),
        )

    def create(self, new: NewMemory, event_id: str | None) -> MemoryRow:
        memory = self._memory(
            f"""
            INSERT INTO memories AS m (app, user_id, project_id, session_id, scope, kind,
                                       entity_name, text, embedding, observed_at,
                                       source_event_id, expire_at, topic, metadata, agent_id)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            RETURNING {MEMORY_COLUMNS}
            """,
            (
                new.app,
                new.user_id,
                new.project_id,
                new.session_id,
                new.scope,
                new.kind,
                new.entity_name,
                new.text,
                as_vector(new.embedding),
                new.observed_at,
                event_id,
                new.expire_at,
                new.topic,
                Jsonb(new.metadata),
                new.agent_id,
            ),
        )
        assert memory is not None
        self.revise(memory, Action.CREATED, None, new.text, event_id, new.observed_at)
        self._link(memory, event_id, new)
        return memory

    def _link(self, memory: MemoryRow, event_id: str | None, new: NewMemory | None) -> None:
        """The memory's entities and fact, as of its `observed_at`; with the names
        the model gave and judged in the candidate `new`, if one wrote it."""
        owner = Owner(memory.app, memory.user_id, memory.project_id)
        Entities(self.conn).link_memory(
            owner,
            memory.id,
            memory.text,
            memory.observed_at,
            event_id,
            new.entities if new else (),
            judged=new.judgements if new else (),
        )

    def update(
        self,
        memory: MemoryRow,
        text: str,
        kind: str,
        embedding: Any,
        observed_at: datetime,
        event_id: str | None,
        change: str | None = None,
        expire_at: datetime | None = None,
        metadata: dict[str, Any] | None = None,
        new: NewMemory | None = None,
    ) -> MemoryRow:
        """Change its text in place (`change`: what the outbox calls it, UPDATED by
        default); `expire_at` its new expiry (None: kept); `metadata` keys to set
        over the memory's own (None: kept); `new` the candidate that changed it."""
        updated = self._memory(
            f"""
            UPDATE memories AS m SET text = %s, kind = %s, embedding = %s, observed_at = %s,
                   updated_at = now(), source_event_id = %s,
                   expire_at = coalesce(%s, m.expire_at),
                   metadata = m.metadata || coalesce(%s, '{{}}'::jsonb)
            WHERE m.id = %s AND m.valid_to IS NULL
            RETURNING {MEMORY_COLUMNS}
            """,
            (
                text,
                kind,
                as_vector(embedding),
                observed_at,
                event_id,
                expire_at,
                Jsonb(metadata) if metadata else None,
                memory.id,
            ),
        )
        assert updated is not None
        self.revise(
            updated, Action.UPDATED, memory.text, text, event_id, observed_at, change=change
        )
        self._link(updated, event_id, new)
        return updated

    def edit(
        self, memory: MemoryRow, edit: MemoryEdit, embedding: Any, reopen: bool = False
    ) -> MemoryRow:
        """Set what a caller's edit names (a PATCH, a rollback), with a revision whose
        source is the caller; `embedding` the new text's (None: the text is kept).
        `reopen`: the memory is retired, and is live again after it (the rollback of
        one that wrong feedback retired: `shared.memory.restoring`)."""
        edited = self._memory(
            f"""
            UPDATE memories AS m SET text = %s, kind = %s, entity_name = %s, topic = %s,
                   metadata = %s, expire_at = %s, embedding = coalesce(%s, m.embedding),
                   observed_at = %s, valid_to = NULL,
                   updated_at = now(), source_event_id = NULL
            WHERE m.id = %s AND m.valid_to IS {"NOT NULL" if reopen else "NULL"}
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
        assert edited is not None
        self.revise(
            edited,
            Action.UPDATED,
            memory.text,
            edit.text,
            None,
            edit.observed_at,
            change=edit.change,
            source=edit.source,
        )
        if embedding is not None or reopen:  # a new text (or a retired one) names them anew
            self._link(edited, None, None)
        return edited

    def retire(
        self,
        memory: MemoryRow,
        observed_at: datetime,
        event_id: str | None,
        change: str | None = None,
        source: str = "",
    ) -> MemoryRow:
        """Close the memory; returns it as it is now (with `valid_to`). `change`: what
        the outbox calls it (DELETED by default; retire_expired's is EXPIRED);
        `source`: the caller who retired it ('' the pipeline)."""
        retired = self._memory(
            f"""
            UPDATE memories AS m SET valid_to = now(), updated_at = now(), observed_at = %s
            WHERE m.id = %s AND m.valid_to IS NULL
            RETURNING {MEMORY_COLUMNS}
            """,
            (observed_at, memory.id),
        )
        assert retired is not None
        self.revise(
            memory,
            Action.DELETED,
            memory.text,
            None,
            event_id,
            observed_at,
            change=change,
            source=source,
        )
        entity_facts.close_of_memory(self.conn, memory.id, observed_at)
        return retired

    def revise(
        self,
        memory: MemoryRow,
        action: Action,
        old_text: str | None,
        new_text: str | None,
        event_id: str | None,
        observed_at: datetime,
        applied: bool = True,
        change: str | None = None,
        source: str = "",
    ) -> None:
        """Write the revision; an applied one is also a change for the outbox
        (`change`: what it is called there, the action by default). One that leaves a
        text keeps the memory's other fields as `state` (what a rollback restores)."""
        state = None if new_text is None else Jsonb(revision_state(memory))
        # Kept as long as the app's `revisions` TTL says (none: for good).
        self.conn.execute(
            "INSERT INTO memory_revisions (memory_id, app, user_id, action, old_text, new_text, "
            "event_id, observed_at, applied, source, state, expire_at) VALUES (%s, %s, %s, %s, "
            "%s, %s, %s, %s, %s, %s, %s, "
            "(SELECT now() + make_interval(secs => (value->>'revisions')::float8) "
            "FROM app_settings WHERE app = %s AND name = 'ttl'))",
            (
                memory.id,
                memory.app,
                memory.user_id,
                action,
                old_text,
                new_text,
                event_id,
                observed_at,
                applied,
                source,
                state,
                memory.app,
            ),
        )
        if applied:
            outbox.record(
                self.conn, memory, str(change or action), new_text or "", old_text or "", event_id
            )
        elif new_text:
            # A late observation: what it said was true from its own time on.
            owner = Owner(memory.app, memory.user_id, memory.project_id)
            Entities(self.conn).link_memory(
                owner, memory.id, new_text, observed_at, event_id, late=True
            )

    def revisions(self, memory_id: str) -> list[Revision]:
        rows = fetch(
            self.conn,
            "SELECT memory_id::text AS memory_id, action, old_text, new_text, "
            "event_id::text AS event_id, observed_at, applied, created_at, source, state "
            "FROM memory_revisions WHERE memory_id = %s ORDER BY id",
            (memory_id,),
        )
        return [Revision(**row) for row in rows]

    def expired(self, app: str, limit: int) -> list[tuple[str, str]]:
        """Up to `limit` of the app's live memories past their `expire_at`, soonest
        expired first: (user_id, memory id)."""
        rows = self.conn.execute(
            "SELECT user_id, id::text FROM memories WHERE app = %s AND valid_to IS NULL "
            "AND expire_at <= now() ORDER BY expire_at, id LIMIT %s",
            (app, limit),
        ).fetchall()
        return [(user_id, memory_id) for user_id, memory_id in rows]

    def delete_expired_revisions(self, app: str, limit: int) -> int:
        """Delete up to `limit` of the app's revisions past their `expire_at`; how many."""
        return self.conn.execute(
            "DELETE FROM memory_revisions WHERE id IN (SELECT id FROM memory_revisions "
            "WHERE app = %s AND expire_at <= now() LIMIT %s)",
            (app, limit),
        ).rowcount
