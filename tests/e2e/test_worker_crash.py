"""Workers as a user runs them (`agent-memory worker …`), stopped in the middle of a
burst of 500 events and restarted: every event is applied exactly once."""

import signal
import threading
import time

import pytest

from services.extraction_worker.handlers import TURNS_SUBSCRIPTION
from shared.session_buffer import SessionBuffer, SessionKey
from tests.bus_helpers import make_turn
from tests.support import WorkerProcess, wait_for

EVENTS = 500
SESSIONS = 5
RATE_PER_SECOND = 100
# The burst's first part; the rest is published once the workers were signalled,
# so that they stop mid-burst however long the slower of them took to apply 100.
BEFORE_STOP = 250


def _counts(pool, valkey_client, ids):
    buffer = SessionBuffer(valkey_client, 3600)
    buffered = sum(
        buffer.read(SessionKey(ids["app"], ids["user_id"], f"{ids['session_id']}-{s}")).turns_total
        for s in range(SESSIONS)
    )
    with pool.connection() as conn:
        episodes, distinct = conn.execute(
            "SELECT count(*), count(DISTINCT (session_id, turn_id)) FROM episodes "
            "WHERE app = %s AND user_id = %s",
            (ids["app"], ids["user_id"]),
        ).fetchone()
    return buffered, episodes, distinct


def _ledger(pool, event_ids):
    with pool.connection() as conn:
        return conn.execute(
            "SELECT count(*) FROM processed_events WHERE consumer = %s AND event_id = ANY(%s)",
            (TURNS_SUBSCRIPTION, event_ids),
        ).fetchone()[0]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_a_worker_stopped_mid_burst_applies_every_event_exactly_once(
    settings, topology, publisher, pool, valkey_client, ids, tmp_path, signum
):
    events = [
        make_turn(dict(ids, session_id=f"{ids['session_id']}-{n % SESSIONS}"), n)
        for n in range(EVENTS)
    ]
    first = [
        WorkerProcess(settings, kind, tmp_path / f"{kind}-1.log")
        for kind in ("summary", "extraction")
    ]
    for worker in first:
        wait_for(lambda w=worker: "worker started" in w.log_text(), 60, f"{worker.kind} to start")

    signalled = threading.Event()

    def burst() -> None:
        for n, event in enumerate(events):
            if n == BEFORE_STOP:
                signalled.wait(timeout=120)
            publisher.publish(event)
            # Paces the burst; it waits for nothing.
            time.sleep(1 / RATE_PER_SECOND)  # noqa: sleep-ok

    publishing = threading.Thread(target=burst)
    publishing.start()
    wait_for(lambda: min(_counts(pool, valkey_client, ids)[:2]) >= 100, 60, "100 applied")
    for worker in first:
        worker.signal(signum)
    signalled.set()
    stopped_at = time.monotonic()
    codes = [worker.wait(timeout=30) for worker in first]
    drain_seconds = time.monotonic() - stopped_at
    at_stop = _counts(pool, valkey_client, ids)
    publishing.join()
    for worker in first:
        worker.stop()

    assert 0 < at_stop[0] < EVENTS and 0 < at_stop[1] < EVENTS, at_stop
    if signum == signal.SIGTERM:
        assert codes == [0, 0]
        assert drain_seconds < settings.worker_shutdown_seconds + 3
        for worker in first:
            stops = [r for r in worker.log_records() if r.get("message") == "worker stopped"]
            # One line per subscription the worker consumes.
            assert stops and all(r["drained"] is True for r in stops), (worker.kind, stops)
    else:
        assert codes == [-signal.SIGKILL, -signal.SIGKILL]

    second = [
        WorkerProcess(settings, kind, tmp_path / f"{kind}-2.log")
        for kind in ("summary", "extraction")
    ]
    try:
        # After kill -9 the emulator hands the dead subscriber's messages back only when
        # their lease ends: up to the subscription's ack deadline, not at once.
        # Archived at once, extracted when their windows close.
        wait_for(
            lambda: (
                _counts(pool, valkey_client, ids)[:2] == (EVENTS, EVENTS)
                and _ledger(pool, [e.event_id for e in events]) == EVENTS
            ),
            240,
            "all 500 events applied",
            interval=0.5,
        )
    finally:
        for worker in second:
            worker.stop()

    buffered, episodes, distinct = _counts(pool, valkey_client, ids)
    assert (buffered, episodes, distinct) == (EVENTS, EVENTS, EVENTS)
    assert _ledger(pool, [e.event_id for e in events]) == EVENTS
    buffer = SessionBuffer(valkey_client, 3600)
    for s in range(SESSIONS):
        view = buffer.read(
            SessionKey(ids["app"], ids["user_id"], f"{ids['session_id']}-{s}"), with_folds=True
        )
        # Each turn in exactly one place, the summary worker's folds included.
        placed = [turn_id for fold in view.folds.values() for turn_id in fold]
        placed += [t.turn_id for t in view.turns]
        assert sorted(placed) == sorted(e.turn_id for e in events[s::SESSIONS])
        assert list(view.folds) == list(range(1, view.summary.version + 1))
        assert [t.created_at for t in view.turns] == sorted(t.created_at for t in view.turns)
