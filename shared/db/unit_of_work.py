"""The unit of work: one pooled connection, one transaction, and the repositories
over it. It rolls back unless the caller commits:

    with UnitOfWork(pool) as uow:
        uow.memories.lock_user(app, user_id)
        ...
        uow.commit()

Handlers get a `UnitsOfWork` (a factory: `with units() as uow`), which names the
process in `agent_memory_db_transaction_seconds{worker}`: how long each
transaction kept its connection, from the checkout to the commit or rollback.
No model or embedding call happens while one is open, and a writer takes the
user's lock through `locked`, which does not wait for it holding a connection.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from types import TracebackType
from typing import TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from shared.db.api_keys import ApiKeys
from shared.db.app_settings import AppSettings
from shared.db.clock import database_now
from shared.db.episodes import Episodes
from shared.db.erasure import Erasure
from shared.db.feedback import Feedback
from shared.db.ledger import Ledger
from shared.db.memories import Memories
from shared.db.operations import Operations
from shared.db.profiles import Profiles
from shared.db.run import Steps, run
from shared.db.tombstones import Tombstones
from shared.db.windows import Windows
from shared.metrics import DB_TRANSACTION_SECONDS

T = TypeVar("T")


class UnitOfWork:
    memories: Memories
    episodes: Episodes
    ledger: Ledger
    tombstones: Tombstones
    operations: Operations
    erasure: Erasure
    api_keys: ApiKeys
    windows: Windows
    app_settings: AppSettings
    feedback: Feedback
    profiles: Profiles

    def __init__(self, pool: ConnectionPool, worker: str = "") -> None:
        self._pool = pool
        self._cm: AbstractContextManager[psycopg.Connection] | None = None
        self.conn: psycopg.Connection | None = None
        self._committed = False
        self._seconds = DB_TRANSACTION_SECONDS.labels(worker) if worker else None
        self._began = 0.0

    def __enter__(self) -> UnitOfWork:
        self._cm = self._pool.connection()
        conn = self.conn = self._cm.__enter__()
        self._began = time.perf_counter()
        self._committed = False
        self.memories = Memories(conn)
        self.episodes = Episodes(conn)
        self.ledger = Ledger(conn)
        self.tombstones = Tombstones(conn)
        self.operations = Operations(conn)
        self.erasure = Erasure(conn)
        self.api_keys = ApiKeys(conn)
        self.windows = Windows(conn)
        self.app_settings = AppSettings(conn)
        self.feedback = Feedback(conn)
        self.profiles = Profiles(conn)
        return self

    def run(self, steps: Steps[T]) -> T:
        """Run a query written as `Steps` (`shared.db.search`) in this transaction."""
        assert self.conn is not None
        return run(self.conn, steps)

    def now(self) -> datetime:
        """The database's time of this transaction (shared.db.clock)."""
        assert self.conn is not None
        return database_now(self.conn)

    def commit(self) -> None:
        assert self.conn is not None
        self.conn.commit()
        self._committed = True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self.conn is not None and self._cm is not None
        try:
            if not self._committed and not self.conn.closed:
                self.conn.rollback()
        finally:
            if self._seconds is not None:
                self._seconds.observe(time.perf_counter() - self._began)
            self._cm.__exit__(exc_type, exc, tb)
            self.conn = None


# How long a unit of work tries for a user's lock without holding a connection
# before it waits for it holding one (so a busy user's writer is never starved).
LOCK_PATIENCE_SECONDS = 2.0
_FIRST_RETRY_SECONDS = 0.002
_LONGEST_RETRY_SECONDS = 0.05


@contextmanager
def locked(units: Callable[[], UnitOfWork], app: str, user_id: str) -> Iterator[UnitOfWork]:
    """A unit of work that holds the user's lock (`Memories.lock_user`). While another
    transaction of the user holds it, this one gives its connection back and tries
    again a moment later: a transaction waiting on a lock would keep a pooled
    connection idle, and a worker's few connections serve many handlers. After
    `LOCK_PATIENCE_SECONDS` it waits for the lock holding its connection."""
    deadline = time.monotonic() + LOCK_PATIENCE_SECONDS
    delay = _FIRST_RETRY_SECONDS
    while True:
        with units() as uow:
            held = uow.memories.try_lock_user(app, user_id)
            if held or time.monotonic() >= deadline:
                if not held:
                    uow.memories.lock_user(app, user_id)
                yield uow
                return
        # Between tries: no transaction open, no connection held.
        time.sleep(delay * random.uniform(0.5, 1.5))  # noqa: S311 - jitter, not security
        delay = min(delay * 2, _LONGEST_RETRY_SECONDS)


class UnitsOfWork:
    """Opens units of work on one pool for one process (`worker`: the metric's label:
    `extraction`, `compaction`, `api`, ...). Handlers take this, not the pool."""

    def __init__(self, pool: ConnectionPool, worker: str) -> None:
        self.pool = pool
        self.worker = worker

    def __call__(self) -> UnitOfWork:
        return UnitOfWork(self.pool, self.worker)


async def in_thread(pool: ConnectionPool, work: Callable[[UnitOfWork], T], *, commit: bool) -> T:
    """`work(uow)` in a unit of work on a worker thread (psycopg's blocking API, for
    the event loop's callers), committed after it returns if `commit`."""

    def run_work() -> T:
        with UnitOfWork(pool) as uow:
            done = work(uow)
            if commit:
                uow.commit()
            return done

    return await asyncio.to_thread(run_work)
