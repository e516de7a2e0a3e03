"""The processed-events ledger's one `claim_or_skip`, and `peek`, its read-only
hint, on the real Postgres."""

import threading
import uuid
from datetime import UTC, datetime, timedelta

from shared.db.ledger import Claim, Ledger
from shared.db.unit_of_work import UnitOfWork
from shared.memory.deletion import delete_user
from tests.support import wait_for

APPLIER = "ledger-test"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _claim(pool, ids, event_id: str, created_at: datetime = T0) -> Claim:
    with UnitOfWork(pool) as uow:
        claim = uow.ledger.claim_or_skip(
            APPLIER, event_id, app=ids["app"], user_id=ids["user_id"], created_at=created_at
        )
        if claim is not Claim.DUPLICATE:
            uow.commit()
        return claim


def _peek(pool, ids, event_id: str, created_at: datetime = T0) -> Claim:
    with pool.connection() as conn:
        return Ledger(conn).peek(
            APPLIER, event_id, app=ids["app"], user_id=ids["user_id"], created_at=created_at
        )


def test_an_event_is_claimed_once_and_a_duplicate_afterwards(pool, ids):
    event_id = str(uuid.uuid4())
    assert _peek(pool, ids, event_id) is Claim.NEW
    assert _claim(pool, ids, event_id) is Claim.NEW
    assert _peek(pool, ids, event_id) is Claim.DUPLICATE
    assert _claim(pool, ids, event_id) is Claim.DUPLICATE
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT count(*) FROM processed_events WHERE consumer = %s AND event_id = %s",
            (APPLIER, event_id),
        ).fetchone()
    assert rows == (1,)


def test_a_claim_that_rolls_back_leaves_the_event_new(pool, ids):
    event_id = str(uuid.uuid4())
    with UnitOfWork(pool) as uow:
        claim = uow.ledger.claim_or_skip(
            APPLIER, event_id, app=ids["app"], user_id=ids["user_id"], created_at=T0
        )
        assert claim is Claim.NEW  # and no commit: the effects failed
    assert _peek(pool, ids, event_id) is Claim.NEW
    assert _claim(pool, ids, event_id) is Claim.NEW


def test_an_event_of_a_deleted_user_is_ledgered_and_dropped_and_a_later_one_is_new(pool, ids):
    deleted_at = T0 + timedelta(hours=1)
    with UnitOfWork(pool) as uow:
        delete_user(uow, ids["app"], ids["user_id"], deleted_at)
        uow.commit()
    before, after = str(uuid.uuid4()), str(uuid.uuid4())
    assert _peek(pool, ids, before, deleted_at) is Claim.DELETED  # created at the deletion
    assert _claim(pool, ids, before, deleted_at) is Claim.DELETED
    assert _peek(pool, ids, before, deleted_at) is Claim.DUPLICATE  # its ledger row stays
    later = deleted_at + timedelta(seconds=1)
    assert _peek(pool, ids, after, later) is Claim.NEW
    assert _claim(pool, ids, after, later) is Claim.NEW


def test_two_concurrent_claims_of_one_event_apply_it_once(pool, ids):
    event_id = str(uuid.uuid4())
    lock = f"memories/{ids['app']}/{ids['user_id']}"
    claims: list[Claim] = []

    def waiting_for_the_lock(conn) -> bool:
        return (
            conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND NOT l.granted AND a.query LIKE '%%advisory%%' "
                "AND l.objid::bigint = (hashtextextended(%s, 0) & 4294967295)",
                (lock,),
            ).fetchone()[0]
            > 0
        )

    second = threading.Thread(target=lambda: claims.append(_claim(pool, ids, event_id)))
    with UnitOfWork(pool) as uow:
        claims.append(
            uow.ledger.claim_or_skip(
                APPLIER, event_id, app=ids["app"], user_id=ids["user_id"], created_at=T0
            )
        )
        second.start()
        try:
            with pool.connection() as conn:
                wait_for(lambda: waiting_for_the_lock(conn), 30, "the second claim waiting")
        finally:
            uow.commit()
    second.join(30)
    assert claims == [Claim.NEW, Claim.DUPLICATE]
