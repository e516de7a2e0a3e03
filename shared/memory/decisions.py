"""Deciding what new memories do to a user's memories without a transaction open
while the model decides, then applying the decisions in one short transaction.

`weigh` reads each candidate's neighbours (`consolidate.neighbours`) in a short
read-only transaction and asks the model about every candidate in one call, with
no transaction open and no lock held. The writer then takes the user's lock and
checks, with `verify`, that every candidate still has the neighbours it was
decided against (the same memories, none changed since); only then does it
`apply` the decisions. When something changed, `verify` raises `StalePlan` and
the caller decides again from fresh reads (`shared.db.planned_write`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from shared.config import Settings
from shared.db.memory_rows import MemoryRow, NewMemory
from shared.db.planned_write import StalePlan, write_for_user
from shared.db.unit_of_work import UnitOfWork
from shared.embeddings.base import Embedder
from shared.llm import extraction_prompts
from shared.llm.base import LLM, Action, Candidate, Decision, Weighing
from shared.memory import expiry
from shared.memory.consolidate import (
    Applied,
    Consolidator,
    Source,
    candidate_of,
    existing,
    neighbours,
    new_memory,
)
from shared.memory.ranking import Fusion
from shared.tokens import estimate_tokens

Units = Callable[[], UnitOfWork]


@dataclass(frozen=True)
class Planned:
    """A new memory, where it comes from, the neighbours its decision was made
    against, and the decision (None: written without consolidation)."""

    new: NewMemory
    source: Source
    seen: tuple[MemoryRow, ...]
    decision: Decision | None


def _version(memory: MemoryRow) -> tuple[str, object, str]:
    return memory.id, memory.updated_at, memory.text


def weigh(
    units: Units,
    llm: LLM,
    fusion: Fusion,
    limit: int,
    items: list[tuple[NewMemory, Source]],
    max_tokens: int | None = None,
) -> list[Planned]:
    """Each new memory's decision, in one model call for all of them (more only
    when their request would be over `max_tokens`)."""
    items = [(new, source) for new, source in items if new.text]
    if not items:
        return []
    with units() as uow:
        seen = [neighbours(uow, new, fusion, limit) for new, _source in items]
    weighings = [
        Weighing(candidate_of(new), tuple(existing(found)))
        for (new, _source), found in zip(items, seen, strict=True)
    ]
    decisions = []
    for batch in _batches(weighings, max_tokens):
        decisions += llm.consolidate(batch).value
    return [
        Planned(new, source, tuple(found), decision)
        for (new, source), found, decision in zip(items, seen, decisions, strict=True)
    ]


def _batches(weighings: list[Weighing], max_tokens: int | None) -> list[list[Weighing]]:
    """Consecutive batches whose consolidation request fits `max_tokens`."""
    if max_tokens is None:
        return [weighings]
    batches: list[list[Weighing]] = [[]]
    for weighing in weighings:
        trial = [*batches[-1], weighing]
        if batches[-1] and _request_tokens(trial) > max_tokens:
            batches.append([])
        batches[-1].append(weighing)
    return batches


def _request_tokens(weighings: list[Weighing]) -> int:
    return estimate_tokens(
        extraction_prompts.CONSOLIDATION_INSTRUCTION
        + extraction_prompts.consolidation_prompt(weighings)
    )


def verify(uow: UnitOfWork, planned: list[Planned], fusion: Fusion, limit: int) -> None:
    """Under the user's lock: every decided memory still has the neighbours it was
    decided against, each as it was; else `StalePlan`."""
    for plan in planned:
        if plan.decision is None:
            continue
        now = neighbours(uow, plan.new, fusion, limit)
        if {_version(m) for m in now} != {_version(m) for m in plan.seen}:
            raise StalePlan(f"the memories {plan.new.entity_name!r} was weighed against changed")


def apply(uow: UnitOfWork, planned: list[Planned]) -> list[Applied]:
    """The decisions, in order, in the caller's transaction (which holds the lock)."""
    consolidator = Consolidator(uow)
    return [consolidator.apply(p.new, p.source, p.decision) for p in planned]


def write_memory(
    units: Units,
    embedder: Embedder,
    llm: LLM,
    settings: Settings,
    candidate: Candidate,
    source: Source,
    consolidate: bool = True,
    expire_at: datetime | None = None,
) -> Applied:
    """One memory a client writes (`POST /v1/memories`): embedded, then, unless
    `consolidate` is false, decided like the extraction worker's candidates, and
    written in one transaction that holds the user's lock. It expires at
    `expire_at`, or else as the app's `create` TTL says. Blocking."""
    new = new_memory(candidate, source, embedder.embed([candidate.text])[0])
    if expire_at is not None:
        new = replace(new, expire_at=expire_at, updated_expire_at=expire_at)
    else:
        with units() as uow:
            ttl = expiry.load(uow, source.app)
        new = expiry.with_expiry(new, ttl, "create", "create")
    fusion = Fusion.from_settings(settings)
    limit = settings.consolidation_neighbours

    def plan() -> list[Planned]:
        if consolidate:
            return weigh(units, llm, fusion, limit, [(new, source)])
        return [Planned(new, source, (), None)]

    def write(uow: UnitOfWork, planned: list[Planned]) -> list[Applied]:
        verify(uow, planned, fusion, limit)
        return apply(uow, planned)

    applied = write_for_user(
        units,
        source.app,
        source.user_id,
        settings.write_attempts,
        "the user's memories",
        plan,
        write,
    )
    return applied[0] if applied else Applied(Action.NONE, None, "")
