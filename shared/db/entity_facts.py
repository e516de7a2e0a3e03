"""Facts over valid time, in the caller's transaction (which holds the user's
lock): recording one closes what it replaces at its own `valid_from`
(`shared.entities.facts.timed`), never deleting or overwriting a fact, and a
late one never closes a newer fact.
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from shared.entities.facts import Held, Stated, timed


def _held(conn: psycopg.Connection, fact: Stated) -> list[Held]:
    rows = conn.execute(
        "SELECT id::text, value, valid_from, valid_to FROM entity_facts "
        "WHERE subject_id = %s AND predicate = %s ORDER BY valid_from, id",
        (fact.subject_id, fact.predicate),
    ).fetchall()
    return [Held(*row) for row in rows]


def _end(conn: psycopg.Connection, ids: tuple[str, ...] | list[str], at: datetime) -> None:
    if ids:
        conn.execute(
            "UPDATE entity_facts SET valid_to = greatest(valid_from, %s) "
            "WHERE id = ANY(%s::uuid[])",
            (at, list(ids)),
        )


def record(
    conn: psycopg.Connection,
    app: str,
    user_id: str,
    fact: Stated,
    valid_from: datetime,
    memory_id: str | None,
    event_id: str | None,
) -> None:
    """Record `fact` as true from `valid_from` (a negated one: the value it names
    ends then), ending what it replaces."""
    held = _held(conn, fact)
    if fact.negated:
        _end(
            conn,
            [
                h.id
                for h in held
                if h.value == fact.value and h.valid_to is None and h.valid_from <= valid_from
            ],
            valid_from,
        )
        return
    rule = timed(valid_from, fact.single, held, fact.value)
    if rule.same is not None:
        return
    _end(conn, rule.closes, valid_from)
    conn.execute(
        "INSERT INTO entity_facts (app, user_id, subject_id, predicate, object_id, value, "
        "single, valid_from, valid_to, memory_id, event_id) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            app,
            user_id,
            fact.subject_id,
            fact.predicate,
            fact.object_id,
            fact.value,
            fact.single,
            valid_from,
            rule.valid_to,
            memory_id,
            event_id,
        ),
    )


def close_of_memory(
    conn: psycopg.Connection, memory_id: str, at: datetime, keep: Stated | None = None
) -> None:
    """End at `at` the memory's facts still open (its text changed or it was retired),
    except one that `keep` states again."""
    rows = conn.execute(
        "SELECT id::text, subject_id::text, predicate, value FROM entity_facts "
        "WHERE memory_id = %s AND valid_to IS NULL AND valid_from <= %s",
        (memory_id, at),
    ).fetchall()
    kept = keep and (keep.subject_id, keep.predicate, keep.value)
    _end(conn, [row[0] for row in rows if tuple(row[1:]) != kept], at)
