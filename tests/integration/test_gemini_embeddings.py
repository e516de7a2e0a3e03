"""The `gemini` embedder through the real google-genai client against the fake Gemini
endpoint: batching, task types, retries, refusals, dimension checks, the query cache
and the asyncio path, with an API key and on Vertex AI."""

import asyncio
import math

import pytest
from google import genai
from google.genai import types
from google.oauth2.credentials import Credentials
from prometheus_client import REGISTRY
from pydantic import SecretStr

from shared.config import load_settings
from shared.embeddings import EmbeddingError, make_embedder, no_text_vector
from shared.embeddings.base import EmbeddingRateLimited, EmbeddingUnavailable
from shared.embeddings.gemini import GeminiEmbedder
from shared.llm.accounting import worker
from shared.tokens import estimate_tokens
from tests.fake_gemini import Reply, embeddings_reply, error_reply, fake_embedding
from tests.support import wait_for

DIM = 64
BATCH = "batchEmbedContents"


@pytest.fixture
def gemini_settings(fake):
    return load_settings(
        embedding_provider="gemini",
        embedding_dim=DIM,
        embedding_batch_size=100,
        gemini_api_key=SecretStr("test-key"),
        gemini_base_url=fake.url,
        llm_retry_initial_seconds=0.01,
        llm_retry_seconds=5.0,
        llm_timeout_seconds=1.0,
    )


def _expected(text):
    """What the embedder makes of the fake's vector: the same, at unit length."""
    values = fake_embedding(text, DIM)
    norm = math.hypot(*values)
    return [v / norm for v in values]


def _close(vectors, expected):
    """Equal but for rounding (the embedder scales what it receives to unit length)."""
    assert len(vectors) == len(expected)
    for vector, want in zip(vectors, expected, strict=True):
        assert vector == pytest.approx(want, rel=1e-12, abs=1e-12)
    return True


def _calls(task, result):
    """This process's embedding calls with no app (none is set here)."""
    labels = {"app": "", "worker": worker(), "purpose": task, "result": result}
    return REGISTRY.get_sample_value("agent_memory_llm_calls_total", labels) or 0.0


def _input_tokens(task):
    labels = {"app": "", "worker": worker(), "purpose": task, "direction": "input"}
    return REGISTRY.get_sample_value("agent_memory_llm_tokens_total", labels) or 0.0


def test_documents_go_in_batches_of_the_configured_size_and_come_back_in_order(
    gemini_settings, fake
):
    embedder = GeminiEmbedder(gemini_settings)
    texts = [f"memory number {n}: the user likes option {n % 7}" for n in range(250)]
    tokens_before = _input_tokens("embed_documents")
    ok_before = _calls("embed_documents", "ok")
    vectors = embedder.embed(texts)
    assert _close(vectors, [_expected(text) for text in texts])
    calls = fake.calls(BATCH)
    assert [len(call.embedded_texts()) for call in calls] == [100, 100, 50]
    assert [t for call in calls for t in call.embedded_texts()] == texts
    assert {t for call in calls for t in call.task_types()} == {"RETRIEVAL_DOCUMENT"}
    item = calls[0].body["requests"][0]
    assert item["outputDimensionality"] == DIM
    assert item["model"] == "models/text-embedding-005"
    assert {call.api_key for call in calls} == {"test-key"}
    assert _calls("embed_documents", "ok") - ok_before == 3
    # The Gemini API reports no tokens for these models: the estimate counts.
    expected_tokens = sum(estimate_tokens(text) for text in texts)
    assert _input_tokens("embed_documents") - tokens_before == expected_tokens


def test_queries_go_in_one_call_with_the_query_task_type_and_blank_texts_are_not_sent(
    gemini_settings, fake
):
    embedder = GeminiEmbedder(gemini_settings)
    vectors = embedder.embed_queries(["where do we deploy?", "  ", "which UI theme?"])
    expected = [_expected("where do we deploy?"), no_text_vector(DIM), _expected("which UI theme?")]
    assert _close(vectors, expected)
    (call,) = fake.calls(BATCH)
    assert call.embedded_texts() == ["where do we deploy?", "which UI theme?"]
    assert call.task_types() == ["RETRIEVAL_QUERY"] * 2
    assert embedder.embed(["", ""]) == [no_text_vector(DIM)] * 2
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("failure", "quota"),
    [
        (error_reply(429), 1),
        (error_reply(503), 0),
        (Reply(body={"embeddings": []}, delay=2.0), 0),
    ],
    ids=["429", "503", "timeout"],
)
def test_a_retryable_failure_is_retried_and_then_succeeds(gemini_settings, fake, failure, quota):
    fake.script(BATCH, failure)
    results = ("ok", "retried", "rate_limited", "failed")
    before = {result: _calls("embed_documents", result) for result in results}
    assert _close(GeminiEmbedder(gemini_settings).embed(["alpha"]), [_expected("alpha")])
    assert [call.embedded_texts() for call in fake.calls(BATCH)] == [["alpha"], ["alpha"]]
    counted = {result: _calls("embed_documents", result) - before[result] for result in results}
    # The failure retried (a 429 also rate_limited), then the answer.
    assert counted == {"ok": 1, "retried": 1, "rate_limited": quota, "failed": 0}


