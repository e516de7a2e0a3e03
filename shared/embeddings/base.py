"""What every embedding provider offers.

Documents (memories, episodes) and search queries are embedded by separate
methods: a provider may embed them differently (Gemini's task types), and only
queries go through the query cache. Every vector is unit length, so cosine
similarity is a dot product and pgvector's cosine distance is never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar

from shared.errors import DependencyError

T = TypeVar("T")


class EmbeddingError(Exception):
    """No usable embedding: retries ran out, the request was refused, or the reply
    was unusable (such as a vector of the wrong dimension). Transient for the
    message that caused it (nack, then dead-letter after attempts)."""


class EmbeddingUnavailable(EmbeddingError, DependencyError):
    """The embedding endpoint did not answer, kept failing or rate-limiting, or
    refused our credentials: not the event's fault (see `LLMUnavailable`)."""

    def __init__(self, message: str) -> None:
        DependencyError.__init__(self, "embeddings", message)


class EmbeddingRateLimited(EmbeddingUnavailable):
    """The embedding endpoint kept refusing for quota until the retries ran out
    (see `LLMRateLimited`)."""


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector of `dim` floats per document text, in order."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per search query, in order, in as few calls as the
        provider's batch size allows."""
        ...

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """`embed_queries` for asyncio code: never blocks the event loop on I/O."""
        ...


def no_text_vector(dim: int) -> list[float]:
    """The embedding of a text with nothing to embed (empty, or no words): the first
    basis vector. A fixed unit vector rather than zeros, whose cosine is undefined;
    all such texts are alike, and unlike others only by chance."""
    vector = [0.0] * dim
    vector[0] = 1.0
    return vector


def unit_vector(values: Sequence[float]) -> list[float] | None:
    """`values` scaled to length 1, or None when they are all zero (or not finite)."""
    norm = math.hypot(*values)
    if norm == 0.0 or not math.isfinite(norm):
        return None
    scale = 1.0 / norm
    return [v * scale for v in values]


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """`items` in consecutive slices of at most `size`."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def plan(texts: Sequence[str], dim: int) -> tuple[list[list[float] | None], list[tuple[int, str]]]:
    """A slot per text (filled already for blank ones, which are never sent: APIs
    refuse them or drop them from a batch) and the texts to send, with their slots."""
    vectors: list[list[float] | None] = [None] * len(texts)
    pending: list[tuple[int, str]] = []
    for index, text in enumerate(texts):
        if text.strip():
            pending.append((index, text))
        else:
            vectors[index] = no_text_vector(dim)
    return vectors, pending


def checked(
    rows: Sequence[Sequence[float]], sent: int, dim: int, task: str, model: str
) -> list[list[float]]:
    """A reply's vectors, each scaled to unit length, once they are what was asked
    for: one per text sent, each of `dim` values, none zero. Counts the request in
    the model metrics; a reply that is not raises EmbeddingError (not retried: the
    vectors are deterministic)."""
    from shared.llm import accounting

    problem = None
    vectors = []
    if len(rows) != sent:
        problem = f"{task}: {sent} texts sent, {len(rows)} embeddings received"
    for position, values in enumerate(rows if problem is None else ()):
        if len(values) != dim:
            problem = (
                f"{task}: expected embeddings of dimension {dim} (AM_EMBEDDING_DIM), "
                f"received dimension {len(values)} from model {model}"
            )
            break
        vector = unit_vector(values)
        if vector is None:
            problem = f"{task}: a zero vector for text {position} of the batch"
            break
        vectors.append(vector)
    if problem is not None:
        accounting.count_call(task, accounting.FAILED)
        raise EmbeddingError(problem)
    accounting.count_call(task, accounting.OK)
    return vectors
