"""`locked`: a writer takes the user's lock without keeping a connection while
another transaction of the user holds it, and gets it once that one ends."""

import threading
import time

import psycopg

from shared.db import unit_of_work
from shared.db.memories import user_lock
from shared.db.unit_of_work import UnitsOfWork, locked
from tests.support import wait_for


def _idle_in_transaction(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%%' "
            "AND datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]


def _held_by_others(database_url: str, holder: int) -> tuple[int, int]:
    """Transactions besides the holder's kept open for more than a tenth of a second
    (a try of the lock opens one for a moment), and advisory locks waited for."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "        AND xact_start IS NOT NULL AND now() - xact_start > interval '100 ms' "
            "        AND pid NOT IN (pg_backend_pid(), %s)), "
            "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)",
            (holder,),
        ).fetchone()


def _writer(pool, ids, entered: threading.Event) -> threading.Thread:
    def write() -> None:
        with locked(UnitsOfWork(pool, "test"), ids["app"], ids["user_id"]):
            entered.set()

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_a_writer_waits_for_the_users_lock_without_holding_a_connection(stack, pool, ids):
    entered = threading.Event()
    with psycopg.connect(stack.database_url) as holder:
        user_lock(holder, ids["app"], ids["user_id"])  # another transaction of the user
        assert _idle_in_transaction(stack.database_url) == 1
        writer = _writer(pool, ids, entered)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # the writer keeps trying meanwhile
            assert not entered.is_set()
            assert _held_by_others(stack.database_url, holder.info.backend_pid) == (0, 0)
        holder.commit()
    wait_for(entered.is_set, 10, "the writer to get the lock")
    writer.join(timeout=10)


def test_past_its_patience_a_writer_waits_for_the_lock_and_then_gets_it(
    stack, pool, ids, monkeypatch
):
    monkeypatch.setattr(unit_of_work, "LOCK_PATIENCE_SECONDS", 0.2)
    entered = threading.Event()
    with psycopg.connect(stack.database_url) as holder:
        user_lock(holder, ids["app"], ids["user_id"])
        writer = _writer(pool, ids, entered)
        # Now it waits inside a transaction of its own for the lock.
        wait_for(lambda: _idle_in_transaction(stack.database_url) == 1, 10, "the holder alone")
        with psycopg.connect(stack.database_url, autocommit=True) as conn:
            waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            wait_for(lambda: conn.execute(waiting).fetchone()[0] == 1, 10, "the writer waiting")
        assert not entered.is_set()
        holder.commit()
    wait_for(entered.is_set, 10, "the writer to get the lock")
    writer.join(timeout=10)
