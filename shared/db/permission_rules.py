"""The permission rules repository, on the API's asyncio pool: rule evaluation
reads it on the event loop for every tool call that misses the rule cache.

Deleting a user's or a project's rules is part of their erasure
(`shared.db.erasure`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, NamedTuple

import psycopg
from psycopg.rows import dict_row

Action = Literal["ALLOW", "BLOCK"]

_RULE_COLUMNS = "id::text AS id, user_id, project_id, tool_name, pattern, action, created_at"


@dataclass(frozen=True)
class Rule:
    id: str
    user_id: str
    project_id: str  # "" for a global rule
    tool_name: str
    pattern: str
    action: Action
    created_at: datetime


class Candidate(NamedTuple):
    """A rule as evaluation needs it (read for every call, so nothing more)."""

    id: str
    project_id: str
    pattern: str
    action: Action


@dataclass(frozen=True)
class NewRule:
    app: str
    user_id: str
    project_id: str
    tool_name: str
    pattern: str
    action: Action


class PermissionRules:
    """Plain SQL over one async connection (the caller's transaction)."""

    def __init__(self, conn: psycopg.AsyncConnection) -> None:
        self.conn = conn

    async def lock_scope(self, app: str, user_id: str, project_id: str) -> None:
        """Serialise this transaction with every other rule write of the scope."""
        lock = json.dumps(["permission_rules", app, user_id, project_id])
        await self.conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (lock,))

    async def patterns_of_scope(self, app: str, user_id: str, project_id: str) -> list[str]:
        cur = await self.conn.execute(
            "SELECT pattern FROM permission_rules "
            "WHERE app = %s AND user_id = %s AND project_id = %s",
            (app, user_id, project_id),
        )
        return [row[0] for row in await cur.fetchall()]

    async def insert(self, new: NewRule) -> Rule:
        async with self.conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "INSERT INTO permission_rules (app, user_id, project_id, tool_name, pattern, "
                f"action) VALUES (%s, %s, %s, %s, %s, %s) RETURNING {_RULE_COLUMNS}",
                (new.app, new.user_id, new.project_id, new.tool_name, new.pattern, new.action),
            )
            row = await cur.fetchone()
        assert row is not None
        return Rule(**row)

    async def of_user(self, app: str, user_id: str, project_id: str | None) -> list[Rule]:
        """The user's rules (of one project, or the global ones with "", or all
        when None), oldest first."""
        where = "app = %(app)s AND user_id = %(user_id)s"
        if project_id is not None:
            where += " AND project_id = %(project_id)s"
        async with self.conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"SELECT {_RULE_COLUMNS} FROM permission_rules WHERE {where} "
                "ORDER BY created_at, permission_rules.id",
                {"app": app, "user_id": user_id, "project_id": project_id},
            )
            return [Rule(**row) for row in await cur.fetchall()]

    async def delete(self, app: str, user_id: str, rule_id: str) -> bool:
        """Remove the rule `rule_id` if it is `user_id`'s in this app."""
        cur = await self.conn.execute(
            "DELETE FROM permission_rules "
            "WHERE id = %(id)s AND app = %(app)s AND user_id = %(user_id)s RETURNING id",
            {"id": rule_id, "app": app, "user_id": user_id},
        )
        return await cur.fetchone() is not None

    async def candidates(
        self, app: str, user_id: str, projects: list[str], tools: list[str]
    ) -> tuple[Candidate, ...]:
        """The user's rules of these projects and tools, oldest first: one statement
        on the index (app, user_id, project_id, tool_name)."""
        async with self.conn.cursor() as cur:
            await cur.execute(
                "SELECT id::text, project_id, pattern, action FROM permission_rules "
                "WHERE app = %(app)s AND user_id = %(user_id)s "
                "AND project_id = ANY(%(projects)s) AND tool_name = ANY(%(tools)s) "
                "ORDER BY created_at, permission_rules.id",
                {"app": app, "user_id": user_id, "projects": projects, "tools": tools},
            )
            return tuple(Candidate(*row) for row in await cur.fetchall())
