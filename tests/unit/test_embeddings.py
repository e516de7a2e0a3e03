"""The `hash` embedder, the query cache and the choice of provider (no I/O but one
child Python process)."""

import asyncio
import json
import math
import os
import subprocess
import sys

import pytest
from pydantic import SecretStr

from shared.config import load_settings
from shared.embeddings import (
    CachedEmbedder,
    HashEmbedder,
    QueryCache,
    make_embedder,
    no_text_vector,
)
from shared.embeddings.hashing import tokenize
from tests.support import REPO

TEXT = "The user prefers Python 3.11 and dark mode; deploys go to us-east1."


def _cosine(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def _norm(vector):
    return math.sqrt(sum(v * v for v in vector))


def test_the_hash_vector_of_a_text_is_the_same_in_another_process_and_hash_seed():
    here = HashEmbedder(256).embed([TEXT])[0]
    code = (
        "import json, sys\n"
        "from shared.embeddings.hashing import HashEmbedder\n"
        "print(json.dumps(HashEmbedder(256).embed([sys.argv[1]])[0]))\n"
    )
    for seed in ("1", "4242"):
        child = subprocess.run(
            [sys.executable, "-c", code, TEXT],
            env={**os.environ, "PYTHONHASHSEED": seed},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert json.loads(child.stdout) == here
    # And in this process, from a fresh embedder and from the remembered features.
    assert HashEmbedder(256).embed([TEXT])[0] == here
    assert HashEmbedder(256).embed([TEXT, TEXT]) == [here, here]


def test_make_embedder_gives_unit_vectors_of_the_configured_dimension_in_order():
    embedder = make_embedder(load_settings(embedding_dim=64))
    assert (embedder.name, embedder.dim) == ("hash", 64)
    texts = ["alpha beta", "gamma", TEXT, "alpha beta"]
    vectors = embedder.embed(texts)
    assert [len(v) for v in vectors] == [64] * 4
    assert all(abs(_norm(v) - 1.0) < 1e-9 for v in vectors)
    assert vectors[0] == vectors[3] != vectors[1]
    assert embedder.embed_queries(texts) == vectors
    assert asyncio.run(embedder.aembed_queries(texts)) == vectors
    assert embedder.embed([]) == embedder.embed_queries([]) == []


@pytest.mark.parametrize("text", ["", "   \n", "?!... -- ;", "___"])
def test_a_text_with_no_words_embeds_as_the_fixed_unit_vector(text):
    (vector,) = HashEmbedder(32).embed([text])
    assert vector == no_text_vector(32)
    assert _norm(vector) == 1.0


def test_words_keep_inner_dots_and_digits_and_lose_other_punctuation():
    assert tokenize("Use Python 3.11. Region: us-east1, not e.g. EU!") == [
        "use",
        "python",
        "3.11",
        "region",
        "us",
        "east1",
        "not",
        "e.g",
        "eu",
    ]
    embedder = HashEmbedder(128)
    assert embedder.embed(["Dark MODE!"]) == embedder.embed(["dark mode"])


def test_similar_texts_are_closer_than_unrelated_ones():
    embedder = HashEmbedder(768)
    memory, related, unrelated = embedder.embed(
        ["User prefers Dark Mode UI", "dark mode preference", "region is us-east1"]
    )
    assert _cosine(memory, related) > _cosine(memory, unrelated) + 0.2
    # Spelling alone (3-grams) relates "prefers" to "preference".
    prefers, preference, region = embedder.embed(["prefers", "preference", "region"])
    assert _cosine(prefers, preference) > 0.2 > abs(_cosine(prefers, region))
    # Word order counts through pairs, but less than the words themselves.
    forward, backward = embedder.embed(["deploy the service", "service the deploy"])
    assert 0.5 < _cosine(forward, backward) < 0.99


def test_make_embedder_picks_the_provider_and_wraps_it_in_the_query_cache():
    hashed = make_embedder(load_settings(embedding_dim=16))
    assert isinstance(hashed, CachedEmbedder) and isinstance(hashed.inner, HashEmbedder)
    gemini = make_embedder(
        load_settings(
            embedding_provider="gemini",
            gemini_api_key=SecretStr("k"),
            embedding_dim=16,
            embedding_model="text-embedding-005",
        )
    )
    assert isinstance(gemini, CachedEmbedder)
    assert (gemini.name, gemini.dim, gemini.model) == ("gemini", 16, "text-embedding-005")
    assert type(gemini.inner).__name__ == "GeminiEmbedder"
    uncached = make_embedder(load_settings(embedding_dim=16, query_cache_seconds=0))
    assert isinstance(uncached, HashEmbedder)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_query_cache_entries_expire_after_the_window_and_the_least_recent_goes_first():
    clock = Clock()
    cache = QueryCache(seconds=10, size=2, clock=clock)
    cache.put("a", [1.0])
    clock.now += 9.9
    assert cache.get("a") == [1.0]  # a hit does not extend the entry
    clock.now += 0.1
    assert cache.get("a") is None and len(cache) == 0
    cache.put("a", [1.0])
    cache.put("b", [2.0])
    assert cache.get("a") == [1.0]  # now "b" is the least recently used
    cache.put("c", [3.0])
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ([1.0], None, [3.0])
    # The cache keeps its own copy.
    vector = cache.get("c")
    vector[0] = 99.0
    assert cache.get("c") == [3.0]


class CountingEmbedder:
    """A provider that records what it is asked to embed."""

    name = "counting"
    dim = 8

    def __init__(self):
        self.inner = HashEmbedder(self.dim)
        self.query_calls = []

    def embed(self, texts):
        return self.inner.embed(texts)

    def embed_queries(self, texts):
        self.query_calls.append(list(texts))
        return self.inner.embed(texts)

    async def aembed_queries(self, texts):
        return self.embed_queries(texts)


def test_cached_queries_skip_hits_and_send_the_distinct_misses_in_one_call():
    clock = Clock()
    inner = CountingEmbedder()
    embedder = CachedEmbedder(inner, "m", QueryCache(seconds=60, size=100, clock=clock))
    first = embedder.embed_queries(["a", "b", "a"])
    assert inner.query_calls == [["a", "b"]]
    assert first == inner.inner.embed(["a", "b", "a"])
    second = embedder.embed_queries(["b", "c", "a", "d"])
    assert inner.query_calls == [["a", "b"], ["c", "d"]]
    assert second == inner.inner.embed(["b", "c", "a", "d"])
    assert asyncio.run(embedder.aembed_queries(["d", "e"])) == inner.inner.embed(["d", "e"])
    assert inner.query_calls[-1] == ["e"]
    assert embedder.embed_queries(["a", "b", "c", "d", "e"]) == inner.inner.embed(
        ["a", "b", "c", "d", "e"]
    )
    assert len(inner.query_calls) == 3  # all hits
    clock.now += 60
    embedder.embed_queries(["a"])
    assert inner.query_calls[-1] == ["a"]
    # Documents are never cached.
    embedder.embed(["a"])
    assert len(inner.query_calls) == 4
