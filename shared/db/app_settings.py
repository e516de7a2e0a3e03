"""An app's settings that its admin key changes through the API (`app_settings`):
one JSON document per app and name (`ttl`, `extraction`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb


class AppSettings:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def get(self, app: str, name: str) -> dict[str, Any] | None:
        row = self.conn.execute(
            "SELECT value FROM app_settings WHERE app = %s AND name = %s", (app, name)
        ).fetchone()
        return row[0] if row else None

    def get_at(self, app: str, name: str) -> tuple[dict[str, Any] | None, datetime]:
        """`get`, and the database's time of reading: the one clock that decisions
        made from the setting (a memory's expiry) go by, whatever the caller's."""
        row = self.conn.execute(
            "SELECT now(), (SELECT value FROM app_settings WHERE app = %s AND name = %s)",
            (app, name),
        ).fetchone()
        assert row is not None  # a SELECT without FROM has one row
        return row[1], row[0]

    def put(self, app: str, name: str, value: dict[str, Any]) -> None:
        self.conn.execute(
            "INSERT INTO app_settings (app, name, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (app, name) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
            (app, name, Jsonb(value)),
        )
