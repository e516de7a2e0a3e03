"""API keys: creation, lookup and revocation.

A key is `am_` followed by 43 URL-safe characters (256 random bits). Only its
SHA-256 is stored; the key itself is shown once, when it is created.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime

import psycopg

from shared.identifiers import identifier_problem

KEY_PREFIX = "am_"
SHOWN_PREFIX = 10  # characters of a key kept in clear, to recognise it in `keys list`


@dataclass(frozen=True)
class ApiKey:
    id: str
    app: str
    name: str
    prefix: str
    admin: bool
    created_at: datetime
    revoked_at: datetime | None


def key_hash(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def create_key(
    conn: psycopg.Connection, app: str, admin: bool = False, name: str = ""
) -> tuple[str, ApiKey]:
    """Store a new key of `app`; returns the key (never stored) and its record."""
    problem = identifier_problem(app)
    if problem:
        raise ValueError(f"app: {problem}")
    key = new_key()
    row = conn.execute(
        "INSERT INTO api_keys (app, name, key_hash, prefix, admin) VALUES (%s, %s, %s, %s, %s) "
        "RETURNING id, app, name, prefix, admin, created_at, revoked_at",
        (app, name, key_hash(key), key[:SHOWN_PREFIX], admin),
    ).fetchone()
    return key, _record(row)


def list_keys(conn: psycopg.Connection, app: str | None = None) -> list[ApiKey]:
    rows = conn.execute(
        "SELECT id, app, name, prefix, admin, created_at, revoked_at FROM api_keys "
        "WHERE %(app)s::text IS NULL OR app = %(app)s ORDER BY app, created_at",
        {"app": app},
    ).fetchall()
    return [_record(r) for r in rows]


def revoke_key(conn: psycopg.Connection, key_id: str) -> bool:
    """Revoke the key; False if no live key has this id."""
    try:
        uuid.UUID(key_id)
    except ValueError:
        return False
    row = conn.execute(
        "UPDATE api_keys SET revoked_at = now() WHERE id = %s AND revoked_at IS NULL RETURNING id",
        (key_id,),
    ).fetchone()
    return row is not None


def _record(row: tuple) -> ApiKey:
    return ApiKey(str(row[0]), row[1], row[2], row[3], row[4], row[5], row[6])


LOOKUP_SQL = "SELECT app, admin FROM api_keys WHERE key_hash = %s AND revoked_at IS NULL"
