"""Embedding providers, chosen by `AM_EMBEDDING_PROVIDER`, with the query cache."""

from __future__ import annotations

from shared.config import Settings
from shared.embeddings.base import Embedder, EmbeddingError, no_text_vector
from shared.embeddings.cache import CachedEmbedder, QueryCache
from shared.embeddings.hashing import HashEmbedder

__all__ = [
    "CachedEmbedder",
    "Embedder",
    "EmbeddingError",
    "HashEmbedder",
    "QueryCache",
    "make_embedder",
    "no_text_vector",
]


def make_embedder(settings: Settings) -> Embedder:
    """The configured provider, its query embeddings cached unless
    `AM_QUERY_CACHE_SECONDS` is 0."""
    inner: Embedder
    if settings.embedding_provider == "gemini":
        from shared.embeddings.gemini import GeminiEmbedder  # google-genai loads only when chosen

        inner = GeminiEmbedder(settings)
        model = settings.embedding_model
    else:
        inner = HashEmbedder(settings.embedding_dim)
        model = HashEmbedder.model
    if settings.query_cache_seconds == 0:
        return inner
    cache = QueryCache(settings.query_cache_seconds, settings.query_cache_size)
    return CachedEmbedder(inner, model, cache)
