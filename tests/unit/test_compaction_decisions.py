"""The compaction handler's decisions, with a fake unit of work: what a request
folds, writes and deletes, when it is a duplicate or dropped, when it goes on,
and when a batch that keeps changing under the fold is retried.
tests/integration/test_compaction.py proves the same against the real Postgres."""

from __future__ import annotations

import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from services.compaction_worker.handlers import (
    Compaction,
    as_turn,
    continuation_of,
)
from shared.bus.contract import Outcome
from shared.config import load_settings
from shared.db.episodes import OldEpisode
from shared.db.ledger import Claim
from shared.db.memory_rows import MemoryRow
from shared.db.planned_write import StalePlan
from shared.embeddings import make_embedder
from shared.events import CompactionRequested
from shared.llm import OfflineLLM
from tests.extraction_fakes import CopyingUow

SETTINGS = load_settings(embedding_provider="hash", llm_provider="offline", write_attempts=3)
NOW = datetime(2026, 6, 1, tzinfo=UTC)
OLD, RECENT = NOW - timedelta(days=90), NOW - timedelta(days=2)


@dataclass
class Store:
    episodes: list[OldEpisode] = field(default_factory=list)
    summaries: dict[str, MemoryRow] = field(default_factory=dict)  # project -> summary
    ledger: set[str] = field(default_factory=set)
    deleted: bool = False  # the user's tombstone covers the request
    churn: bool = False  # another writer adds an old episode inside every transaction


class Uow(CopyingUow):
    """A transaction over `Store`."""

    def peek(self, consumer, event_id, **who) -> Claim:
        if event_id in self.db.ledger:
            return Claim.DUPLICATE
        return Claim.DELETED if self.db.deleted else Claim.NEW

    def claim_or_skip(self, consumer, event_id, **who) -> Claim:
        claim = self.peek(consumer, event_id)
        self.db.ledger.add(event_id)
        if self.db.churn:
            self.db.episodes.append(episode(f"late-{uuid.uuid4()}", OLD))
        return claim

    def covers(self, app, user_id, created_at) -> bool:
        return self.db.deleted

    def try_lock_user(self, app, user_id) -> bool:
        return True

    def old(self, app, user_id, project_id, cutoff, limit) -> list[OldEpisode]:
        found = [e for e in self.db.episodes if e.created_at < cutoff]
        return sorted(found, key=lambda e: (e.created_at, e.id))[:limit]

    def delete(self, app, user_id, ids) -> int:
        before = len(self.db.episodes)
        self.db.episodes = [e for e in self.db.episodes if e.id not in ids]
        return before - len(self.db.episodes)

    def live_of_entity(self, key) -> MemoryRow | None:
        return self.db.summaries.get(key.project_id)

    def create(self, key, event_id) -> MemoryRow:
        row = MemoryRow(
            key.app, key.user_id, key.project_id, "", key.scope, key.kind,
            key.entity_name, key.text, str(uuid.uuid4()), key.observed_at, NOW, NOW,
        )  # fmt: skip
        self.db.summaries[key.project_id] = row
        return row

    def update(self, current, text, kind, embedding, observed_at, event_id) -> None:
        self.db.summaries[current.project_id] = replace(current, text=text)


class Publisher:
    def __init__(self) -> None:
        self.published: list[CompactionRequested] = []

    def publish(self, event) -> Future:
        self.published.append(event)
        done: Future = Future()
        done.set_result("1")
        return done


class CountingLLM(OfflineLLM):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def compact(self, previous, episodes, max_tokens):
        self.calls += 1
        return super().compact(previous, episodes, max_tokens)


def folded(previous: str, *episodes: OldEpisode) -> str:
    """What the rules model makes of `episodes` after `previous`."""
    turns = [as_turn(e) for e in episodes]
    return OfflineLLM().compact(previous, turns, SETTINGS.compaction_max_tokens).value.strip()


def episode(name: str, at: datetime, project: str = "") -> OldEpisode:
    return OldEpisode(name, project, "s1", name, f"I use {name}.", "Noted.", at)


def request(batch_limit: int = 50) -> CompactionRequested:
    return CompactionRequested(
        event_id=str(uuid.uuid4()), app="app", user_id="u1", retention_days=30,
        batch_limit=batch_limit, created_at=NOW,
    )  # fmt: skip


def compaction_of(store: Store) -> tuple[Compaction, CountingLLM, Publisher]:
    llm, publisher = CountingLLM(), Publisher()
    compaction = Compaction(
        lambda: Uow(store),
        llm,
        make_embedder(SETTINGS),
        SETTINGS,
        publisher,  # type: ignore[arg-type]
    )
    return compaction, llm, publisher


def test_old_episodes_fold_into_one_summary_per_project_and_go():
    vim, go = episode("vim", OLD), episode("go", OLD, "Alpha")
    tmux = episode("tmux", OLD + timedelta(hours=1))
    store = Store([vim, tmux, go, episode("zsh", RECENT)])
    compaction, llm, publisher = compaction_of(store)
    event = request()
    assert compaction.handle_request(event, None) is Outcome.APPLIED
    assert [e.id for e in store.episodes] == ["zsh"]
    assert {p: m.text for p, m in store.summaries.items()} == {
        "": folded("", vim, tmux),
        "Alpha": folded("", go),
    }
    assert store.ledger == {event.event_id}
    assert (llm.calls, publisher.published) == (2, [])  # nothing old is left


def test_a_batch_limit_leaves_the_rest_to_a_continuation():
    store = Store([episode("vim", OLD), episode("tmux", OLD + timedelta(hours=1))])
    compaction, _llm, publisher = compaction_of(store)
    event = request(batch_limit=1)
    assert compaction.handle_request(event, None) is Outcome.APPLIED
    assert [e.id for e in store.episodes] == ["tmux"]
    assert publisher.published == [continuation_of(event)]


def test_a_summary_is_folded_on_not_replaced():
    vim, tmux = episode("vim", OLD), episode("tmux", OLD)
    store = Store([vim])
    compaction, _llm, _publisher = compaction_of(store)
    compaction.handle_request(request(), None)
    store.episodes.append(tmux)
    assert compaction.handle_request(request(), None) is Outcome.APPLIED
    assert store.summaries[""].text == folded(folded("", vim), tmux)


def test_a_request_applied_before_is_a_duplicate_without_a_model_call():
    store = Store([episode("vim", OLD)])
    compaction, llm, _publisher = compaction_of(store)
    event = request()
    store.ledger.add(event.event_id)
    assert compaction.handle_request(event, None) is Outcome.DUPLICATE
    assert (llm.calls, [e.id for e in store.episodes], store.summaries) == (0, ["vim"], {})


def test_a_deleted_users_request_is_dropped_and_leaves_only_its_ledger_row():
    store = Store([episode("vim", OLD)], deleted=True)
    compaction, llm, publisher = compaction_of(store)
    event = request()
    assert compaction.handle_request(event, None) is Outcome.DROPPED
    assert (store.ledger, store.summaries, llm.calls) == ({event.event_id}, {}, 0)
    assert publisher.published == []


def test_a_batch_that_keeps_changing_under_the_fold_is_retried_as_an_error():
    store = Store([episode("vim", OLD)], churn=True)
    compaction, llm, _publisher = compaction_of(store)
    with pytest.raises(StalePlan, match=r"3 plans in a row \(last: the batch of old episodes"):
        compaction.handle_request(request(), None)
    assert (store.ledger, store.summaries, llm.calls) == (set(), {}, 3)  # nothing committed
