"""The operations repository: long-running requests (`memories:generate`) that a
client polls by name until a worker, or the dead-letter path, ends them."""

from __future__ import annotations

from collections.abc import Sequence
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

    def start(self, name: str, app: str, user_id: str, kind: str, agent_id: str = "") -> None:
        self.conn.execute(
            "INSERT INTO operations (name, app, user_id, kind, agent_id) "
            "VALUES (%s, %s, %s, %s, %s)",
            (name, app, user_id, kind, agent_id),
        )

    def get(self, name: str, app: str, user_id: str, agents: Sequence[str]) -> OperationRow | None:
        """The operation, if one of `agents` started it (`shared.memory.agents.visible_to`)."""
        rows = fetch(
            self.conn,
            "SELECT name, done, result, error FROM operations "
            "WHERE name = %s AND app = %s AND user_id = %s AND agent_id = ANY(%s)",
            (name, app, user_id, list(agents)),
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
