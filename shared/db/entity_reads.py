"""What the API reads of a user's entities: a page of them with their aliases and
mention counts, and one with its facts over time, the memories and the turns
that mention it. A project's entities are seen by a read naming that project
(with the user's global ones), as memories are by a search; and, as memories
are, by agent (`shared.memory.agents`): a read sees an entity that a memory or
turn it sees mentions, and only those memories and turns, the facts they state,
and the names they say (`shared.entities.shown`). An entity no row mentions any
more (its turns compacted away) is shown to a read naming no agent only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from shared.db.entity_seen import FACT_SEEN, MENTION_SEEN
from shared.db.run import Statement, Steps, fetch
from shared.entities.shown import Alias, shown
from shared.memory.agents import visible_to

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
    agent: str = ""  # the agent reading ('' none: the user's rows only)


def _params(q: EntityQuery) -> dict[str, Any]:
    return {
        "app": q.app,
        "user_id": q.user_id,
        "project_id": q.project_id,
        "kind": q.kind,
        "as_of": q.as_of,
        "agent": q.agent,
        "agents": list(visible_to(q.agent)),
    }


# An entity a mention the read sees names, or (for a read naming no agent) one no
# row mentions any more.
_VISIBLE = "(s.seen > 0 OR (%(agent)s::text = '' AND NOT s.hidden))"
# An entity as the read sees it: `sort_name` is its own name (the listing's order),
# `seen`/`hidden` the mentions it sees and whether it misses some, `surfaces` what
# those say; its kind, when it misses some, the first known kind of those it sees
# (as the entity's own is the first known kind of all); counts and last seen by
# `as_of`.
_ENTITY = f"""
SELECT e.id::text AS id, e.name AS sort_name, e.name,
       CASE WHEN s.hidden THEN coalesce(s.seen_kind, 'other') ELSE e.kind END AS kind,
       e.project_id,
       CASE WHEN s.hidden THEN s.seen_first ELSE e.first_seen END AS first_seen,
       coalesce(s.last_seen, CASE WHEN s.hidden THEN s.seen_first ELSE e.first_seen END)
         AS last_seen,
       s.memories, s.turns, s.seen, s.hidden, s.surfaces,
       (SELECT array_agg(ARRAY[a.alias, a.normalised, a.how]) FROM entity_aliases a
        WHERE a.entity_id = e.id) AS alias_rows
