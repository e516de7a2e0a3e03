"""An extraction window extracted, a request closing one, a window dead-lettered,
decided with fakes (`tests.extraction_fakes`): no Postgres, Valkey or emulator;
tests/integration/test_extraction_windows.py proves the same against the real
parts."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from services.extraction_worker.windows import WindowExtraction, dead_letter_window
from shared.bus.contract import Delivery, Outcome
from shared.db.planned_write import StalePlan
from shared.events import ExtractionRequested
from shared.memory.consolidate import Source
from tests.extraction_fakes import (
    SESSION,
    SETTINGS,
    T0,
    Db,
    Planner,
    Publisher,
    a_turn,
    archiver_of,
    extraction_of,
    letter_of,
    units_of,
    waiting_in,
)


def test_a_window_is_written_once_with_each_turns_ledger_row_and_emptied():
    db = Db()
    turns = waiting_in(db, 1, 2, 3)
    planner = Planner()
    assert WindowExtraction(units_of(db), planner, SETTINGS).extract(SESSION, "w1") == (
        Outcome.APPLIED
    )
    assert planner.calls == 1
    assert db.ledger == {t.event_id for t in turns} and db.pending == {}
    assert sorted(m.text for m in db.memories) == sorted(t.user_text for t in turns)


def test_only_the_requests_own_window_is_extracted():
    db = Db()
    waiting_in(db, 1, 2, window="w1")
    later = waiting_in(db, 3, window=None)  # joined after the window closed
    WindowExtraction(units_of(db), Planner(), SETTINGS).extract(SESSION, "w1")
    assert [row[0] for row in db.pending.values()] == later


def test_a_window_extracted_meanwhile_is_decided_again_from_fresh_reads():
    db = Db()
    waiting_in(db, 1, 2)

    def another_request_took_turn_2(call: int) -> None:
        if call == 1:
            db.pending.pop((SESSION, a_turn(2).event_id))
            db.ledger.add(a_turn(2).event_id)

    planner = Planner(another_request_took_turn_2)
    WindowExtraction(units_of(db), planner, SETTINGS).extract(SESSION, "w1")
    assert planner.calls == 2  # the second plan had turn 1 only
    assert [m.text for m in db.memories] == [a_turn(1).user]


def test_a_window_that_keeps_changing_fails_after_the_bounded_attempts_writing_nothing():
    db = Db()
    waiting_in(db, 1, 2)
    n = iter(range(100, 200))

    def keeps_changing(call: int) -> None:
        extra = a_turn(next(n))
        db.pending.pop(next(iter(db.pending)))
        waiting_in(db, int(extra.turn_id.split("-")[1]))

    planner = Planner(keeps_changing)
    with pytest.raises(StalePlan, match="extracted or dead-lettered meanwhile"):
        WindowExtraction(units_of(db), planner, SETTINGS).extract(SESSION, "w1")
    assert planner.calls == SETTINGS.write_attempts and db.memories == [] and db.ledger == set()


def test_an_empty_window_is_a_duplicate_with_no_model_call():
    planner = Planner()
    assert WindowExtraction(units_of(Db()), planner, SETTINGS).extract(SESSION, "w1") == (
        Outcome.DUPLICATE
    )
    assert planner.calls == 0


def test_a_turn_already_in_the_ledger_adds_no_memory_again():
    db = Db()
    turns = waiting_in(db, 1, 2)
    db.ledger.add(turns[0].event_id)  # a dead letter replayed twice
    WindowExtraction(units_of(db), Planner(), SETTINGS).extract(SESSION, "w1")
    assert [m.text for m in db.memories] == [turns[1].user_text] and db.pending == {}


def test_a_flush_marks_the_session_and_closes_its_open_window_as_its_own():
    db = Db()
    waiting_in(db, 1, window="w1")  # a closed window: its own request extracts it
    (open_turn,) = waiting_in(db, 2, window=None)
    published = T0 + timedelta(minutes=5)
    flush = ExtractionRequested(str(uuid.uuid4()), "app", "ada", "s1", "flush", T0)
    delivery = Delivery("extraction-requests", "m1", 1, published)
    assert extraction_of(db, Planner()).handle_request(flush, delivery) == Outcome.APPLIED
    assert db.flushes == {SESSION: published}
    assert [m.text for m in db.memories] == [open_turn.user_text]
    assert [(row[0].turn_id, row[1]) for row in db.pending.values()] == [("turn-0001", "w1")]


def test_a_flush_of_a_deleted_user_closes_and_marks_nothing():
    db = Db(deleted=True)
    waiting_in(db, 1, window=None)
    planner = Planner()
    flush = ExtractionRequested(str(uuid.uuid4()), "app", "ada", "s1", "flush", T0)
    assert extraction_of(db, planner).handle_request(flush, None) == Outcome.DROPPED
    assert db.flushes == {} and planner.calls == 0


def test_a_flush_with_turns_still_on_their_way_leaves_the_window_to_them():
    db = Db(episodes={a_turn(1).event_id, a_turn(2).event_id})
    waiting_in(db, 1, 2, window=None)
    planner = Planner()
    extraction = extraction_of(db, planner)
    flush = ExtractionRequested(str(uuid.uuid4()), "app", "ada", "s1", "flush", T0, turns=3)
    published = T0 + timedelta(minutes=5)
    delivery = Delivery("extraction-requests", "m1", 1, published)
    assert extraction.handle_request(flush, delivery) == Outcome.APPLIED
    # Marked flushed, nothing extracted: the third turn closes the window on arrival.
    assert db.flushes == {SESSION: published} and planner.calls == 0 and len(db.pending) == 2
    late = archiver_of(db).enroll(a_turn(3), T0 + timedelta(minutes=4))
    assert [r.reason for r in late.requests] == ["late"]
    assert {row[1] for row in db.pending.values()} == {late.requests[0].event_id}


def test_planned_memories_keep_their_turns_source():
    # The sources a window hands the planner are each turn's own: time and event.
    db = Db()
    turns = waiting_in(db, 1, 2)
    seen: list[dict[str, Source]] = []

    class Recording(Planner):
        def plan(self, inp, sources):
            seen.append(sources)
            return super().plan(inp, sources)

    WindowExtraction(units_of(db), Recording(), SETTINGS).extract(SESSION, "w1")
    assert {k: (s.event_id, s.observed_at) for k, s in seen[0].items()} == {
        t.turn_id: (t.event_id, t.created_at) for t in turns
    }
    assert sorted(m.observed_at for m in db.memories) == [t.created_at for t in turns]


def test_a_dead_lettered_request_hands_over_its_own_windows_turns_only():
    db = Db()
    failed = waiting_in(db, 1, 2, window="w1")
    waiting_in(db, 3, window="w2")  # another window, its own request healthy
    publisher = Publisher()
    request = ExtractionRequested("w1", "app", "ada", "s1", "full", T0)
    dead_letter_window(units_of(db), publisher, SETTINGS, letter_of(request))  # type: ignore[arg-type]
    assert [a["event_id"] for _topic, a in publisher.published] == [t.event_id for t in failed]
    topic, attributes = publisher.published[0]
    assert topic.endswith("turns-extraction-dlq")
    assert attributes["dead_letter_subscription"] == "turns-extraction"
    assert (
        "extraction window (2 turns) failed: failed 5 attempts" in attributes["dead_letter_reason"]
    )
    assert [(row[0].turn_id, row[1]) for row in db.pending.values()] == [("turn-0003", "w2")]


def test_a_request_that_could_not_be_read_hands_over_nothing():
    db = Db()
    waiting_in(db, 1, window=None)
    publisher = Publisher()
    body = b'{"app": "app", "user_id": "ada", "session_id": "s1", "reason": "flush"}'
    dead_letter_window(units_of(db), publisher, SETTINGS, letter_of(None, body))  # type: ignore[arg-type]
    assert publisher.published == [] and len(db.pending) == 1
