"""`gemini`: embeddings through google-genai (`AM_EMBEDDING_MODEL`, text-embedding-005
by default), with the LLM's credentials, endpoint and retry policy.

Texts go in requests of at most `AM_EMBEDDING_BATCH_SIZE`, documents with the
task type RETRIEVAL_DOCUMENT and queries with RETRIEVAL_QUERY, each asking for
`AM_EMBEDDING_DIM` dimensions. A request is retried as a model's is
(`shared.llm.retrying`: 408, 429, 5xx, timeouts and connection errors, full-jitter
backoff or the wait the endpoint asks for, no attempt after `AM_LLM_RETRY_SECONDS`
from the first; retries that end on 429 raise `EmbeddingRateLimited`); other 4xx
fail at once. Each request is
counted, with its tokens, as a model call (`shared.llm.accounting`; purposes
`embed_documents` and `embed_queries`); the app's call limit does not apply.
A reply is checked, not retried: the vectors are deterministic, so a reply with
the wrong number of vectors, a vector of the wrong dimension or a zero vector is
an `EmbeddingError` at once. Vectors are scaled to unit length.

A text that is empty or only whitespace is not sent (the API refuses it, and
Vertex AI would silently drop it from the batch): it embeds as `no_text_vector`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import cast

from google import genai
from google.genai import types

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
from shared.llm.gemini import gemini_refusal, make_client
from shared.llm.retrying import Attempt, GiveUp, retry_delay
from shared.tokens import estimate_tokens

DOCUMENT_TASK = "RETRIEVAL_DOCUMENT"
QUERY_TASK = "RETRIEVAL_QUERY"
# The `purpose` label of the model metrics (calls and tokens) for each kind of request.
_METRIC_TASK = {DOCUMENT_TASK: "embed_documents", QUERY_TASK: "embed_queries"}
_GIVE_UP = GiveUp(EmbeddingError, EmbeddingUnavailable, EmbeddingRateLimited, "no embeddings")


class GeminiEmbedder:
    name = "gemini"
    # Semantic, as `e5`, whose measured weight it takes: the recall benchmark runs offline
    # and cannot measure it (AM_SEARCH_VECTOR_WEIGHT sets another).
    vector_weight = 6.0

    def __init__(self, settings: Settings, client: genai.Client | None = None) -> None:
        self.settings = settings
        self.model = settings.embedding_model
        self.dim = settings.embedding_dim
        self.batch_size = settings.embedding_batch_size
        self.client = client or make_client(settings)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed_all(texts, DOCUMENT_TASK)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed_all(texts, QUERY_TASK)

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        vectors, pending = plan(texts, self.dim)
        for batch in batches(pending, self.batch_size):
            replies = await self._acall([text for _, text in batch], QUERY_TASK)
            for (index, _), vector in zip(batch, replies, strict=True):
                vectors[index] = vector
        return cast(list[list[float]], vectors)  # every slot is filled now

    def close(self) -> None:
        """Close the client's HTTP connections (blocking ones)."""
        self.client.close()

    async def aclose(self) -> None:
        """Close the client's asyncio connections, on the loop that opened them."""
        await self.client.aio.aclose()

    def _embed_all(self, texts: Sequence[str], task_type: str) -> list[list[float]]:
        vectors, pending = plan(texts, self.dim)
        for batch in batches(pending, self.batch_size):
            replies = self._call([text for _, text in batch], task_type)
            for (index, _), vector in zip(batch, replies, strict=True):
                vectors[index] = vector
        return cast(list[list[float]], vectors)  # every slot is filled now

    def _config(self, task_type: str) -> types.EmbedContentConfig:
        return types.EmbedContentConfig(task_type=task_type, output_dimensionality=self.dim)

    def _call(self, texts: list[str], task_type: str) -> list[list[float]]:
        """One batch, retried; its vectors in order."""
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                with accounting.timed(self.name, _METRIC_TASK[task_type]):
                    # google-genai's list of parts is invariant: a list of str is one.
                    response = self.client.models.embed_content(
                        model=self.model,
                        contents=texts,  # type: ignore[arg-type]
                        config=self._config(task_type),
                    )
            except Exception as exc:
                time.sleep(self._pause_or_raise(exc, task_type, attempt, started))
                continue
            return self._vectors(response, texts, task_type)

    async def _acall(self, texts: list[str], task_type: str) -> list[list[float]]:
        """`_call` on the asyncio client; the backoff waits without blocking the loop."""
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                with accounting.timed(self.name, _METRIC_TASK[task_type]):
                    response = await self.client.aio.models.embed_content(
                        model=self.model,
                        contents=texts,  # type: ignore[arg-type]  # a list of parts, as above
                        config=self._config(task_type),
                    )
            except Exception as exc:
                await asyncio.sleep(self._pause_or_raise(exc, task_type, attempt, started))
                continue
            return self._vectors(response, texts, task_type)

    def _pause_or_raise(
        self, exc: Exception, task_type: str, attempt: int, started: float
    ) -> float:
        """The backoff before the next attempt, or EmbeddingError when there is none."""
        refusal = gemini_refusal(exc)
        if refusal is None:
            raise exc
        where = Attempt(_METRIC_TASK[task_type], attempt, started)
        return retry_delay(refusal, exc, where, self.settings, _GIVE_UP)

    def _vectors(
        self, response: types.EmbedContentResponse, texts: list[str], task_type: str
    ) -> list[list[float]]:
        task = _METRIC_TASK[task_type]
        accounting.count_tokens(task, _input_tokens(response, texts), 0)
        rows = [embedding.values or [] for embedding in response.embeddings or []]
        return checked(rows, len(texts), self.dim, task, self.model)


def _input_tokens(response: types.EmbedContentResponse, texts: list[str]) -> int:
    """The tokens the reply reports (Vertex AI: per vector; the Gemini API: usage
    metadata, for some models), else the project's estimate of the texts."""
    reported = [
        e.statistics.token_count
        for e in response.embeddings or []
        if e.statistics is not None and e.statistics.token_count is not None
    ]
    if reported:
        return int(sum(reported))
    # google-genai 2.x (what google-adk allows) has no usage_metadata on embeddings.
    usage = getattr(response, "usage_metadata", None)
    if usage is not None and usage.prompt_token_count:
        return usage.prompt_token_count
    return sum(estimate_tokens(text) for text in texts)
