"""The one write discipline: plan with no lock, then verify and write in one short
transaction under the user's lock; when the plan went stale, plan again.

Every writer of a user's rows whose decision needs a model, an embedding or any
slow read does it this way (the extraction worker's archiving and windows, the
generate requests, a client's memory and rollback, compaction):

    result = write_planned(
        lambda: user_transaction(units, app, user_id),
        plan=lambda: ...,           # no lock, no transaction open while the model answers
        write=lambda uow, plan: ...,  # under the lock: check, then write; or raise StalePlan
        attempts=settings.write_attempts,
        what="the window of s1",
    )

`plan` may answer `Done(value)`: nothing is to be written (a duplicate, an empty
window), and no lock is taken. `write` raises `StalePlan(reason)` when what the plan
was made from changed: its transaction rolls back, and after a short random pause
(so that two writers that lost to each other try again at different moments) the
plan is made again from fresh reads. After `attempts` plans the caller gets
`StalePlan` naming what kept changing and the last reason: a transient error (an
event is retried after its subscription's backoff; the API answers 409), and
nothing was written.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

import psycopg

from shared.db.unit_of_work import UnitOfWork, locked
from shared.db.user_lock import user_lock

P = TypeVar("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
T = TypeVar("T")

# The longest pause before the n-th plan is n times this, drawn at random: writers
# of one user that lost to each other (windows of two sessions decided at once)
# spread out instead of colliding again.
PAUSE_SECONDS = 0.2


class StalePlan(RuntimeError):
    """What a write was planned on changed before its transaction: raised by a write
    step to roll back and plan again, and by `write_planned` once the attempts are
    spent (transient: retry later)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Done(Generic[R_co]):
    """A plan's answer when nothing is to be written: `value` is the result."""

    value: R_co


@contextmanager
def user_transaction(
    units: Callable[[], UnitOfWork], app: str, user_id: str
) -> Iterator[UnitOfWork]:
    """A unit of work holding the user's lock (`locked`), committed when the block
    ends normally and rolled back when it raises."""
    with locked(units, app, user_id) as uow:
        yield uow
        uow.commit()


@contextmanager
def user_transaction_on(conn: psycopg.Connection, app: str, user_id: str) -> Iterator[None]:
    """The same on one idle connection of its own (the CLI's commands): a transaction
    holding the user's lock, committed when the block ends normally."""
    with conn.transaction():
        user_lock(conn, app, user_id)
        yield


def write_planned(
    transaction: Callable[[], AbstractContextManager[T]],
    plan: Callable[[], P | Done[R]],
    write: Callable[[T, P], R],
    *,
    attempts: int,
    what: str,
    pause_seconds: float = PAUSE_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> R:
    """`write(tx, plan())` in `transaction()`, planned again (at most `attempts` plans)
    while `write` raises `StalePlan`; then `StalePlan` saying that `what` kept changing."""
    reason = ""
    for attempt in range(attempts):
        if attempt:
            # No lock or transaction is held here.
            sleep(random.uniform(0.0, pause_seconds * attempt))  # noqa: S311 - jitter
        planned = plan()
        if isinstance(planned, Done):
            return planned.value
        try:
            with transaction() as tx:
                return write(tx, planned)
        except StalePlan as stale:
            reason = stale.reason
    raise StalePlan(f"{what} changed under {attempts} plans in a row (last: {reason}); retry")


def write_for_user(
    units: Callable[[], UnitOfWork],
    app: str,
    user_id: str,
    attempts: int,
    what: str,
    plan: Callable[[], P | Done[R]],
    write: Callable[[UnitOfWork, P], R],
) -> R:
    """`write_planned` in `user_transaction`s: the common case."""
    return write_planned(
        lambda: user_transaction(units, app, user_id), plan, write, attempts=attempts, what=what
    )
