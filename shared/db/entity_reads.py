"""What the API reads of a user's entities: a page of them with their aliases and
mention counts, and one with its facts over time, the memories and the turns
that mention it. A project's entities are seen by a read naming that project
(with the user's global ones), as memories are by a search."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from shared.db.run import Statement, Steps, fetch

# The entities of the read's project and the global ones, not merged away.
_SEEN = (
    "e.app = %(app)s AND e.user_id = %(user_id)s AND e.project_id IN (%(project_id)s, '') "
    "AND e.merged_into IS NULL"
)
# A mention, fact or entity counted as of %(as_of)s (NULL: now).
_BY_THEN = "(%(as_of)s::timestamptz IS NULL OR {column} <= %(as_of)s)"
TURNS_SHOWN = 50
# Facts with their subject's and object's names (`f` the fact).
_FACTS = (
    "SELECT f.id::text AS id, f.subject_id::text AS subject_id, s.name AS subject, "
    "f.predicate, f.object_id::text AS object_id, o.name AS object, f.value, "
    "f.valid_from, f.valid_to, f.memory_id::text AS memory_id "
    "FROM entity_facts f JOIN entities s ON s.id = f.subject_id "
    "LEFT JOIN entities o ON o.id = f.object_id"
)


@dataclass(frozen=True)
class EntityQuery:
    app: str
    user_id: str
    project_id: str
    kind: str | None = None
    as_of: datetime | None = None


def _params(q: EntityQuery) -> dict[str, Any]:
    return {
        "app": q.app,
        "user_id": q.user_id,
        "project_id": q.project_id,
        "kind": q.kind,
        "as_of": q.as_of,
    }


_ENTITY = f"""
SELECT e.id::text AS id, e.name, e.kind, e.project_id, e.first_seen,
       (SELECT array_agg(a.alias ORDER BY a.alias) FROM entity_aliases a
        WHERE a.entity_id = e.id) AS aliases,
       (SELECT count(*) FILTER (WHERE em.memory_id IS NOT NULL) FROM entity_mentions em
        WHERE em.entity_id = e.id AND {_BY_THEN.format(column="em.observed_at")}) AS memories,
       (SELECT count(*) FILTER (WHERE em.episode_id IS NOT NULL) FROM entity_mentions em
        WHERE em.entity_id = e.id AND {_BY_THEN.format(column="em.observed_at")}) AS turns,
       coalesce((SELECT max(em.observed_at) FROM entity_mentions em
        WHERE em.entity_id = e.id AND {_BY_THEN.format(column="em.observed_at")}),
        e.first_seen) AS last_seen
FROM entities e"""


def page(
    conn: psycopg.Connection, q: EntityQuery, after: tuple[str, str] | None, limit: int
) -> list[dict[str, Any]]:
    """The entities in name order (then id), after `after` (name, id), at most `limit`;
    with `as_of`, those seen by then, counted by then."""
    params = _params(q) | {"limit": limit}
    where = [_SEEN, _BY_THEN.format(column="e.first_seen")]
    if q.kind:
        where.append("e.kind = %(kind)s")
    if after is not None:
        params["after_name"], params["after_id"] = after
        where.append("(lower(e.name), e.id) > (lower(%(after_name)s), %(after_id)s::uuid)")
    return fetch(
        conn,
        f"{_ENTITY} WHERE {' AND '.join(where)} ORDER BY lower(e.name), e.id LIMIT %(limit)s",
        params,
    )


def detail(conn: psycopg.Connection, q: EntityQuery, entity_id: str) -> dict[str, Any] | None:
    """One entity with its aliases (and how each was taken), its facts (with
    `as_of`, those true then), the memories and the latest `TURNS_SHOWN` turns
    that mention it; None if the read may not see it."""
    params = _params(q) | {"id": entity_id}
    found = fetch(conn, f"{_ENTITY} WHERE {_SEEN} AND e.id = %(id)s", params)
    if not found:
        return None
    entity = found[0]
    entity["alias_sources"] = fetch(
        conn,
        "SELECT alias, how FROM entity_aliases WHERE entity_id = %(id)s ORDER BY alias",
        params,
    )
    true_then = (
        " AND f.valid_from <= %(as_of)s AND (f.valid_to IS NULL OR f.valid_to > %(as_of)s)"
        if q.as_of is not None
        else ""
    )
    entity["facts"] = fetch(
        conn,
        f"{_FACTS} WHERE (f.subject_id = %(id)s OR f.object_id = %(id)s){true_then} "
        "ORDER BY f.valid_from, f.id",
        params,
    )
    entity["memory_rows"] = fetch(
        conn,
        "SELECT m.id::text AS id, m.kind, m.text, m.observed_at, m.valid_to IS NULL AS live "
        "FROM entity_mentions em JOIN memories m ON m.id = em.memory_id "
        f"WHERE em.entity_id = %(id)s AND {_BY_THEN.format(column='em.observed_at')} "
        "ORDER BY m.observed_at DESC, m.id",
        params,
    )
    entity["turn_rows"] = fetch(
        conn,
        "SELECT p.id::text AS id, p.session_id, p.turn_id, p.created_at, p.text "
        "FROM entity_mentions em JOIN episodes p ON p.id = em.episode_id "
        f"WHERE em.entity_id = %(id)s AND {_BY_THEN.format(column='em.observed_at')} "
        f"ORDER BY p.created_at DESC, p.id LIMIT {TURNS_SHOWN}",
        params,
    )
    return entity


@dataclass(frozen=True)
class MemoryLinks:
    """What a memory and the entities point at each other by: the entities it
    mentions and the facts it states (each with when it held)."""

    entities: list[dict[str, Any]]
    facts: list[dict[str, Any]]


def of_memory(app: str, user_id: str, memory_id: str) -> Steps[MemoryLinks]:
    """The entities a memory mentions (by name) and the facts it states (in valid
    time, the ended ones too)."""
    params = {"memory": memory_id, "app": app, "user_id": user_id}
    entities = yield Statement(
        "SELECT e.id::text AS id, e.name, e.kind, e.project_id FROM entity_mentions em "
        "JOIN entities e ON e.id = em.entity_id WHERE em.memory_id = %(memory)s "
        "AND em.app = %(app)s AND em.user_id = %(user_id)s ORDER BY lower(e.name), e.id",
        params,
    )
    facts = yield Statement(
        f"{_FACTS} WHERE f.memory_id = %(memory)s AND f.app = %(app)s "
        "AND f.user_id = %(user_id)s ORDER BY f.valid_from, f.id",
        params,
    )
    return MemoryLinks(entities, facts)
