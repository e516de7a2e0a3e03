"""The unit of work: one pooled connection, one transaction, and the repositories
over it. It rolls back unless the caller commits:

    with UnitOfWork(pool) as uow:
        uow.memories.lock_user(app, user_id)
        ...
        uow.commit()

Handlers get a `UnitsOfWork` (a factory: `with units() as uow`), which names the
process in `agent_memory_db_transaction_seconds{worker}`: how long each
transaction kept its connection, from the checkout to the commit or rollback.
No model or embedding call happens while one is open.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from shared.db.api_keys import ApiKeys
from shared.db.episodes import Episodes
from shared.db.erasure import Erasure
from shared.db.ledger import Ledger
from shared.db.memories import Memories
from shared.db.operations import Operations
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

    def __init__(self, pool: ConnectionPool, worker: str = "") -> None:
        self._pool = pool
        self._cm = None
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
        return self

    def run(self, steps: Steps[T]) -> T:
        """Run a query written as `Steps` (`shared.db.search`) in this transaction."""
        assert self.conn is not None
        return run(self.conn, steps)

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
