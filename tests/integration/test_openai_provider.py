"""The `openai` providers through the real `openai` client against the fake
OpenAI-compatible endpoint: what a request holds (the task's JSON schema as its
response format, the bound, the key from the environment or a file), the other
response formats, the embeddings, the workers' probes, and what the API answers
when the model's answers stay invalid or its endpoint is down."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from pydantic import SecretStr

from services.api.app import create_app
from shared.config import ConfigError, load_settings
from shared.embeddings import make_embedder
from shared.embeddings.base import EmbeddingError, EmbeddingRateLimited
from shared.llm import DialogueTurn, ExtractionInput, make_llm
from shared.llm.accounting import worker
from shared.llm.extraction_prompts import (
    extraction_instruction,
    extraction_prompt,
    extraction_schema,
)
from shared.llm.openai_compatible import OpenAILLM
from shared.probes import worker_probes
from tests.fake_gemini_model import offline_chat
from tests.fake_openai import FakeOpenAI, Reply, error_reply, json_reply

INP = ExtractionInput.single(
    "sess_2", "", "", datetime(2026, 2, 1, tzinfo=UTC), "My editor is vim.", "Noted.", "turn-1"
)


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        server.defaults["chat"] = offline_chat
        yield server


def _settings(fake, base=None, **updates):
    values = {
        "llm_provider": "openai",
        "openai_base_url": fake.url,
        "openai_api_key": SecretStr("test-key"),
        "openai_model": "qwen2.5:7b",
        "llm_retry_initial_seconds": 0.01,
        "llm_retry_seconds": 0.2,
        "llm_timeout_seconds": 2.0,
    }
    if base is not None:
        return base.model_copy(update=values | updates)
    return load_settings(**(values | updates))


def test_a_task_asks_with_its_schema_its_bound_and_the_key(fake):
    completion = make_llm(_settings(fake)).extract(INP)
    assert [f.candidate.text for f in completion.value] == ["User's editor is vim."]
    (call,) = fake.calls("chat")
    body = call.body
    assert body["model"] == "qwen2.5:7b"
    assert body["messages"] == [
        {"role": "system", "content": extraction_instruction(INP)},
        {"role": "user", "content": extraction_prompt(INP)},
    ]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "extract", "schema": extraction_schema(INP)},
    }
    assert (body["max_completion_tokens"], body["temperature"]) == (4096, 0.2)
    assert call.authorization == "Bearer test-key"
    # The usage the endpoint reported is the task's.
    assert completion.usage.input_tokens == call.input_tokens()


@pytest.mark.parametrize("response_format", ["json_object", "none"])
def test_servers_without_schemas_get_json_mode_or_the_prompt_alone(fake, response_format):
    llm = make_llm(_settings(fake, openai_response_format=response_format))
    assert [f.candidate.text for f in llm.extract(INP).value] == ["User's editor is vim."]
    (call,) = fake.calls("chat")
    expected = {"type": "json_object"} if response_format == "json_object" else None
    assert call.body.get("response_format") == expected


def test_the_key_comes_from_a_file_when_the_environment_has_none(fake, tmp_path):
    key_file = tmp_path / "openai-key"
    key_file.write_text("file-key\n")
    settings = _settings(fake, openai_api_key=None, openai_api_key_file=key_file)
    make_llm(settings).extract(INP)
    assert fake.calls("chat")[0].authorization == "Bearer file-key"
    with pytest.raises(ConfigError, match="AM_OPENAI_API_KEY_FILE: .* is not a readable file"):
        load_settings(openai_api_key_file=tmp_path / "missing")


def test_every_task_is_answered_through_the_endpoint(fake):
    llm = OpenAILLM(_settings(fake))
    assert llm.decompose("What is my editor?", "", "").value == ["What is my editor?"]
    turns = [DialogueTurn("t", datetime(2026, 2, 1, tzinfo=UTC), "Hi, my editor is vim.", "Ok.")]
    assert llm.summarize("", turns, 100).value == "User asked: Hi, my editor is vim."
    assert [c.body["response_format"]["json_schema"]["name"] for c in fake.calls("chat")] == [
        "decompose",
        "summarize",
    ]


def _calls(task, result):
    labels = {"app": "", "worker": worker(), "purpose": task, "result": result}
    return REGISTRY.get_sample_value("agent_memory_llm_calls_total", labels) or 0.0


def test_embeddings_are_batched_asked_for_the_dimension_and_retried(fake):
    settings = _settings(
        fake,
        embedding_provider="openai",
        openai_embedding_model="text-embedding-3-small",
        embedding_batch_size=2,
        embedding_dim=64,
        query_cache_seconds=0,
        llm_retry_seconds=5.0,
    )
    embedder = make_embedder(settings)
    fake.script("embeddings", error_reply(429, retry_after=0.2))
    before = _calls("embed_documents", "rate_limited")
    vectors = embedder.embed(["one", "", "two", "three"])
    assert [len(v) for v in vectors] == [64] * 4
    assert vectors[1] == [1.0] + [0.0] * 63  # a blank text is never sent
    calls = fake.calls("embeddings")
    assert [c.embedded_texts() for c in calls] == [["one", "two"], ["one", "two"], ["three"]]
    assert {c.body["dimensions"] for c in calls} == {64}
    assert _calls("embed_documents", "rate_limited") - before == 1
    embedder.close()


def test_embeddings_of_another_dimension_are_refused_naming_both(fake):
    settings = _settings(
        fake, embedding_provider="openai", openai_embedding_model="nomic-embed-text"
    )
    embedder = make_embedder(settings)  # AM_EMBEDDING_DIM 768, not asked of this model
    short = {"data": [{"index": 0, "embedding": [0.5] * 384}], "usage": None}
    fake.defaults["embeddings"] = lambda request: Reply(body=short)
    with pytest.raises(EmbeddingError, match="dimension 768 .*received dimension 384 from model"):
        embedder.embed_queries(["hello"])
    assert "dimensions" not in fake.calls("embeddings")[0].body
    fake.defaults["embeddings"] = lambda request: error_reply(429)
    with pytest.raises(EmbeddingRateLimited):
        embedder.embed_queries(["hello again"])


def test_the_workers_probe_the_model_and_the_embedding_endpoint(fake):
    local = _settings(
        fake, embedding_provider="openai", openai_embedding_model="text-embedding-3-small"
    )
    probes = worker_probes(
        local,
        pool=None,
        valkey_client=None,
        llm=True,
        embeddings=True,
        subscriber=None,
        subscription_paths=[],
    )
    probes["llm"].check()
    probes["embeddings"].check()
    assert fake.calls("chat")[0].body["messages"] == [{"role": "user", "content": "ping"}]
    fake.script("chat", error_reply(503))
    with pytest.raises(Exception, match="503"):
        probes["llm"].check()


def test_the_api_answers_502_when_the_models_answers_stay_invalid_and_503_when_it_is_down(
    settings, topology, fake, ids
):
    local = _settings(fake, settings, default_app=ids["app"])
    body = {
        "user_id": ids["user_id"],
        "text": "Prefers Neovim.",
        "kind": "preference",
        "scope": "global",
    }
    invented = {
        "decisions": [{"candidate": "c7", "action": "CREATED", "target": None, "text": "x"}]
    }
    with TestClient(create_app(local), raise_server_exceptions=False) as client:
        fake.defaults["chat"] = lambda request: json_reply(invented)
        answer = client.post("/v1/memories", json=body)
        assert answer.status_code == 502, answer.text
        error = answer.json()["error"]
        assert error["code"] == "model_answer_invalid"
        assert error["message"].startswith(
            "the model gave no usable answer: consolidate: 3 invalid answers from the model, "
            "the last unknown_id: decisions[0]: 'candidate' is 'c7', not one of c1"
        )
        fake.defaults["chat"] = lambda request: error_reply(503)
        answer = client.post("/v1/memories", json=body)
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "dependency_unavailable"
        listed = client.get("/v1/memories", params={"user_id": ids["user_id"]})
        assert listed.json()["memories"] == []
