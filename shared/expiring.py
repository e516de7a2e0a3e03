"""A small in-process cache whose values expire: a search keeps the scopes' row
counts in it (`shared.db.search_filters.ScopeSizes`), and the planner's estimates
of its filters' (`FilterSizes`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# How long search keeps the scopes' counts and its filters' estimated sizes.
TTL_SECONDS = 60.0


class Expiring(Generic[K, V]):
    """Values kept `ttl` seconds in this process, shared by its threads; at most
    `size` of them (storing one more forgets the oldest), and none past its time."""

    def __init__(
        self,
        ttl: float = TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        size: int = 10_000,
    ) -> None:
        self.ttl = ttl
        self.size = size
        self._clock = clock
        self._lock = threading.Lock()
        # Oldest first: a value stored again moves to the end.
        self._found: dict[K, tuple[float, V]] = {}

    def cached(self, key: K) -> V | None:
        with self._lock:
            entry = self._found.get(key)
        return entry[1] if entry is not None and entry[0] > self._clock() else None

    def store(self, key: K, value: V) -> V:
        with self._lock:
            now = self._clock()
            self._found.pop(key, None)
            self._found[key] = (now + self.ttl, value)
            while self._found:
                oldest = next(iter(self._found))
                if self._found[oldest][0] > now and len(self._found) <= self.size:
                    break
                del self._found[oldest]
        return value

    def __len__(self) -> int:
        return len(self._found)
