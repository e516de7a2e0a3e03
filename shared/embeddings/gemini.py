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

from typing import Any

from google import genai
from google.genai import types

from shared.config import Settings
from shared.embeddings.base import checked
from shared.embeddings.remote import DOCUMENTS, QUERIES, RemoteEmbedder
from shared.llm import accounting
from shared.llm.gemini import gemini_refusal, make_client
from shared.llm.retrying import Refusal
from shared.tokens import estimate_tokens

# Gemini's task type for each purpose: documents and queries embed differently.
_TASK_TYPE = {DOCUMENTS: "RETRIEVAL_DOCUMENT", QUERIES: "RETRIEVAL_QUERY"}


class GeminiEmbedder(RemoteEmbedder):
    name = "gemini"
    # Semantic, as `e5`, whose measured weight it takes: the recall benchmark runs offline
    # and cannot measure it (AM_SEARCH_VECTOR_WEIGHT sets another).
    vector_weight = 6.0

    def __init__(self, settings: Settings, client: genai.Client | None = None) -> None:
        super().__init__(settings, settings.embedding_model)
        self.client = client or make_client(settings)

    def close(self) -> None:
        """Close the client's HTTP connections (blocking ones)."""
        self.client.close()

    async def aclose(self) -> None:
        """Close the client's asyncio connections, on the loop that opened them."""
        await self.client.aio.aclose()

    def _config(self, purpose: str) -> types.EmbedContentConfig:
        return types.EmbedContentConfig(
            task_type=_TASK_TYPE[purpose], output_dimensionality=self.dim
        )

    def _send(self, texts: list[str], purpose: str) -> Any:
        # google-genai's list of parts is invariant: a list of str is one.
        return self.client.models.embed_content(
            model=self.model,
            contents=texts,  # type: ignore[arg-type]
            config=self._config(purpose),
        )

    async def _asend(self, texts: list[str], purpose: str) -> Any:
        return await self.client.aio.models.embed_content(
            model=self.model,
            contents=texts,  # type: ignore[arg-type]  # a list of parts, as above
            config=self._config(purpose),
        )

    def _refusal(self, exc: Exception) -> Refusal | None:
        return gemini_refusal(exc)

    def _vectors(self, response: Any, texts: list[str], purpose: str) -> list[list[float]]:
        accounting.count_tokens(purpose, _input_tokens(response, texts), 0)
        rows = [embedding.values or [] for embedding in response.embeddings or []]
        return checked(rows, len(texts), self.dim, purpose, self.model)


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
