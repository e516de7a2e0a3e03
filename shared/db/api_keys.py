"""The API keys repository: a key's SHA-256, its app, its role, whether it is
revoked. The key itself is never stored."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import psycopg
from psycopg.rows import tuple_row

from shared.db.run import Statement, Steps, run

LOOKUP_SQL = (
    "SELECT app, admin, id::text, agent_id FROM api_keys WHERE key_hash = %s AND revoked_at IS NULL"
)
_COLUMNS = "id, app, name, prefix, admin, created_at, revoked_at, agent_id"


@dataclass(frozen=True)
class ApiKey:
    id: str
    app: str
    name: str
    prefix: str
    admin: bool
    created_at: datetime
    revoked_at: datetime | None
    agent_id: str = ""  # the one agent it acts as ('' any)


class Holder(NamedTuple):
    """What a live key is: its app, whether it is an admin key, its id (what an
    edit made with it names as its source) and the agent it is limited to ('' none)."""

    app: str
    admin: bool
    key_id: str
    agent_id: str = ""


def lookup(digest: bytes) -> Steps[Holder | None]:
    """The live key whose SHA-256 is `digest`; None for an unknown or revoked key.
    Run on the API's event loop by every authenticated request that misses the key
    cache, and by `agent-memory up`."""
    rows = yield Statement(LOOKUP_SQL, (digest,), tuple_row)
    return Holder(rows[0][0], bool(rows[0][1]), rows[0][2], rows[0][3]) if rows else None


def _record(row: tuple) -> ApiKey:
    return ApiKey(str(row[0]), row[1], row[2], row[3], row[4], row[5], row[6], row[7])


class ApiKeys:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def insert(
        self, app: str, name: str, digest: bytes, prefix: str, admin: bool, agent_id: str = ""
    ) -> ApiKey:
        row = self.conn.execute(
            "INSERT INTO api_keys (app, name, key_hash, prefix, admin, agent_id) "
            f"VALUES (%s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
            (app, name, digest, prefix, admin, agent_id),
        ).fetchone()
        assert row is not None  # an INSERT ... RETURNING gives its row
        return _record(row)

    def of_app(self, app: str | None = None) -> list[ApiKey]:
        """The keys of `app` (of every app when None), by app, oldest first."""
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM api_keys "
            "WHERE %(app)s::text IS NULL OR app = %(app)s ORDER BY app, created_at",
            {"app": app},
        ).fetchall()
        return [_record(r) for r in rows]

    def revoke(self, key_id: str) -> bool:
        """Revoke the key; False if no live key has this id (a valid UUID)."""
        row = self.conn.execute(
            "UPDATE api_keys SET revoked_at = now() WHERE id = %s AND revoked_at IS NULL "
            "RETURNING id",
            (key_id,),
        ).fetchone()
        return row is not None

    def lookup(self, digest: bytes) -> Holder | None:
        """`lookup` on this connection."""
        return run(self.conn, lookup(digest))
