"""Consolidation: each candidate against the most similar live memories of its
user and scope, decided by the LLM (or the `rules` provider), applied with the
late-event rule: an observation older than the last one that changed the
memory (a late or replayed event) changes nothing and is written to history
only (a revision with `applied` false).

Isolation does not rest on the LLM: a candidate's scope and project are
corrected to what the source (a turn, a generate request) had, so a turn can
never write into another project, session or user.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from psycopg_pool import ConnectionPool

from shared.config import Settings
from shared.db.memories import COMPACTED_ENTITY, MemoryRow, NewMemory
from shared.db.search import similar_memories
from shared.db.unit_of_work import UnitOfWork
from shared.embeddings.base import Embedder
from shared.llm.base import KINDS, LLM, SCOPES, Action, Candidate, ExistingMemory
from shared.memory.search import Fusion


@dataclass(frozen=True)
class Source:
    """Where candidates come from: the owner, the turn's project and session, when."""

    app: str
    user_id: str
    project_id: str
    session_id: str
    observed_at: datetime
    event_id: str | None


@dataclass(frozen=True)
class Applied:
    """What consolidation did with one candidate. `action` is CREATED, UPDATED,
    DELETED, NONE (a duplicate) or HISTORY (older than what the memory knows)."""

    action: Action
    memory: MemoryRow | None
    text: str


def correct(candidate: Candidate, source: Source) -> Candidate:
    """The candidate within the source's bounds: a project scope is the source's
    project (global when the source had none), a session scope its session."""
    scope = candidate.scope if candidate.scope in SCOPES else "global"
    kind = candidate.kind if candidate.kind in KINDS else "fact"
    if scope == "project" and not source.project_id:
        scope = "global"
    if scope == "session" and not source.session_id:
        scope = "project" if source.project_id else "global"
    project_id = source.project_id if scope == "project" else ""
    return replace(candidate, scope=scope, kind=kind, project_id=project_id)


def new_memory(candidate: Candidate, source: Source, embedding: Any) -> NewMemory:
    entity_name = candidate.entity_name.strip()[:200]
    if entity_name.casefold() == COMPACTED_ENTITY:
        entity_name = ""  # reserved for the compacted summary, which nothing else may touch
    return NewMemory(
        app=source.app,
        user_id=source.user_id,
        project_id=candidate.project_id,
        session_id=source.session_id if candidate.scope == "session" else "",
        scope=candidate.scope,
        kind=candidate.kind,
        entity_name=entity_name,
        text=candidate.text.strip(),
        embedding=embedding,
        observed_at=source.observed_at,
    )


def neighbours(uow: UnitOfWork, new: NewMemory, fusion: Fusion, limit: int) -> list[MemoryRow]:
    """The live memory of the same entity first, then the most similar live
    memories of exactly this user, scope, project and session. The compacted
    summary is the compaction worker's alone: a new fact never updates or
    retires it, so it is never a neighbour."""
    found = uow.run(similar_memories(new, fusion, limit, except_entity=COMPACTED_ENTITY))
    same = uow.memories.live_of_entity(new) if new.entity_name != COMPACTED_ENTITY else None
    if same is not None:
        found = [same, *[m for m in found if m.id != same.id]][:limit]
    return found


def existing(memories: list[MemoryRow]) -> list[ExistingMemory]:
    return [
        ExistingMemory(m.id, m.entity_name, m.kind, m.scope, m.project_id, m.text) for m in memories
    ]


class Consolidator:
    """Applies candidates inside the caller's transaction (which holds the user lock)."""

    def __init__(self, uow: UnitOfWork, llm: Any, fusion: Fusion, limit: int) -> None:
        self.uow = uow
        self.store = uow.memories
        self.llm = llm
        self.fusion = fusion
        self.limit = limit

    def apply(self, new: NewMemory, source: Source, consolidate: bool = True) -> Applied:
        if not new.text:
            return Applied(Action.NONE, None, "")
        if not consolidate:
            return self._create(new, source)
        found = neighbours(self.uow, new, self.fusion, self.limit)
        candidate = Candidate(new.entity_name, new.kind, new.scope, new.project_id, new.text)
        decision = self.llm.consolidate(candidate, existing(found)).value
        by_id = {m.id: m for m in found}
        target = by_id.get(decision.target_id or "")
        if decision.action == Action.NONE:
            return Applied(Action.NONE, target, "")
        if decision.action in (Action.UPDATED, Action.DELETED) and target is None:
            # The provider's own parsing rejects an unknown target; stay safe anyway.
            return self._create(new, source)
        if decision.action == Action.UPDATED:
            assert target is not None
            text = decision.text.strip() or new.text
            if target.observed_at > source.observed_at:
                return self._history(target, Action.UPDATED, target.text, text, source)
            kind = new.kind if new.kind == "rule" or target.kind != "rule" else target.kind
            memory = self.store.update(
                target, text, kind, new.embedding, source.observed_at, source.event_id
            )
            return Applied(Action.UPDATED, memory, text)
        if decision.action == Action.DELETED:
            assert target is not None
            if target.observed_at > source.observed_at:
                return self._history(target, Action.DELETED, target.text, None, source)
            retired = self.store.retire(target, source.observed_at, source.event_id)
            return Applied(Action.DELETED, retired, target.text)
        text = decision.text.strip() or new.text
        return self._create(replace(new, text=text), source)

    def _create(self, new: NewMemory, source: Source) -> Applied:
        latest = self.store.latest_of_entity(new)
        if latest is not None and latest.observed_at > source.observed_at:
            # A newer observation of this entity exists (live or retired): a late
            # event must not bring an old value back.
            return self._history(latest, Action.CREATED, None, new.text, source)
        live = self.store.live_of_entity(new)
        if live is not None:
            if live.text == new.text:
                return Applied(Action.NONE, live, "")
            memory = self.store.update(
                live, new.text, new.kind, new.embedding, source.observed_at, source.event_id
            )
            return Applied(Action.UPDATED, memory, new.text)
        memory = self.store.create(new, source.event_id)
        return Applied(Action.CREATED, memory, new.text)

    def _history(
        self,
        memory: MemoryRow,
        action: Action,
        old_text: str | None,
        new_text: str | None,
        source: Source,
    ) -> Applied:
        self.store.revise(
            memory, action, old_text, new_text, source.event_id, source.observed_at, applied=False
        )
        return Applied(Action.HISTORY, memory, new_text or "")


def write_memory(
    pool: ConnectionPool,
    embedder: Embedder,
    llm: LLM,
    settings: Settings,
    candidate: Candidate,
    source: Source,
    consolidate: bool = True,
) -> Applied:
    """One memory a client writes (`POST /v1/memories`), embedded and then, unless
    `consolidate` is false, consolidated like the extraction worker's candidates:
    in one committed transaction that holds the user's lock. Blocking."""
    vector = embedder.embed([candidate.text])[0]
    with UnitOfWork(pool) as uow:
        uow.memories.lock_user(source.app, source.user_id)
        consolidator = Consolidator(
            uow, llm, Fusion.from_settings(settings), settings.consolidation_neighbours
        )
        applied = consolidator.apply(
            new_memory(candidate, source, vector), source, consolidate=consolidate
        )
        uow.commit()
    return applied
