"""The extraction worker's decisions with fakes: a unit of work over dictionaries,
a planner that returns what the test says. No Postgres, Valkey or emulator; the
integration tests (tests/integration/test_extraction_windows.py) prove the same
against the real parts."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from services.extraction_worker.archiving import Archiver, window_id
from services.extraction_worker.handlers import Extraction
from services.extraction_worker.windows import WindowExtraction
from shared.bus.contract import Delivery, Outcome
from shared.config import load_settings
from shared.db.episodes import KeyPlan
from shared.db.memories import MemoryRow, NewMemory
from shared.db.windows import PendingTurn, WindowKey
from shared.events import ExtractionRequested
from shared.memory.consolidate import Source
from shared.memory.decisions import MemoriesChanged, Planned
from tests.bus_helpers import make_turn

T0 = datetime(2026, 1, 1, tzinfo=UTC)
IDS = {"app": "app", "user_id": "ada", "session_id": "s1"}
SESSION = WindowKey("app", "ada", "s1")
SETTINGS = load_settings(extraction_window_turns=4, extraction_window_seconds=30.0)


@dataclass
class Db:
    ledger: set[str] = field(default_factory=set)
    episodes: set[str] = field(default_factory=set)
    # (session, event id) -> [turn, window id]
    pending: dict[tuple[WindowKey, str], list] = field(default_factory=dict)
    flushes: dict[WindowKey, datetime] = field(default_factory=dict)
    memories: list[MemoryRow] = field(default_factory=list)
    commits: int = 0


class Uow:
    def __init__(self, db: Db) -> None:
        self.db = db
        self.ledger = self.windows = self.episodes = self.memories = self.tombstones = self

    def __enter__(self) -> Uow:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def commit(self) -> None:
        self.db.commits += 1

    # ledger
    def applied(self, consumer: str, event_id: str) -> bool:
        return event_id in self.db.ledger

    def record(self, consumer: str, event_id: str) -> bool:
        new = event_id not in self.db.ledger
        self.db.ledger.add(event_id)
        return new

    # tombstones and locks
    def covers(self, app: str, user_id: str, created_at: datetime) -> bool:
        return False

    def lock_user(self, app: str, user_id: str) -> None:
        pass

    def try_lock_user(self, app: str, user_id: str) -> bool:
        return True

    # episodes
    def archived(self, episode) -> bool:
        return episode.event_id in self.db.episodes

    def plan_archive(self, episode, window: int, dated: bool) -> KeyPlan:
        return KeyPlan((), {None: ("", episode.text)})

    def archive(self, episode, plan, vectors, window) -> bool:
        self.db.episodes.add(episode.event_id)
        return True

    def count_session(self, app: str, user_id: str, session_id: str) -> int:
        return len(self.db.episodes)

    # windows
    def enroll(self, session: WindowKey, turn: PendingTurn, message: bytes) -> bool:
        if (session, turn.event_id) in self.db.pending:
            return False
        self.db.pending[(session, turn.event_id)] = [turn, None]
        return True

    def _of(self, session: WindowKey) -> list[list]:
        rows = [row for (s, _e), row in self.db.pending.items() if s == session]
        return sorted(rows, key=lambda r: (r[0].created_at, r[0].turn_id))

    def open_count(self, session: WindowKey) -> int:
        return sum(1 for row in self._of(session) if row[1] is None)

    def close(self, session: WindowKey, window: str) -> int:
        rows = [row for row in self._of(session) if row[1] is None]
        for row in rows:
            row[1] = window
        return len(rows)

    def window_of(self, session: WindowKey, event_id: str) -> str | None:
        row = self.db.pending.get((session, event_id))
        return row[1] if row else None

    def pending(self, session: WindowKey, window: str | None = None, *, lock: bool = False):
        return [row[0] for row in self._of(session) if window is None or row[1] == window]

    def remove(self, session: WindowKey, event_ids: list[str]) -> int:
        return sum(self.db.pending.pop((session, e), None) is not None for e in event_ids)

    def flushed_through(self, session: WindowKey) -> datetime | None:
        return self.db.flushes.get(session)

    def mark_flush(self, session: WindowKey, through: datetime) -> None:
        self.db.flushes[session] = max(through, self.db.flushes.get(session, through))

    # memories (what Consolidator uses to write a decision-less memory)
    def latest_of_entity(self, new: NewMemory) -> MemoryRow | None:
        return self.live_of_entity(new)

    def live_of_entity(self, new: NewMemory) -> MemoryRow | None:
        found = [m for m in self.db.memories if m.entity_name == new.entity_name]
        return found[-1] if found else None

    def create(self, new: NewMemory, event_id: str | None) -> MemoryRow:
        row = MemoryRow(
            str(uuid.uuid4()), new.app, new.user_id, new.project_id, new.session_id, new.scope,
            new.kind, new.entity_name, new.text, new.observed_at, T0, T0,
        )  # fmt: skip
        self.db.memories.append(row)
        return row


def _units(db: Db):
    return lambda: Uow(db)


class Embedder:
    name, dim = "fake", 3

    def embed(self, texts):
        return [[1.0, 0.0, 0.0] for _ in texts]


def _turn(n: int):
    """Turn `n` of the session, the same event every time it is asked for."""
    event_id = str(uuid.uuid5(uuid.NAMESPACE_OID, f"turn-{n}"))
    return make_turn(IDS, n, user=f"My locker code {n} is {n}.", event_id=event_id)


def _archiver(db: Db, **settings) -> Archiver:
    return Archiver(_units(db), Embedder(), SETTINGS.model_copy(update=settings))


# -- a turn joins its window ----------------------------------------------------------


def test_the_turn_that_fills_a_window_closes_it_with_a_request_of_its_own_id():
    db = Db()
    archiver = _archiver(db)
    results = [archiver.enroll(_turn(n), None) for n in range(1, 5)]
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 4
    assert [len(r.requests) for r in results] == [0, 0, 0, 1]
    (request,) = results[-1].requests
    closing = window_id(SESSION, "full", _turn(4).event_id)
    assert (request.event_id, request.reason, request.session_id) == (closing, "full", "s1")
    assert {row[1] for row in db.pending.values()} == {closing}
    assert db.ledger == set()  # extracted later, with their memories


def test_a_redelivered_turn_of_a_closed_window_publishes_the_same_request_again():
    db = Db()
    archiver = _archiver(db)
    for n in range(1, 5):
        archiver.enroll(_turn(n), None)
    again = archiver.enroll(_turn(2), None)
    assert again.outcome == Outcome.DUPLICATE
    assert [r.event_id for r in again.requests] == [window_id(SESSION, "full", _turn(4).event_id)]


def test_chatter_is_ledgered_at_once_and_never_waits_in_a_window():
    db = Db()
    enrolled = _archiver(db).enroll(make_turn(IDS, 1, user="thanks!", assistant="Anytime."), None)
    assert (enrolled.outcome, enrolled.skipped, enrolled.requests) == (
        Outcome.APPLIED,
        "acknowledgement",
        [],
    )
    assert db.pending == {} and len(db.ledger) == 1 and len(db.episodes) == 1


def test_without_the_filter_chatter_waits_in_its_window_like_any_turn():
    db = Db()
    turn = make_turn(IDS, 1, user="thanks!", assistant="Anytime.")
    assert _archiver(db, extraction_filter=False).enroll(turn, None).skipped is None
    assert len(db.pending) == 1 and db.ledger == set()


def test_a_turn_published_before_its_sessions_flush_closes_its_window_at_once():
    db = Db(flushes={SESSION: T0 + timedelta(seconds=10)})
    archiver = _archiver(db)
    late = archiver.enroll(_turn(1), T0 + timedelta(seconds=9))
    assert [r.reason for r in late.requests] == ["late"]
    after = archiver.enroll(_turn(2), T0 + timedelta(seconds=11))  # recorded after the flush
    assert after.requests == []


def test_the_next_session_closes_the_previous_one_once():
    db = Db()
    archiver = _archiver(db)
    archiver.enroll(_turn(1), None)
    second = {**IDS, "session_id": "s2"}
    first_turn = archiver.enroll(make_turn(second, 2, prev_session_id="s1", user="Hi"), None)
    assert [(r.session_id, r.reason) for r in first_turn.requests] == [("s1", "next_session")]
    # Once the request is handled, s1 is flushed: later turns of s2 close nothing of it,
    # even while s1 goes on beside s2 (its own windows then close by themselves).
    db.flushes[SESSION] = T0
    assert archiver.enroll(_turn(3), T0 + timedelta(seconds=5)).requests == []
    later = archiver.enroll(
        make_turn(second, 4, prev_session_id="s1", user="My editor is vim."), None
    )
    assert later.requests == []


def test_an_extracted_turn_is_a_duplicate_and_writes_nothing():
    db = Db(ledger={_turn(1).event_id})
    assert _archiver(db).enroll(_turn(1), None).outcome == Outcome.DUPLICATE
    assert db.pending == {} and db.episodes == set() and db.commits == 0


# -- a window is extracted ----------------------------------------------------------


class Planner:
    """Plans a memory per turn; `meanwhile` runs during each plan (a concurrent writer)."""

    def __init__(self, meanwhile=None) -> None:
        self.calls = 0
        self.meanwhile = meanwhile

    def plan(self, inp, sources):
        self.calls += 1
        if self.meanwhile:
            self.meanwhile(self.calls)
        return [
            Planned(_new(turn, sources[turn.turn_id]), sources[turn.turn_id], (), None)
            for turn in inp.turns
        ]


def _new(turn, source: Source) -> NewMemory:
    return NewMemory(
        "app", "ada", "", "", "global", "fact", turn.turn_id, turn.user, None, source.observed_at
    )


def _waiting(db: Db, *numbers: int, window: str | None = "w1") -> list[PendingTurn]:
    turns = []
    for n in numbers:
        t = _turn(n)
        turn = PendingTurn(t.event_id, t.turn_id, "", "", t.created_at, t.user, "ok", None)
        db.pending[(SESSION, t.event_id)] = [turn, window]
        turns.append(turn)
    return turns


def test_a_window_is_written_once_with_each_turns_ledger_row_and_emptied():
    db = Db()
    turns = _waiting(db, 1, 2, 3)
    planner = Planner()
    assert WindowExtraction(_units(db), planner, SETTINGS).extract(SESSION, "w1") == (
        Outcome.APPLIED
    )
    assert planner.calls == 1
    assert db.ledger == {t.event_id for t in turns} and db.pending == {}
    assert sorted(m.text for m in db.memories) == sorted(t.user_text for t in turns)


def test_only_the_requests_own_window_is_extracted():
    db = Db()
    _waiting(db, 1, 2, window="w1")
    later = _waiting(db, 3, window=None)  # joined after the window closed
    WindowExtraction(_units(db), Planner(), SETTINGS).extract(SESSION, "w1")
    assert [row[0] for row in db.pending.values()] == later


def test_a_window_extracted_meanwhile_is_decided_again_from_fresh_reads():
    db = Db()
    _waiting(db, 1, 2)

    def another_request_took_turn_2(call: int) -> None:
        if call == 1:
            db.pending.pop((SESSION, _turn(2).event_id))
            db.ledger.add(_turn(2).event_id)

    planner = Planner(another_request_took_turn_2)
    WindowExtraction(_units(db), planner, SETTINGS).extract(SESSION, "w1")
    assert planner.calls == 2  # the second plan had turn 1 only
    assert [m.text for m in db.memories] == [_turn(1).user]


def test_a_window_that_keeps_changing_fails_after_the_bounded_attempts_writing_nothing():
    db = Db()
    _waiting(db, 1, 2)
    n = iter(range(100, 200))

    def keeps_changing(call: int) -> None:
        extra = _turn(next(n))
        db.pending.pop(next(iter(db.pending)))
        _waiting(db, int(extra.turn_id.split("-")[1]))

    planner = Planner(keeps_changing)
    with pytest.raises(MemoriesChanged):
        WindowExtraction(_units(db), planner, SETTINGS).extract(SESSION, "w1")
    assert planner.calls == 3 and db.memories == [] and db.ledger == set()


def test_an_empty_window_is_a_duplicate_with_no_model_call():
    planner = Planner()
    assert WindowExtraction(_units(Db()), planner, SETTINGS).extract(SESSION, "w1") == (
        Outcome.DUPLICATE
    )
    assert planner.calls == 0


def test_a_turn_already_in_the_ledger_adds_no_memory_again():
    db = Db()
    turns = _waiting(db, 1, 2)
    db.ledger.add(turns[0].event_id)  # a dead letter replayed twice
    WindowExtraction(_units(db), Planner(), SETTINGS).extract(SESSION, "w1")
    assert [m.text for m in db.memories] == [turns[1].user_text] and db.pending == {}


def test_a_flush_marks_the_session_by_its_publish_time_and_takes_every_waiting_turn():
    db = Db()
    _waiting(db, 1, window="w1")
    _waiting(db, 2, window=None)
    extraction = Extraction(_units(db), None, Embedder(), SETTINGS, request=lambda r: None)  # type: ignore[arg-type]
    extraction.windows = WindowExtraction(_units(db), Planner(), SETTINGS)
    published = T0 + timedelta(minutes=5)
    flush = ExtractionRequested(str(uuid.uuid4()), "app", "ada", "s1", "flush", T0)
    delivery = Delivery("extraction-requests", "m1", 1, published)
    assert extraction.handle_request(flush, delivery) == Outcome.APPLIED
    assert db.flushes == {SESSION: published} and db.pending == {}
    assert len(db.memories) == 2


def test_a_flush_with_turns_still_on_their_way_leaves_the_window_to_them():
    db = Db(episodes={_turn(1).event_id, _turn(2).event_id})
    _waiting(db, 1, 2, window=None)
    planner = Planner()
    extraction = Extraction(_units(db), None, Embedder(), SETTINGS, request=lambda r: None)  # type: ignore[arg-type]
    extraction.windows = WindowExtraction(_units(db), planner, SETTINGS)
    flush = ExtractionRequested(str(uuid.uuid4()), "app", "ada", "s1", "flush", T0, turns=3)
    published = T0 + timedelta(minutes=5)
    delivery = Delivery("extraction-requests", "m1", 1, published)
    assert extraction.handle_request(flush, delivery) == Outcome.APPLIED
    # Marked flushed, nothing extracted: the third turn closes the window on arrival.
    assert db.flushes == {SESSION: published} and planner.calls == 0 and len(db.pending) == 2
    late = _archiver(db).enroll(_turn(3), T0 + timedelta(minutes=4))
    assert [r.reason for r in late.requests] == ["late"]
    assert {row[1] for row in db.pending.values()} == {late.requests[0].event_id}


def test_planned_memories_keep_their_turns_source():
    # The sources a window hands the planner are each turn's own: time and event.
    db = Db()
    turns = _waiting(db, 1, 2)
    seen: list[dict[str, Source]] = []

    class Recording(Planner):
        def plan(self, inp, sources):
            seen.append(sources)
            return super().plan(inp, sources)

    WindowExtraction(_units(db), Recording(), SETTINGS).extract(SESSION, "w1")
    assert {k: (s.event_id, s.observed_at) for k, s in seen[0].items()} == {
        t.turn_id: (t.event_id, t.created_at) for t in turns
    }
    assert sorted(m.observed_at for m in db.memories) == [t.created_at for t in turns]
