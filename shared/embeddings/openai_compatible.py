"""`openai`: embeddings from the OpenAI-compatible endpoint at `AM_OPENAI_BASE_URL`
(`AM_OPENAI_EMBEDDING_MODEL`), through the `openai` package with its retries off,
retried as a model's requests are (`shared.llm.retrying`; retries that end on 429
raise `EmbeddingRateLimited`).

Texts go in requests of at most `AM_EMBEDDING_BATCH_SIZE`; blank texts are not sent
(`no_text_vector`). OpenAI's `text-embedding-3` models are asked for
`AM_EMBEDDING_DIM` dimensions (they can shorten their vectors); any other model
must give that many itself, else the reply is refused naming both dimensions. The
endpoint embeds documents and queries alike. Each request is counted with its
tokens as a model call (purposes `embed_documents`, `embed_queries`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, cast

import openai

from shared.config import Settings
from shared.embeddings.base import (
    EmbeddingError,
    EmbeddingRateLimited,
    EmbeddingUnavailable,
    batches,
    checked,
    plan,
)
from shared.llm import accounting
from shared.llm.openai_compatible import api_key, make_client, openai_refusal
from shared.llm.retrying import Attempt, GiveUp, retry_delay
from shared.tokens import estimate_tokens

_GIVE_UP = GiveUp(EmbeddingError, EmbeddingUnavailable, EmbeddingRateLimited, "no embeddings")
_SHORTENS = ("text-embedding-3",)  # models that take `dimensions`


def _options(model: str, dim: int) -> dict[str, Any]:
    return {"dimensions": dim} if model.startswith(_SHORTENS) else {}


class OpenAIEmbedder:
    name = "openai"
    # Semantic, as `e5`, whose measured weight it takes (AM_SEARCH_VECTOR_WEIGHT sets
    # another).
    vector_weight = 6.0

    def __init__(self, settings: Settings, client: openai.OpenAI | None = None) -> None:
        self.settings = settings
        self.model = settings.openai_embedding_model
        self.dim = settings.embedding_dim
        self.batch_size = settings.embedding_batch_size
        self.client = client or make_client(settings)
        self._aclient: openai.AsyncOpenAI | None = None  # made on the loop that uses it

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed_all(texts, "embed_documents")

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed_all(texts, "embed_queries")

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        vectors, pending = plan(texts, self.dim)
        for batch in batches(pending, self.batch_size):
            replies = await self._acall([text for _, text in batch])
            for (index, _), vector in zip(batch, replies, strict=True):
                vectors[index] = vector
        return cast(list[list[float]], vectors)  # every slot is filled now

    def close(self) -> None:
        self.client.close()

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.close()

    def _embed_all(self, texts: Sequence[str], task: str) -> list[list[float]]:
        vectors, pending = plan(texts, self.dim)
        for batch in batches(pending, self.batch_size):
            replies = self._call([text for _, text in batch], task)
            for (index, _), vector in zip(batch, replies, strict=True):
                vectors[index] = vector
        return cast(list[list[float]], vectors)  # every slot is filled now

    def _call(self, texts: list[str], task: str) -> list[list[float]]:
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                with accounting.timed(self.name, task):
                    response = self.client.embeddings.create(
                        model=self.model, input=texts, **_options(self.model, self.dim)
                    )
            except Exception as exc:
                time.sleep(self._pause_or_raise(exc, task, attempt, started))
                continue
            return self._vectors(response, texts, task)

    async def _acall(self, texts: list[str]) -> list[list[float]]:
        task = "embed_queries"
        if self._aclient is None:
            self._aclient = openai.AsyncOpenAI(
                base_url=self.settings.openai_base_url,
                api_key=api_key(self.settings),
                timeout=self.settings.llm_timeout_seconds,
                max_retries=0,
            )
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                with accounting.timed(self.name, task):
                    response = await self._aclient.embeddings.create(
                        model=self.model, input=texts, **_options(self.model, self.dim)
                    )
            except Exception as exc:
                await asyncio.sleep(self._pause_or_raise(exc, task, attempt, started))
                continue
            return self._vectors(response, texts, task)

    def _pause_or_raise(self, exc: Exception, task: str, attempt: int, started: float) -> float:
        refusal = openai_refusal(exc)
        if refusal is None:
            raise exc
        return retry_delay(refusal, exc, Attempt(task, attempt, started), self.settings, _GIVE_UP)

    def _vectors(self, response: Any, texts: list[str], task: str) -> list[list[float]]:
        usage = getattr(response, "usage", None)
        tokens = getattr(usage, "prompt_tokens", 0) or sum(estimate_tokens(t) for t in texts)
        accounting.count_tokens(task, tokens, 0)
        rows = [item.embedding for item in sorted(response.data, key=lambda item: item.index)]
        return checked(rows, len(texts), self.dim, task, self.model)


def check_embedding(client: openai.OpenAI, model: str, dim: int) -> None:
    """The workers' probe: does the model embed one short text?"""
    client.embeddings.create(model=model, input=["ping"], **_options(model, dim))
