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

from typing import Any

import openai

from shared.config import Settings
from shared.embeddings.base import checked
from shared.embeddings.remote import RemoteEmbedder
from shared.llm import accounting
from shared.llm.openai_compatible import api_key, make_client, openai_refusal
from shared.llm.retrying import Refusal
from shared.tokens import estimate_tokens

_SHORTENS = ("text-embedding-3",)  # models that take `dimensions`


def _options(model: str, dim: int) -> dict[str, Any]:
    return {"dimensions": dim} if model.startswith(_SHORTENS) else {}


class OpenAIEmbedder(RemoteEmbedder):
    name = "openai"
    # Semantic, as `e5`, whose measured weight it takes (AM_SEARCH_VECTOR_WEIGHT sets
    # another).
    vector_weight = 6.0

    def __init__(self, settings: Settings, client: openai.OpenAI | None = None) -> None:
        super().__init__(settings, settings.openai_embedding_model)
        self.client = client or make_client(settings)
        self._aclient: openai.AsyncOpenAI | None = None  # made on the loop that uses it

    def close(self) -> None:
        self.client.close()

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.close()

    def _send(self, texts: list[str], purpose: str) -> Any:
        return self.client.embeddings.create(
            model=self.model, input=texts, **_options(self.model, self.dim)
        )

    async def _asend(self, texts: list[str], purpose: str) -> Any:
        if self._aclient is None:
            self._aclient = openai.AsyncOpenAI(
                base_url=self.settings.openai_base_url,
                api_key=api_key(self.settings),
                timeout=self.settings.llm_timeout_seconds,
                max_retries=0,
            )
        return await self._aclient.embeddings.create(
            model=self.model, input=texts, **_options(self.model, self.dim)
        )

    def _refusal(self, exc: Exception) -> Refusal | None:
        return openai_refusal(exc)

    def _vectors(self, response: Any, texts: list[str], purpose: str) -> list[list[float]]:
        usage = getattr(response, "usage", None)
        tokens = getattr(usage, "prompt_tokens", 0) or sum(estimate_tokens(t) for t in texts)
        accounting.count_tokens(purpose, tokens, 0)
        rows = [item.embedding for item in sorted(response.data, key=lambda item: item.index)]
        return checked(rows, len(texts), self.dim, purpose, self.model)


def check_embedding(client: openai.OpenAI, model: str, dim: int) -> None:
    """The workers' probe: does the model embed one short text?"""
    client.embeddings.create(model=model, input=["ping"], **_options(model, dim))
