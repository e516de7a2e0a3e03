"""The profiles repository: a user's field values (`profile_values`) and their
history (`profile_revisions`). Writes run in the caller's transaction, which holds
the user's lock; each applied change is also a `memory.changed.v1` in the outbox
(`shared.db.outbox.record_profile`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from shared.db import outbox
from shared.db.run import Statement, Steps, fetch

_VALUE_COLUMNS = "field, value, observed_at, updated_at, source, source_event_id"


@dataclass(frozen=True)
class ProfileValueRow:
    field: str
    value: Any  # a JSON string, number or boolean
    observed_at: datetime
    updated_at: datetime
    source: str = ""
    source_event_id: str = ""


@dataclass(frozen=True)
class ProfileRevisionRow:
    id: int
    field: str
    action: str  # SET, CLEARED, HISTORY
    value: Any
    previous: Any
    observed_at: datetime
    applied: bool
    source: str
    source_event_id: str
    created_at: datetime


def profile_of(app: str, user_id: str) -> Steps[list[ProfileValueRow]]:
    """The user's values of the fields the app's schema names, in the schema's
    order (a value of a field the schema dropped is not read); on either kind of
    connection."""
    rows = yield Statement(
        """
        SELECT v.field, v.value, v.observed_at, v.updated_at, v.source, v.source_event_id
        FROM app_settings s
        CROSS JOIN LATERAL jsonb_array_elements(s.value -> 'fields') WITH ORDINALITY AS f(def, n)
        JOIN profile_values v
          ON v.app = s.app AND v.user_id = %s AND v.field = f.def ->> 'name'
        WHERE s.app = %s AND s.name = 'profile'
        ORDER BY f.n
        """,
        (user_id, app),
    )
    return [ProfileValueRow(**row) for row in rows]


def insert_revision(
    conn: psycopg.Connection,
    app: str,
    user_id: str,
    field: str,
    r: Any,
    created_at: datetime | None,
) -> None:
    """A revision of `field` from `r` (anything with a revision's fields: a row, an
    imported record), created at `created_at` (None: now)."""
    conn.execute(
        "INSERT INTO profile_revisions (app, user_id, field, action, value, previous, "
        "observed_at, applied, source, source_event_id, created_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, coalesce(%s, now()))",
        (
            app,
            user_id,
            field,
            r.action,
            None if r.value is None else Jsonb(r.value),
            None if r.previous is None else Jsonb(r.previous),
            r.observed_at,
            r.applied,
            r.source,
            r.source_event_id,
            created_at,
        ),
    )


class Profiles:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def values(self, app: str, user_id: str) -> list[ProfileValueRow]:
        return [
            ProfileValueRow(**row)
            for row in fetch(
                self.conn,
                f"SELECT {_VALUE_COLUMNS} FROM profile_values "
                "WHERE app = %s AND user_id = %s ORDER BY field",
                (app, user_id),
            )
        ]

    def revisions(
        self, app: str, user_id: str, field: str | None = None
    ) -> list[ProfileRevisionRow]:
        """The user's history (of `field` alone, when named), in the order written
        (`shared.profiles.rollback.history` puts it oldest first)."""
        return [
            ProfileRevisionRow(**row)
            for row in fetch(
                self.conn,
                "SELECT id, field, action, value, previous, observed_at, applied, source, "
                "source_event_id, created_at FROM profile_revisions "
                "WHERE app = %s AND user_id = %s AND (%s::text IS NULL OR field = %s) "
                "ORDER BY id",
                (app, user_id, field, field),
            )
        ]

    def put(
        self,
        app: str,
        user_id: str,
        change: ProfileRevisionRow,
        updated_at: datetime | None = None,
    ) -> None:
        """Record `change` (its id and created_at are the database's) and, when it
        applies, make it the field's value and a change event."""
        insert_revision(self.conn, app, user_id, change.field, change, None)
        if not change.applied:
            return
        if change.action == "CLEARED":
            self.conn.execute(
                "DELETE FROM profile_values WHERE app = %s AND user_id = %s AND field = %s",
                (app, user_id, change.field),
            )
        else:
            self.conn.execute(
                f"INSERT INTO profile_values (app, user_id, {_VALUE_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, %s, coalesce(%s, now()), %s, %s) "
                "ON CONFLICT (app, user_id, field) DO UPDATE SET value = EXCLUDED.value, "
                "observed_at = EXCLUDED.observed_at, updated_at = EXCLUDED.updated_at, "
                "source = EXCLUDED.source, source_event_id = EXCLUDED.source_event_id",
                (
                    app,
                    user_id,
                    change.field,
                    Jsonb(change.value),
                    change.observed_at,
                    updated_at,
                    change.source,
                    change.source_event_id,
                ),
            )
        outbox.record_profile(
            self.conn,
            app,
            user_id,
            change.field,
            "DELETED"
            if change.action == "CLEARED"
            else "UPDATED"
            if change.previous is not None  # a previous false or 0 was a value
            else "CREATED",
            change.value,
            change.previous,
            change.source_event_id,
        )

    def erase(self, app: str, user_id: str) -> dict[str, int]:
        """Every value and revision of the user; each value erased is a DELETED change."""
        for row in self.values(app, user_id):
            outbox.record_profile(self.conn, app, user_id, row.field, "DELETED", None, None, "")
        return {
            table: self.conn.execute(
                f"DELETE FROM {table} WHERE app = %s AND user_id = %s", (app, user_id)
            ).rowcount
            for table in ("profile_revisions", "profile_values")
        }