FROM entities e CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE k.seen) AS seen,
           coalesce(bool_or(NOT k.seen), false) AS hidden,
           array_agg(DISTINCT k.surface) FILTER (WHERE k.seen) AS surfaces,
           (array_agg(k.kind ORDER BY k.observed_at, k.id)
              FILTER (WHERE k.seen AND k.kind <> 'other'))[1] AS seen_kind,
           min(k.observed_at) FILTER (WHERE k.seen) AS seen_first,
           count(*) FILTER (WHERE k.seen AND k.by_then AND k.memory) AS memories,
           count(*) FILTER (WHERE k.seen AND k.by_then AND NOT k.memory) AS turns,
           max(k.observed_at) FILTER (WHERE k.seen AND k.by_then) AS last_seen
    FROM (SELECT em.id, em.surface, em.kind, em.observed_at, em.memory_id IS NOT NULL AS memory,
                 {_BY_THEN.format(column="em.observed_at")} AS by_then, {MENTION_SEEN} AS seen
          FROM entity_mentions em WHERE em.entity_id = e.id) k) s"""


def _named(row: dict[str, Any]) -> dict[str, Any]:
    """The entity `row` with the name and aliases the read may see."""
    aliases = [Alias(*a) for a in row.pop("alias_rows") or []]
    seen = shown(row["name"], aliases, row.pop("surfaces") or [], row.pop("hidden"))
    row["name"] = seen.name
    row["aliases"] = [a.alias for a in seen.aliases]
    row["alias_sources"] = [{"alias": a.alias, "how": a.how} for a in seen.aliases]
    return row


def page(
    conn: psycopg.Connection, q: EntityQuery, after: tuple[str, str] | None, limit: int
) -> list[dict[str, Any]]:
    """The entities in name order (their own names, then id), after `after` (a
    `sort_name` and id), at most `limit`; with `as_of`, those seen by then, counted
    by then."""
    params = _params(q) | {"limit": limit}
    where = [_SEEN, _VISIBLE]
    if after is not None:
        params["after_name"], params["after_id"] = after
        where.append("(lower(e.name), e.id) > (lower(%(after_name)s), %(after_id)s::uuid)")
    rows = fetch(
        conn,
        f"SELECT * FROM ({_ENTITY} WHERE {' AND '.join(where)}) x "
        "WHERE (%(as_of)s::timestamptz IS NULL OR first_seen <= %(as_of)s) "
        "AND (%(kind)s::text IS NULL OR kind = %(kind)s) "
        "ORDER BY lower(sort_name), id::uuid LIMIT %(limit)s",
        params,
    )
    return [_named(r) for r in rows]


def detail(conn: psycopg.Connection, q: EntityQuery, entity_id: str) -> dict[str, Any] | None:
    """One entity with its aliases (and how each was taken), its facts (with
    `as_of`, those true then), the memories and the latest `TURNS_SHOWN` turns
    that mention it, of those the read sees; None if the read may not see it."""
    params = _params(q) | {"id": entity_id}
    found = fetch(conn, f"{_ENTITY} WHERE {_SEEN} AND {_VISIBLE} AND e.id = %(id)s", params)
    if not found:
        return None
    entity = _named(found[0])
    true_then = (
        " AND f.valid_from <= %(as_of)s AND (f.valid_to IS NULL OR f.valid_to > %(as_of)s)"
        if q.as_of is not None
        else ""
    )
    entity["facts"] = _facts_named(
        conn,
        fetch(
            conn,
            f"{_FACTS} WHERE (f.subject_id = %(id)s OR f.object_id = %(id)s) "
            f"AND {FACT_SEEN}{true_then} ORDER BY f.valid_from, f.id",
            params,
        ),
        params,
    )
    entity["memory_rows"] = fetch(
        conn,
        "SELECT m.id::text AS id, m.kind, m.text, m.observed_at, m.valid_to IS NULL AS live "
        "FROM entity_mentions em JOIN memories m ON m.id = em.memory_id "
        f"WHERE em.entity_id = %(id)s AND {_BY_THEN.format(column='em.observed_at')} "
        "AND m.agent_id = ANY(%(agents)s) ORDER BY m.observed_at DESC, m.id",
        params,
    )
    entity["turn_rows"] = fetch(
        conn,
        "SELECT p.id::text AS id, p.session_id, p.turn_id, p.created_at, p.text "
        "FROM entity_mentions em JOIN episodes p ON p.id = em.episode_id "
        f"WHERE em.entity_id = %(id)s AND {_BY_THEN.format(column='em.observed_at')} "
        "AND p.agent_id = ANY(%(agents)s) "
        f"ORDER BY p.created_at DESC, p.id LIMIT {TURNS_SHOWN}",
        params,
    )
    return entity


def _facts_named(
    conn: psycopg.Connection, facts: list[dict[str, Any]], params: dict[str, Any]
) -> list[dict[str, Any]]:
    """`facts` with their subjects and objects called what the read may call them."""
    ids = {f["subject_id"] for f in facts} | {f["object_id"] for f in facts if f["object_id"]}
    if not ids:
        return facts
    rows = fetch(
        conn,
        f"{_ENTITY} WHERE e.app = %(app)s AND e.user_id = %(user_id)s "
        "AND e.id = ANY(%(ids)s::uuid[])",
        params | {"ids": sorted(ids)},
    )
    return _called(facts, {r["id"]: _named(r)["name"] for r in rows})


def _called(facts: list[dict[str, Any]], names: dict[str, str]) -> list[dict[str, Any]]:
    """`facts` with each subject and object called by its name in `names` (id → name)."""
    for f in facts:
        f["subject"] = names.get(f["subject_id"], f["subject"])
        if f["object_id"]:
            f["object"] = names.get(f["object_id"], f["object"])
    return facts


@dataclass(frozen=True)
class MemoryLinks:
    """What a memory and the entities point at each other by: the entities it
    mentions and the facts it states (each with when it held)."""

    entities: list[dict[str, Any]]
    facts: list[dict[str, Any]]


def of_memory(app: str, user_id: str, memory_id: str) -> Steps[MemoryLinks]:
    """The entities a memory mentions (by the names its owner's rows say: another
    agent's never) and the facts it states (in valid time, the ended ones too)."""
    params: dict[str, Any] = {"memory": memory_id, "app": app, "user_id": user_id}
    owner = yield Statement(
        "SELECT agent_id FROM memories WHERE id = %(memory)s AND app = %(app)s "
        "AND user_id = %(user_id)s",
        params,
    )
    agent = str(owner[0]["agent_id"]) if owner else ""
    params |= {"agent": agent, "agents": list(visible_to(agent)), "as_of": None}
    entities = yield Statement(
        f"{_ENTITY} WHERE e.id IN (SELECT em.entity_id FROM entity_mentions em "
        "WHERE em.memory_id = %(memory)s AND em.app = %(app)s AND em.user_id = %(user_id)s)",
        params,
    )
    named = [{k: r[k] for k in ("id", "name", "kind", "project_id")} for r in map(_named, entities)]
    named.sort(key=lambda e: (e["name"].lower(), e["id"]))
    facts = yield Statement(
        f"{_FACTS} WHERE f.memory_id = %(memory)s AND f.app = %(app)s "
        "AND f.user_id = %(user_id)s ORDER BY f.valid_from, f.id",
        params,
    )
    return MemoryLinks(named, _called(facts, {e["id"]: e["name"] for e in named}))
