"""The operations repository: long-running requests (`memories:generate`) that a
client polls by name until a worker, or the dead-letter path, ends them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from shared.db.run import fetch


@dataclass(frozen=True)
class OperationRow:
    name: str
    done: bool
    result: dict[str, Any] | None
    error: str | None


class Operations:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def start(self, name: str, app: str, user_id: str, kind: str) -> None:
        self.conn.execute(
            "INSERT INTO operations (name, app, user_id, kind) VALUES (%s, %s, %s, %s)",
            (name, app, user_id, kind),
        )

    def get(self, name: str, app: str, user_id: str) -> OperationRow | None:
        rows = fetch(
            self.conn,
            "SELECT name, done, result, error FROM operations "
            "WHERE name = %s AND app = %s AND user_id = %s",
            (name, app, user_id),
        )
        return OperationRow(**rows[0]) if rows else None

    def complete(self, name: str, result: dict[str, Any]) -> None:
        """Done with `result`; also after a failure: a replayed event that succeeds
        clears its error."""
        self.conn.execute(
            "UPDATE operations SET done = true, result = %s, error = NULL, updated_at = now() "
            "WHERE name = %s",
            (Jsonb(result), name),
        )

    def fail(self, name: str, error: str) -> None:
        self.conn.execute(
            "UPDATE operations SET done = true, error = %s, updated_at = now() WHERE name = %s",
            (error, name),
        )

    def fail_pending(self, name: str, app: str, error: str) -> None:
        """Fail the operation of `app` unless it is done already."""
        self.conn.execute(
            "UPDATE operations SET done = true, error = %s, updated_at = now() "
            "WHERE name = %s AND app = %s AND NOT done",
            (error, name, app),
        )
