"""The query cache: an agent often asks the same thing twice in a row (a retried
turn, several tools with one question), and a query embedding is a network
call. Identical query texts within `AM_QUERY_CACHE_SECONDS` reuse their vector.

Entries live that long from when they were stored (a hit does not extend them);
past `AM_QUERY_CACHE_SIZE` entries the least recently used goes. One lock guards
the table and is held only for dictionary work, never across a provider call,
so threads and the event loop can share the cache without waiting on the network.
Two callers missing the same text at the same moment both ask the provider;
the later answer is stored.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

from shared.embeddings.base import Embedder


class QueryCache:
    """A thread-safe TTL + LRU table of vectors."""

    def __init__(
        self, seconds: float, size: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if seconds <= 0 or size < 1:
            raise ValueError("a query cache needs a positive window and size")
        self.seconds = seconds
        self.size = size
        self._clock = clock
        self._entries: OrderedDict[Hashable, tuple[float, tuple[float, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, key: Hashable) -> list[float] | None:
        """A fresh copy of the vector stored under `key`, or None if absent or expired."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            expires, vector = entry
            if now >= expires:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
        return list(vector)

    def put(self, key: Hashable, vector: Sequence[float]) -> None:
        expires = self._clock() + self.seconds
        stored = tuple(vector)  # callers may change their lists; the cache's stays
        with self._lock:
            self._entries[key] = (expires, stored)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


class CachedEmbedder:
    """`inner` with its query embeddings cached by (provider, model, text). Documents
    pass straight through: they are embedded once, when they are written."""

    def __init__(self, inner: Embedder, model: str, cache: QueryCache) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.model = model
        self.cache = cache

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed(texts)

    def close(self) -> None:
        """Close the provider's connections, if it has any."""
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()

    async def aclose(self) -> None:
        """Close the provider's asyncio connections, if it has any."""
        aclose = getattr(self.inner, "aclose", None)
        if aclose is not None:
            await aclose()

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        found, missing = self._lookup(texts)
        if missing:
            self._store(found, missing, self.inner.embed_queries(missing))
        return [found[text] for text in texts]

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        found, missing = self._lookup(texts)
        if missing:
            self._store(found, missing, await self.inner.aembed_queries(missing))
        return [found[text] for text in texts]

    def _key(self, text: str) -> tuple[str, str, str]:
        return (self.name, self.model, text)

    def _lookup(self, texts: Sequence[str]) -> tuple[dict[str, list[float]], list[str]]:
        """The cached vectors by text, and the distinct texts still to embed, in order."""
        found: dict[str, list[float]] = {}
        missing: dict[str, None] = {}  # an ordered set
        for text in texts:
            if text in found or text in missing:
                continue
            vector = self.cache.get(self._key(text))
            if vector is None:
                missing[text] = None
            else:
                found[text] = vector
        return found, list(missing)

    def _store(
        self, found: dict[str, list[float]], missing: list[str], vectors: list[list[float]]
    ) -> None:
        for text, vector in zip(missing, vectors, strict=True):
            self.cache.put(self._key(text), vector)
            found[text] = vector
