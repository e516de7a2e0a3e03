"""Fakes of the extraction worker's parts for its unit tests: a unit of work over
dictionaries (a transaction on a copy, written back only by commit), an embedder
and a publisher that record, a planner that plans one memory per turn."""

from __future__ import annotations

import copy
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime

from services.extraction_worker.archiving import Archiver
from services.extraction_worker.handlers import Extraction
from services.extraction_worker.windows import WindowExtraction
from shared.bus.contract import DeadLetterNotice
from shared.config import load_settings
from shared.db.episodes import KeyPlan
from shared.db.ledger import Claim
from shared.db.memory_rows import MemoryRow, NewMemory
from shared.db.windows import PendingTurn, WindowKey
from shared.memory.consolidate import Source
from shared.memory.decisions import Planned
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
    deleted: bool = False  # the user's tombstone covers every event
    commits: int = 0


class CopyingUow:
    """A fake unit of work over a store object: it works on a copy, written back
    only by `commit` (leaving the block without committing rolls back). Its
    repositories (ledger, episodes, memories, ...) are its own methods."""

    def __init__(self, shared) -> None:
        self.shared = shared
        self.ledger = self.windows = self.episodes = self.memories = self.tombstones = self
        self.feedback = self

    def __enter__(self):
        self.db = copy.deepcopy(self.shared)
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def commit(self) -> None:
        committed = copy.deepcopy(self.db)
        if hasattr(committed, "commits"):
            committed.commits = self.shared.commits + 1
        self.shared.__dict__.update(committed.__dict__)


class Uow(CopyingUow):
    """A transaction over `Db`."""

    # ledger
    def applied(self, consumer: str, event_id: str) -> bool:
        return event_id in self.db.ledger

    def record(self, consumer: str, event_id: str) -> bool:
        new = event_id not in self.db.ledger
        self.db.ledger.add(event_id)
        return new

    def peek(self, consumer: str, event_id: str, **_who: object) -> Claim:
        if event_id in self.db.ledger:
            return Claim.DUPLICATE
        return Claim.DELETED if self.db.deleted else Claim.NEW

    # tombstones and locks
    def covers(self, app: str, user_id: str, created_at: datetime) -> bool:
        return self.db.deleted

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

    def messages(self, session: WindowKey, window: str) -> list[tuple[str, bytes]]:
        return [(row[0].event_id, b"{}") for row in self._of(session) if row[1] == window]

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
            new.app, new.user_id, new.project_id, new.session_id, new.scope, new.kind,
            new.entity_name, new.text, str(uuid.uuid4()), new.observed_at, T0, T0,
        )  # fmt: skip
        self.db.memories.append(row)
        return row

    # feedback (what Consolidator asks of each candidate): none marked a memory wrong
    def suppressing(
        self, app: str, user_id: str, event_id: str, entity_name: str, texts: list[str]
    ) -> str | None:
        return None


def units_of(db: Db):
    return lambda: Uow(db)


class Embedder:
    name, dim = "fake", 3

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return [[1.0, 0.0, 0.0] for _ in texts]


def a_turn(n: int):
    """Turn `n` of the session, the same event every time it is asked for."""
    event_id = str(uuid.uuid5(uuid.NAMESPACE_OID, f"turn-{n}"))
    return make_turn(IDS, n, user=f"My locker code {n} is {n}.", event_id=event_id)


def archiver_of(db: Db, **settings) -> Archiver:
    return Archiver(units_of(db), Embedder(), SETTINGS.model_copy(update=settings))


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
            Planned(new_memory_of(turn, sources[turn.turn_id]), sources[turn.turn_id], (), None)
            for turn in inp.turns
        ]

    def plan_profile(self, inp, sources):
        return []  # no app here has a profile schema


def new_memory_of(turn, source: Source) -> NewMemory:
    return NewMemory(
        "app", "ada", "", "", "global", "fact", turn.turn_id, turn.user, None, source.observed_at
    )


def waiting_in(db: Db, *numbers: int, window: str | None = "w1") -> list[PendingTurn]:
    turns = []
    for n in numbers:
        t = a_turn(n)
        turn = PendingTurn(t.event_id, t.turn_id, "", "", t.created_at, t.user, "ok", None)
        db.pending[(SESSION, t.event_id)] = [turn, window]
        turns.append(turn)
    return turns


def extraction_of(db: Db, planner: Planner) -> Extraction:
    extraction = Extraction(units_of(db), None, Embedder(), SETTINGS, request=lambda r: None)  # type: ignore[arg-type]
    extraction.windows = WindowExtraction(units_of(db), planner, SETTINGS)
    return extraction


class Publisher:
    """Records what would be published; every publish is confirmed."""

    def __init__(self) -> None:
        self.published: list[tuple[str, dict[str, str]]] = []
        self.client = self

    def topic_path(self, project: str, topic: str) -> str:
        return f"projects/{project}/topics/{topic}"

    def publish_raw(self, topic: str, data: bytes, attributes):
        self.published.append((topic, dict(attributes)))
        done: Future = Future()
        done.set_result("id")
        return done


def letter_of(event, data: bytes = b"{}") -> DeadLetterNotice:
    return DeadLetterNotice(
        "extraction-requests", event, data, {}, "failed 5 attempts; last error x"
    )
