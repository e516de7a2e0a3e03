"""What the embedders behind an HTTP endpoint (`gemini`, `openai`) share: texts in
batches of `AM_EMBEDDING_BATCH_SIZE` (blank ones not sent), each batch retried as a
model's request is (`shared.llm.retrying`), counted as a model call under its
purpose (`embed_documents` or `embed_queries`), and its reply checked.

A provider says how to send one batch (blocking and asyncio), which failures are
worth another attempt, and how to read the vectors and tokens from a reply.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, cast

from shared.config import Settings
from shared.embeddings.base import (
    EmbeddingError,
    EmbeddingRateLimited,
    EmbeddingUnavailable,
    batches,
    plan,
)
from shared.llm import accounting
from shared.llm.retrying import Attempt, GiveUp, Refusal, retry_delay

DOCUMENTS = "embed_documents"
QUERIES = "embed_queries"
_GIVE_UP = GiveUp(EmbeddingError, EmbeddingUnavailable, EmbeddingRateLimited, "no embeddings")


class RemoteEmbedder:
    name: str

    def __init__(self, settings: Settings, model: str) -> None:
        self.settings = settings
        self.model = model
        self.dim = settings.embedding_dim
        self.batch_size = settings.embedding_batch_size

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed_all(texts, DOCUMENTS)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed_all(texts, QUERIES)

    def _embed_all(self, texts: Sequence[str], purpose: str) -> list[list[float]]:
        vectors, pending = plan(texts, self.dim)
        for batch in batches(pending, self.batch_size):
            replies = self._call([text for _, text in batch], purpose)
            for (index, _), vector in zip(batch, replies, strict=True):
                vectors[index] = vector
        return cast(list[list[float]], vectors)  # every slot is filled now

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        vectors, pending = plan(texts, self.dim)
        for batch in batches(pending, self.batch_size):
            replies = await self._acall([text for _, text in batch])
            for (index, _), vector in zip(batch, replies, strict=True):
                vectors[index] = vector
        return cast(list[list[float]], vectors)

    # What a provider says.
    def _send(self, texts: list[str], purpose: str) -> Any:
        raise NotImplementedError

    async def _asend(self, texts: list[str], purpose: str) -> Any:
        raise NotImplementedError

    def _refusal(self, exc: Exception) -> Refusal | None:
        """What kind of failure `exc` is, or None for one no retry can mend."""
        raise NotImplementedError

    def _vectors(self, response: Any, texts: list[str], purpose: str) -> list[list[float]]:
        """The reply's vectors, checked, in order; its tokens counted."""
        raise NotImplementedError

    def _call(self, texts: list[str], purpose: str) -> list[list[float]]:
        """One batch, retried; its vectors in order."""
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                with accounting.timed(self.name, purpose):
                    response = self._send(texts, purpose)
            except Exception as exc:
                time.sleep(self._pause_or_raise(exc, purpose, attempt, started))
                continue
            return self._vectors(response, texts, purpose)

    async def _acall(self, texts: list[str]) -> list[list[float]]:
        """`_call` for queries on asyncio; the backoff waits without blocking the loop."""
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                with accounting.timed(self.name, QUERIES):
                    response = await self._asend(texts, QUERIES)
            except Exception as exc:
                await asyncio.sleep(self._pause_or_raise(exc, QUERIES, attempt, started))
                continue
            return self._vectors(response, texts, QUERIES)

    def _pause_or_raise(self, exc: Exception, purpose: str, attempt: int, started: float) -> float:
        """The backoff before the next attempt; raises when there is none."""
        refusal = self._refusal(exc)
        if refusal is None:
            raise exc
        return retry_delay(
            refusal, exc, Attempt(purpose, attempt, started), self.settings, _GIVE_UP
        )
