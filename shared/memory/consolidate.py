"""Consolidation: each candidate against the most similar live memories of its
user and scope, decided by the LLM (or the `offline` provider; `shared.memory.
decisions` asks, outside any transaction), applied here with the late-event
rule: an observation older than the last one that changed the memory (a late or
replayed event) changes nothing and is written to history only (a revision with
`applied` false).

Isolation does not rest on the LLM: a candidate's scope and project are
corrected to what the source (a turn, a generate request) had, so a turn can
never write into another project, session or user.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from shared.db.memory_rows import COMPACTED_ENTITY, MemoryRow, NewMemory
from shared.db.similar import similar_memories
from shared.db.unit_of_work import UnitOfWork
from shared.llm.base import KINDS, SCOPES, Action, Candidate, Decision, ExistingMemory
from shared.memory.ranking import Fusion


@dataclass(frozen=True)
class Source:
    """Where candidates come from: the owner, the turn's project and session, when."""

    app: str
    user_id: str
    project_id: str
    session_id: str
    observed_at: datetime
    event_id: str | None
    metadata: dict[str, Any] = field(default_factory=dict)  # the caller's, on what it writes
    agent_id: str = ""  # the agent whose memory it becomes ('' the user's: shared/memory/agents.py)


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
        topic=candidate.topic,
        entities=candidate.entities,
        judgements=candidate.judgements,
        metadata=source.metadata,
        agent_id=source.agent_id,
    )


def expired(memory: MemoryRow, now: datetime) -> bool:
    """Past its expiry at `now`, the database's time (`UnitOfWork.now`), as the
    reads decide it: a writer whose own clock is off decides the same."""
    return memory.expire_at is not None and memory.expire_at <= now


def neighbours(uow: UnitOfWork, new: NewMemory, fusion: Fusion, limit: int) -> list[MemoryRow]:
    """The live memory of the same entity first, then the most similar live
    memories of exactly this user, scope, project, session and agent. The compacted
    summary is the compaction worker's alone: a new fact never updates or
    retires it, so it is never a neighbour."""
    found = uow.run(similar_memories(new, fusion, limit, except_entity=COMPACTED_ENTITY))
    same = uow.memories.live_of_entity(new) if new.entity_name != COMPACTED_ENTITY else None
    if same is not None and not (same.expire_at and expired(same, uow.now())):
        found = [same, *[m for m in found if m.id != same.id]][:limit]
    return found


def existing(memories: list[MemoryRow]) -> list[ExistingMemory]:
    return [
        ExistingMemory(m.id, m.entity_name, m.kind, m.scope, m.project_id, m.text) for m in memories
    ]


def candidate_of(new: NewMemory) -> Candidate:
    return Candidate(new.entity_name, new.kind, new.scope, new.project_id, new.text)


class Consolidator:
    """Applies decisions inside the caller's transaction (which holds the user lock).
    A decision was made against the memories as they were before the transaction:
    its target is read again here, as earlier candidates of the same window may
    have changed or retired it."""

    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow
        self.store = uow.memories
        self.feedback = uow.feedback

    def apply(self, new: NewMemory, source: Source, decision: Decision | None) -> Applied:
        """`decision` None: written as it is (a direct write that skips consolidation)."""
        if not new.text or self._held_back(new, source, decision):
            return Applied(Action.NONE, None, "")
        if decision is None:
            return self._create(new, source)
        target = None
        if decision.target_id:
            target = self.store.get(new.app, new.user_id, decision.target_id)
            if target is not None and target.valid_to is not None:
                target = None  # retired meanwhile, by an earlier candidate of the window
            if target is not None and target.agent_id != new.agent_id:
                target = None  # another owner's: an agent never changes what it does not own
        if decision.action == Action.NONE:
            return Applied(Action.NONE, target, "")
        if decision.action == Action.DELETED and target is None:
            return Applied(Action.NONE, None, "")  # nothing left to retire
        if decision.action == Action.UPDATED and target is None:
            return self._create(new, source)
        if decision.action == Action.UPDATED:
            assert target is not None
            text = decision.text.strip() or new.text
            if target.observed_at > source.observed_at:
                return self._history(target, Action.UPDATED, target.text, text, source)
            kind = new.kind if new.kind == "rule" or target.kind != "rule" else target.kind
            memory = self._update(target, text, kind, new, source)
            return Applied(Action.UPDATED, memory, text)
        if decision.action == Action.DELETED:
            assert target is not None
            if target.observed_at > source.observed_at:
                return self._history(target, Action.DELETED, target.text, None, source)
            retired = self.store.retire(target, source.observed_at, source.event_id)
            return Applied(Action.DELETED, retired, target.text)
        text = decision.text.strip() or new.text
        return self._create(replace(new, text=text), source)

    def _update(
        self, current: MemoryRow, text: str, kind: str, new: NewMemory, source: Source
    ) -> MemoryRow:
        """`current` rewritten to `text` and `kind` by the candidate `new` (its
        embedding, its expiry and metadata), as observed by `source`."""
        return self.store.update(
            current,
            text,
            kind,
            new.embedding,
            source.observed_at,
            source.event_id,
            expire_at=new.updated_expire_at,
            metadata=new.metadata,
            new=new,
        )

    def _held_back(self, new: NewMemory, source: Source, decision: Decision | None) -> bool:
        """Whether the candidate would write its turn again into a memory that wrong
        feedback retired (`shared.memory.feedback`): however often the turn is
        extracted (its event redelivered, its window extracted again), not into the
        same memory. A candidate that retires a memory goes on."""
        if source.event_id is None or (decision and decision.action == Action.DELETED):
            return False
        texts = [new.text] + ([decision.text] if decision and decision.text else [])
        held = self.feedback.suppressing(
            new.app, new.user_id, source.event_id, new.entity_name, texts
        )
        return held is not None

    def _create(self, new: NewMemory, source: Source) -> Applied:
        latest = self.store.latest_of_entity(new)
        if latest is not None and latest.observed_at > source.observed_at:
            # A newer observation of this entity exists (live or retired): a late
            # event must not bring an old value back.
            return self._history(latest, Action.CREATED, None, new.text, source)
        live = self.store.live_of_entity(new)
        if live is not None and live.expire_at and expired(live, self.uow.now()):
            # Out of sight already, the sweep's to retire: retired now, and the new
            # memory made afresh (it holds the entity's slot until it is retired).
            self.store.retire(live, source.observed_at, None, change="EXPIRED")
            live = None
        if live is not None:
            if live.text == new.text:
                return Applied(Action.NONE, live, "")
            memory = self._update(live, new.text, new.kind, new, source)
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
