"""Statements as data, run on a sync or an async connection.

A query that both the API's event loop and a worker thread run is written once,
as a generator of `Steps`: it yields each `Statement` and is sent the rows the
statement returned (an empty list when it returns none). `run` drives it on a
`psycopg.Connection`, `arun` on a `psycopg.AsyncConnection`.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.rows import RowFactory, dict_row

T = TypeVar("T")

Steps = Generator["Statement", list[Any], T]


# Connections plan every statement anew (`shared.db.pool`); a statement whose plan
# cannot go wrong for any parameters asks for it to be planned once and kept.
GENERIC_PLAN = "SET LOCAL plan_cache_mode = force_generic_plan"


@dataclass(frozen=True, slots=True)
class Statement:
    sql: str
    params: Any = None
    rows: RowFactory[Any] = dict_row
    # Prepared, with a plan made once per connection for any parameters (in a
    # transaction: outside one `SET LOCAL` does nothing, and it is planned as usual).
    generic_plan: bool = False


def run(conn: psycopg.Connection, steps: Steps[T]) -> T:
    """Run `steps` on `conn` (in the caller's transaction); their result."""
    try:
        statement = next(steps)
        while True:
            with conn.cursor(row_factory=statement.rows) as cur:
                if statement.generic_plan:
                    cur.execute(GENERIC_PLAN)
                cur.execute(statement.sql, statement.params, prepare=statement.generic_plan or None)
                rows = cur.fetchall() if cur.description is not None else []
            statement = steps.send(rows)
    except StopIteration as done:
        return done.value


async def arun(conn: psycopg.AsyncConnection, steps: Steps[T]) -> T:
    """`run` on the event loop."""
    try:
        statement = next(steps)
        while True:
            async with conn.cursor(row_factory=statement.rows) as cur:
                if statement.generic_plan:
                    await cur.execute(GENERIC_PLAN)
                await cur.execute(
                    statement.sql, statement.params, prepare=statement.generic_plan or None
                )
                rows = await cur.fetchall() if cur.description is not None else []
            statement = steps.send(rows)
    except StopIteration as done:
        return done.value


def one(rows: list[T]) -> T | None:
    """The first row, or None."""
    return rows[0] if rows else None


def fetch(
    conn: psycopg.Connection, sql: str, params: Any = None, rows: RowFactory[Any] = dict_row
) -> list[Any]:
    """One statement's rows (dicts unless `rows` says otherwise), on a sync connection."""
    return run(conn, _single(Statement(sql, params, rows)))


def _single(statement: Statement) -> Steps[list[Any]]:
    return (yield statement)
