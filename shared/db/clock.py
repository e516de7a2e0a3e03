"""The database's time: the one clock that decisions over stored times go by.

A process's own wall clock may be minutes off (a machine without NTP); Postgres's
`now()` is the same for every writer, and within a transaction it is the
transaction's start, so the decisions one transaction makes agree with each other
and with the reads' `expire_at > now()`.
"""

from __future__ import annotations

from datetime import datetime

import psycopg


def database_now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None  # a SELECT without FROM has one row
    return row[0]
