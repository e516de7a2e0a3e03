"""The context's long-term part, read from Postgres: the memories relevant to the
query with the scope's pinned rules, the recalled turns (the archive searched as
`archive:search` searches it, the period the query names first, each hit with
its neighbouring turns), and the scope's long-term summaries when the query
names a period they reach into.

The query is embedded once. The memories (then where they come from, then the
summaries) and the recalled turns (then their neighbours) are read at once on
two connections; either may fail alone, and the context names what is missing
in `degraded` ("memories", "recalled_turns").
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.db import archive_search
from shared.db import search as db_search
from shared.db.context_reads import Cited, long_term_summaries
from shared.db.memory_rows import COMPACTED_ENTITY, MemoryRow
from shared.db.run import Steps
from shared.memory.filters import Node
from shared.memory.periods import Period, find_period
from shared.memory.ranking import Ranked, Scope
from shared.memory.search import Found, FoundEpisode, MemorySearch


@dataclass(frozen=True)
class LongTermQuery:
    """What the long-term part is read for. `hits` 0 reads no recalled turns;
    `summaries` False no long-term summaries; the memory search (which brings
    the pinned rules) always runs."""

    scope: Scope
    query: str
    k: int
    hits: int
    neighbours: int
    summaries: bool
    asked_at: datetime
    matching: Node | None = None  # the caller's filter of the memories and rules


@dataclass(frozen=True, slots=True)
class LongTermSummary:
    """A long-term summary and how it came in: ranked by the memory search (`rank`
    among its results, from 1), or (`rank` None) because the query names a period
    it reaches into."""

    memory: MemoryRow
    rank: int | None = None
    ranked: Ranked | None = None


@dataclass
class LongTerm:
    memories: list[Found] = field(default_factory=list)
    rules: list[MemoryRow] = field(default_factory=list)
    cited: dict[str, Cited] = field(default_factory=dict)
    summaries: list[LongTermSummary] = field(default_factory=list)
    hits: list[FoundEpisode] = field(default_factory=list)
    # Hit id -> the turns around it (`shared.db.archive_search.recall`).
    around: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    period: Period | None = None
    failures: dict[str, BaseException] = field(default_factory=dict)


def _memory_part(
    q: LongTermQuery, search: MemorySearch, embedding: str, period: Period | None
) -> Steps[tuple[list[Found], list[MemoryRow], dict[str, Cited], list[LongTermSummary]]]:
    cited: dict[str, Cited] = {}
    found, rules = yield from db_search.search_memories(
        q.scope,
        [q.query],
        [embedding],
        q.k,
        search.fusion,
        pinned=True,
        citations=cited,
        matching=q.matching,
    )
    # A rule both pinned and found is in the context once, as a rule; a long-term summary the
    # search found is a long-term summary, not a memory.
    pinned = {rule.id for rule in rules}
    summaries = [
        LongTermSummary(m, rank, r)
        for rank, (m, r) in enumerate(found, start=1)
        if m.entity_name == COMPACTED_ENTITY and q.summaries
    ]
    memories = [
        Found(m, r) for m, r in found if m.id not in pinned and m.entity_name != COMPACTED_ENTITY
    ]
    if q.summaries and period is not None:
        ranked = {f.memory.id for f in summaries}
        for summary in (yield from long_term_summaries(q.scope, cited)):
            # A long-term summary holds the turns up to its `observed_at`: a period that starts
            # after that is none of its business.
            if summary.id not in ranked and period.start <= summary.observed_at:
                summaries.append(LongTermSummary(summary))
    return memories, rules, cited, summaries


def _turn_part(
    q: LongTermQuery, search: MemorySearch, embedding: str, period: Period | None
) -> Steps[tuple[list[FoundEpisode], dict[str, list[dict[str, Any]]]]]:
    scope = Scope(
        q.scope.app,
        q.scope.user_id,
        q.scope.project_id,
        time=q.scope.time,
        agent_id=q.scope.agent_id,
    )
    start, end = (period.start, period.end) if period is not None else (None, None)
    rows, around = yield from archive_search.recall(
        scope, q.query, embedding, q.hits, search.fusion, q.neighbours, start, end
    )
    return [FoundEpisode(fields, ranked) for fields, ranked in rows], around


async def read_long_term(q: LongTermQuery, search: MemorySearch) -> LongTerm:
    """The long-term part; what could not be read is in `failures`."""
    read = LongTerm()
    try:
        # In pgvector's text form once, for both statements.
        embedding = db_search.vector_text((await search.embedder.aembed_queries([q.query]))[0])
    except Exception as exc:  # an embedder outage: nothing of Postgres can be ranked
        read.failures["memories"] = exc
        if q.hits:
            read.failures["recalled_turns"] = exc
        return read
    read.period = find_period(q.query, q.asked_at)
    parts: list[Any] = [search.run(_memory_part(q, search, embedding, read.period))]
    if q.hits:
        parts.append(search.run(_turn_part(q, search, embedding, read.period)))
    memories, *turns = await asyncio.gather(*parts, return_exceptions=True)
    if isinstance(memories, BaseException):
        read.failures["memories"] = memories
    else:
        read.memories, read.rules, read.cited, read.summaries = memories
    for part in turns:
        if isinstance(part, BaseException):
            read.failures["recalled_turns"] = part
        else:
            read.hits, read.around = part
    return read
