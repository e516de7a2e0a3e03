"""`locked`: a writer takes the user's lock without keeping a connection while
another transaction of the user holds it, and gets it once that one ends."""

import threading
import time

import psycopg
import pytest

from shared.db import unit_of_work
from shared.db.pool import make_pool
from shared.db.unit_of_work import UnitsOfWork, locked
from shared.db.user_lock import user_lock
from tests.conftest import make_settings
from tests.support import wait_for

# The writer's connections carry a name of their own: other tests' threads share
# this Postgres, and only what the writer holds is under test.
WRITER = "user-lock-writer"


def _writer_connections(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (WRITER,)
        ).fetchone()[0]


def _held_by_writer(database_url: str) -> tuple[int, int]:
    """The writer's transactions kept open for more than a tenth of a second (a try
    of the lock opens one for a moment), and advisory locks it waits for."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "        AND xact_start IS NOT NULL AND now() - xact_start > interval '100 ms'), "
            "(SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "  WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = %s)",
            (WRITER, WRITER),
        ).fetchone()


@pytest.fixture
def writer_pool(stack):
    settings = make_settings(stack)
    separator = "&" if "?" in stack.database_url else "?"
    url = f"{stack.database_url}{separator}application_name={WRITER}"
    pool = make_pool(settings.model_copy(update={"database_url": url}), max_size=2, name=WRITER)
    yield pool
    pool.close()


def _writer(pool, ids, entered: threading.Event) -> threading.Thread:
    def write() -> None:
        with locked(UnitsOfWork(pool, "test"), ids["app"], ids["user_id"]):
            entered.set()

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_a_writer_waits_for_the_users_lock_without_holding_a_connection(stack, writer_pool, ids):
    entered = threading.Event()
    with psycopg.connect(stack.database_url) as holder:
        user_lock(holder, ids["app"], ids["user_id"])  # another transaction of the user
        writer = _writer(writer_pool, ids, entered)
        assert _writer_connections(stack.database_url) >= 1  # the filter below sees it
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # the writer keeps trying meanwhile
            assert not entered.is_set()
            assert _held_by_writer(stack.database_url) == (0, 0)
        holder.commit()
    wait_for(entered.is_set, 10, "the writer to get the lock")
    writer.join(timeout=10)


def test_past_its_patience_a_writer_waits_for_the_lock_and_then_gets_it(
    stack, writer_pool, ids, monkeypatch
):
    monkeypatch.setattr(unit_of_work, "LOCK_PATIENCE_SECONDS", 0.2)
    entered = threading.Event()
    with psycopg.connect(stack.database_url) as holder:
        user_lock(holder, ids["app"], ids["user_id"])
        writer = _writer(writer_pool, ids, entered)
        # Now it waits inside a transaction of its own for the lock.
        wait_for(lambda: _held_by_writer(stack.database_url)[1] == 1, 10, "the writer waiting")
        assert not entered.is_set()
        holder.commit()
    wait_for(entered.is_set, 10, "the writer to get the lock")
    writer.join(timeout=10)
