"""A turn joining its extraction window, decided with fakes (`tests.extraction_fakes`):
no Postgres, Valkey or emulator; tests/integration/test_extraction_windows.py
proves the same against the real parts."""

from __future__ import annotations

from datetime import timedelta

from services.extraction_worker.archiving import Archiver, window_id
from shared.bus.contract import Outcome
from tests.bus_helpers import make_turn
from tests.extraction_fakes import (
    IDS,
    SESSION,
    SETTINGS,
    T0,
    Db,
    Embedder,
    a_turn,
    archiver_of,
    units_of,
    waiting_in,
)


def test_the_turn_that_fills_a_window_closes_it_with_a_request_of_its_own_id():
    db = Db()
    archiver = archiver_of(db)
    results = [archiver.enroll(a_turn(n), None) for n in range(1, 5)]
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 4
    assert [len(r.requests) for r in results] == [0, 0, 0, 1]
    (request,) = results[-1].requests
    closing = window_id(SESSION, "full", a_turn(4).event_id)
    assert (request.event_id, request.reason, request.session_id) == (closing, "full", "s1")
    assert {row[1] for row in db.pending.values()} == {closing}
    assert db.ledger == set()  # extracted later, with their memories


def test_a_redelivered_turn_of_a_closed_window_publishes_the_same_request_again():
    db = Db()
    archiver = archiver_of(db)
    for n in range(1, 5):
        archiver.enroll(a_turn(n), None)
    again = archiver.enroll(a_turn(2), None)
    assert again.outcome == Outcome.DUPLICATE
    assert [r.event_id for r in again.requests] == [window_id(SESSION, "full", a_turn(4).event_id)]


def test_chatter_is_ledgered_at_once_and_never_waits_in_a_window():
    db = Db()
    enrolled = archiver_of(db).enroll(make_turn(IDS, 1, user="thanks!", assistant="Anytime."), None)
    assert (enrolled.outcome, enrolled.skipped, enrolled.requests) == (
        Outcome.APPLIED,
        "acknowledgement",
        [],
    )
    assert db.pending == {} and len(db.ledger) == 1 and len(db.episodes) == 1


def test_without_the_filter_chatter_waits_in_its_window_like_any_turn():
    db = Db()
    turn = make_turn(IDS, 1, user="thanks!", assistant="Anytime.")
    assert archiver_of(db, extraction_filter=False).enroll(turn, None).skipped is None
    assert len(db.pending) == 1 and db.ledger == set()


def test_a_turn_published_before_its_sessions_flush_closes_its_window_at_once():
    db = Db(flushes={SESSION: T0 + timedelta(seconds=10)})
    archiver = archiver_of(db)
    late = archiver.enroll(a_turn(1), T0 + timedelta(seconds=9))
    assert [r.reason for r in late.requests] == ["late"]
    after = archiver.enroll(a_turn(2), T0 + timedelta(seconds=11))  # recorded after the flush
    assert after.requests == []


def test_the_next_session_closes_the_previous_one_once():
    db = Db()
    archiver = archiver_of(db)
    archiver.enroll(a_turn(1), None)
    second = {**IDS, "session_id": "s2"}
    first_turn = archiver.enroll(make_turn(second, 2, prev_session_id="s1", user="Hi"), None)
    assert [(r.session_id, r.reason) for r in first_turn.requests] == [("s1", "next_session")]
    # Once the request is handled, s1 is flushed: later turns of s2 close nothing of it,
    # even while s1 goes on beside s2 (its own windows then close by themselves).
    db.flushes[SESSION] = T0
    assert archiver.enroll(a_turn(3), T0 + timedelta(seconds=5)).requests == []
    later = archiver.enroll(
        make_turn(second, 4, prev_session_id="s1", user="My editor is vim."), None
    )
    assert later.requests == []


def test_a_deleted_users_turn_is_dropped_and_never_embedded():
    db = Db(deleted=True)
    embedder = Embedder()
    enrolled = Archiver(units_of(db), embedder, SETTINGS).enroll(a_turn(1), None)
    assert enrolled.outcome == Outcome.DROPPED
    assert embedder.calls == [] and db.episodes == set() and db.ledger == {a_turn(1).event_id}


def test_a_skipped_last_turn_arriving_after_the_flush_still_closes_the_window():
    db = Db(flushes={SESSION: T0 + timedelta(seconds=10)})
    waiting_in(db, 1, 2, window=None)
    bye = make_turn(IDS, 3, user="thanks, bye!", assistant="Bye!")
    enrolled = archiver_of(db).enroll(bye, T0 + timedelta(seconds=9))
    assert (enrolled.skipped, [r.reason for r in enrolled.requests]) == (
        "acknowledgement",
        ["late"],
    )
    assert {row[1] for row in db.pending.values()} == {enrolled.requests[0].event_id}
    assert bye.event_id in db.ledger


def test_a_skipped_first_turn_of_the_next_session_still_closes_the_previous_one():
    db = Db()
    hello = make_turn({**IDS, "session_id": "s2"}, 1, user="Hi!", prev_session_id="s1")
    enrolled = archiver_of(db).enroll(hello, None)
    assert [(r.session_id, r.reason) for r in enrolled.requests] == [("s1", "next_session")]


def test_an_extracted_turn_is_a_duplicate_and_writes_nothing():
    db = Db(ledger={a_turn(1).event_id})
    assert archiver_of(db).enroll(a_turn(1), None).outcome == Outcome.DUPLICATE
    assert db.pending == {} and db.episodes == set() and db.commits == 0