def test_a_refused_request_fails_at_once(gemini_settings, fake):
    fake.script(BATCH, error_reply(400, "bad request"))
    failed_before = _calls("embed_documents", "failed")
    refused = "embed_documents: HTTP 400 INVALID_ARGUMENT"
    with pytest.raises(EmbeddingError, match=refused) as raised:
        GeminiEmbedder(gemini_settings).embed(["alpha"])
    assert not isinstance(raised.value, EmbeddingUnavailable)  # the request's fault
    assert len(fake.calls(BATCH)) == 1
    assert _calls("embed_documents", "failed") - failed_before == 1


@pytest.mark.parametrize("status", [503, 429])
def test_retries_stop_at_the_deadline(gemini_settings, fake, status):
    settings = gemini_settings.model_copy(update={"llm_retry_seconds": 0.3})
    fake.defaults[BATCH] = lambda request: error_reply(status, "overloaded")
    with pytest.raises(
        EmbeddingUnavailable, match=rf"no embeddings after \d+ attempts.*HTTP {status}"
    ) as raised:
        GeminiEmbedder(settings).embed_queries(["alpha"])
    assert len(fake.calls(BATCH)) >= 2
    # A quota that outlasts the retries is held by the worker without setbacks.
    assert isinstance(raised.value, EmbeddingRateLimited) is (status == 429)


def test_a_reply_of_the_wrong_dimension_fails_at_once_naming_both_dimensions(gemini_settings, fake):
    fake.script(BATCH, embeddings_reply([0.5] * 32))
    with pytest.raises(EmbeddingError) as error:
        GeminiEmbedder(gemini_settings).embed(["alpha"])
    assert "expected embeddings of dimension 64" in str(error.value)
    assert "received dimension 32" in str(error.value)
    assert len(fake.calls(BATCH)) == 1
    # A reply that is short of vectors is no better.
    fake.script(BATCH, embeddings_reply([0.5] * DIM))
    with pytest.raises(EmbeddingError, match="2 texts sent, 1 embeddings received"):
        GeminiEmbedder(gemini_settings).embed(["alpha", "beta"])


def test_a_repeated_query_within_the_window_makes_no_request(gemini_settings, fake):
    embedder = make_embedder(gemini_settings)  # the default window: 60 s
    first = embedder.embed_queries(["what is my region?"])
    assert len(fake.calls(BATCH)) == 1
    assert embedder.embed_queries(["what is my region?"]) == first
    assert len(fake.calls(BATCH)) == 1
    # Only the miss is sent; the answer keeps the caller's order.
    both = embedder.embed_queries(["which theme?", "what is my region?"])
    assert _close(both, [_expected("which theme?"), first[0]])
    assert [call.embedded_texts() for call in fake.calls(BATCH)] == [
        ["what is my region?"],
        ["which theme?"],
    ]
    # Documents are not cached.
    embedder.embed(["what is my region?"])
    embedder.embed(["what is my region?"])
    assert len(fake.calls(BATCH)) == 4


def test_a_query_is_embedded_again_once_its_window_has_passed(gemini_settings, fake):
    embedder = make_embedder(gemini_settings.model_copy(update={"query_cache_seconds": 0.3}))
    embedder.embed_queries(["what is my region?"])

    def asked_again():
        embedder.embed_queries(["what is my region?"])
        return len(fake.calls(BATCH)) > 1

    wait_for(asked_again, 10, "a second request once the cache window passed")
    assert len(fake.calls(BATCH)) == 2  # every query before that was a hit


def test_async_queries_are_batched_retried_and_cached(gemini_settings, fake):
    embedder = make_embedder(gemini_settings.model_copy(update={"embedding_batch_size": 2}))
    texts = ["alpha", "beta", "gamma"]
    fake.script(BATCH, error_reply(429))

    async def scenario():
        try:
            first = await embedder.aembed_queries(texts)
            again = await embedder.aembed_queries(list(reversed(texts)))
        finally:
            await embedder.aclose()
        return first, again

    first, again = asyncio.run(scenario())
    assert _close(first, [_expected(text) for text in texts])
    assert again == list(reversed(first))
    calls = fake.calls(BATCH)
    # The 429, its retry, then the rest of the batch; the second round was all hits.
    assert [call.embedded_texts() for call in calls] == [["alpha", "beta"]] * 2 + [["gamma"]]
    assert {t for call in calls for t in call.task_types()} == {"RETRIEVAL_QUERY"}


def test_on_vertex_ai_text_embedding_models_use_predict(gemini_settings, fake):
    client = genai.Client(
        vertexai=True,
        project="test-project",
        location="us-central1",
        credentials=Credentials(token="test-token"),
        http_options=types.HttpOptions(base_url=fake.url),
    )
    embedder = GeminiEmbedder(gemini_settings, client=client)
    tokens_before = _input_tokens("embed_queries")
    vectors = embedder.embed_queries(["alpha", "beta gamma"])
    assert _close(vectors, [_expected("alpha"), _expected("beta gamma")])
    (call,) = fake.requests
    assert (call.method, call.model) == ("predict", "text-embedding-005")
    assert call.embedded_texts() == ["alpha", "beta gamma"]
    assert call.task_types() == ["RETRIEVAL_QUERY"] * 2
    assert call.body["parameters"]["outputDimensionality"] == DIM
    assert call.authorization == "Bearer test-token"
    # Vertex AI reports each text's tokens; those are counted.
    reported = estimate_tokens("alpha") + estimate_tokens("beta gamma")
    assert _input_tokens("embed_queries") - tokens_before == reported
