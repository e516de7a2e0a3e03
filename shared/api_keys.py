"""API keys: creation, lookup and revocation.

A key is `am_` followed by 43 URL-safe characters (256 random bits). Only its
SHA-256 is stored (`shared.db.api_keys`); the key itself is shown once, when it
is created.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid

import psycopg

from shared.db.api_keys import ApiKey, ApiKeys
from shared.identifiers import identifier_problem

__all__ = [
    "KEY_PREFIX",
    "SHOWN_PREFIX",
    "ApiKey",
    "create_key",
    "key_hash",
    "list_keys",
    "new_key",
    "revoke_key",
]

KEY_PREFIX = "am_"
SHOWN_PREFIX = 10  # characters of a key kept in clear, to recognise it in `keys list`


def key_hash(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def create_key(
    conn: psycopg.Connection,
    app: str,
    admin: bool = False,
    name: str = "",
    agent_id: str | None = None,
) -> tuple[str, ApiKey]:
    """Store a new key of `app`; returns the key (never stored) and its record. With
    `agent_id` the key acts as that agent only (an app's admin key is never one); an
    empty one is refused, not taken for none: the caller meant to limit the key."""
    problem = identifier_problem(app)
    if problem:
        raise ValueError(f"app: {problem}")
    if agent_id is not None:
        problem = identifier_problem(agent_id)
        if problem:
            raise ValueError(f"agent: {problem}")
        if admin:
            raise ValueError("agent: an admin key serves the whole app, not one agent")
    key = new_key()
    digest, shown = key_hash(key), key[:SHOWN_PREFIX]
    return key, ApiKeys(conn).insert(app, name, digest, shown, admin, agent_id or "")


def list_keys(conn: psycopg.Connection, app: str | None = None) -> list[ApiKey]:
    return ApiKeys(conn).of_app(app)


def revoke_key(conn: psycopg.Connection, key_id: str) -> bool:
    """Revoke the key; False if no live key has this id."""
    try:
        uuid.UUID(key_id)
    except ValueError:
        return False
    return ApiKeys(conn).revoke(key_id)
