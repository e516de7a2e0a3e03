"""Hybrid search on the event loop: the queries embedded, then one statement
(`shared.db.search`) on the asyncio Postgres pool. The context and
`memories:search` share `MemorySearch.memories`; the archive search is
`MemorySearch.episodes`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from psycopg_pool import AsyncConnectionPool

from shared.db import archive_search
from shared.db import search as db_search
from shared.db.memory_rows import MemoryRow
from shared.db.run import Steps, arun
from shared.embeddings.base import Embedder
from shared.llm.base import LLM
from shared.memory.filters import Node
from shared.memory.periods import Period
from shared.memory.ranking import Fusion, Ranked, Scope

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Found:
    """A memory a search ranked, and how."""

    memory: MemoryRow
    ranked: Ranked


@dataclass(frozen=True, slots=True)
class FoundEpisode:
    """An episode a search ranked (its `shared.db.archive_search.EPISODE_COLUMNS`), and how."""

    fields: dict[str, Any]
    ranked: Ranked


@dataclass(frozen=True, slots=True)
class MemorySearch:
    pool: AsyncConnectionPool
    embedder: Embedder
    fusion: Fusion

    async def memories(
        self,
        scope: Scope,
        queries: list[str],
        k: int,
        kinds: Sequence[str] | None = None,
        pinned: bool = False,
        embeddings: list[Any] | None = None,
        matching: Node | None = None,
    ) -> tuple[list[Found], list[MemoryRow]]:
        """Fused top-k memories (of those the filter `matching` admits) and, if
        `pinned`, the scope's pinned rules: one statement. `embeddings`: the queries'
        own, when the caller has embedded them already."""
        if embeddings is None:
            embeddings = await self.embedder.aembed_queries(queries)
        steps = db_search.search_memories(
            scope, queries, embeddings, k, self.fusion, kinds, pinned, matching=matching
        )
        found, rules = await self.run(steps)
        return [Found(memory, ranked) for memory, ranked in found], rules

    async def episodes(
        self,
        scope: Scope,
        query: str,
        k: int,
        before: datetime | None = None,
        after: datetime | None = None,
        embedding: Any | None = None,
    ) -> list[FoundEpisode]:
        """Fused top-k episodes of the archive, created in (`after`, `before`)."""
        if embedding is None:
            embedding = (await self.embedder.aembed_queries([query]))[0]
        fusion = self.fusion
        steps = archive_search.search_episodes(scope, query, embedding, k, fusion, before, after)
        return [FoundEpisode(fields, ranked) for fields, ranked in await self.run(steps)]

    async def episodes_in(
        self, scope: Scope, query: str, k: int, period: Period, embedding: Any | None = None
    ) -> list[FoundEpisode]:
        """The top-k episodes of `period` and, if it holds fewer than k, the best of
        the rest of the archive after them."""
        if embedding is None:
            embedding = (await self.embedder.aembed_queries([query]))[0]
        steps = archive_search.search_episodes_within(
            scope, query, embedding, k, self.fusion, period.start, period.end
        )
        return [FoundEpisode(fields, ranked) for fields, ranked in await self.run(steps)]

    async def surrounding(
        self, scope: Scope, found: list[FoundEpisode], turns: int
    ) -> list[list[dict[str, Any]]]:
        """Per hit, in order, the turns around it in its session (`turns` before and
        after), each listed once: none that is a hit itself or already listed
        around a better hit (adjacent hits share their neighbours)."""
        hits = [f.fields["id"] for f in found]
        around = await self.run(archive_search.surrounding_turns(scope, hits, turns))
        shown = set(hits)
        listed = []
        for hit in hits:
            turns_of_hit = [t for t in around.get(hit, []) if t["id"] not in shown]
            shown.update(t["id"] for t in turns_of_hit)
            listed.append(turns_of_hit)
        return listed

    async def run(self, steps: Steps[T]) -> T:
        """`steps` on one connection of the pool."""
        async with self.pool.connection() as conn:
            return await arun(conn, steps)


async def sub_queries(llm: LLM, query: str) -> list[str]:
    """The query split into single-topic sub-queries by the LLM (blocking, so on a
    worker thread); the query itself when the LLM finds none."""
    return (await asyncio.to_thread(llm.decompose, query, "", "")).value or [query]
