"""The whole pipeline on the `openai` providers (LLM and embeddings) against the fake
OpenAI-compatible endpoint, with the summary, extraction and compaction workers as
processes (`agent-memory worker KIND`) and the API: a session's summary fold,
extraction with consolidation (a changed preference updates its memory), a
generate request, and a compaction, every model call through the `openai`
client."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.compaction_worker.handlers import SUMMARY_ENTITY
from services.compaction_worker.requests import compaction_request
from tests.fake_gemini_model import offline_chat
from tests.fake_openai import json_reply
from tests.model_endpoints import model_endpoint
from tests.support import WorkerProcess, wait_for
from tests.window_helpers import query

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
COMPACTED = "The user chose Light Mode UI over Dark Mode UI in January 2026."
TASKS = {
    "summarize": "summary",
    "extract": "memories",
    "consolidate": "decisions",
    "compact": "additions",
}


@pytest.fixture
def endpoint():
    with model_endpoint("openai") as found:

        def answer(request):
            if 'Answer with JSON: {"additions"' in request.prompt_text():
                return json_reply({"additions": COMPACTED})
            return offline_chat(request)

        found.fake.defaults["chat"] = answer
        yield found


@pytest.fixture
def fake(endpoint):
    return endpoint.fake


@pytest.fixture
def pipeline(settings, topology, ids, tmp_path, endpoint):
    local = endpoint.settings(
        settings,
        default_app=ids["app"],
        embedding_provider="openai",
        openai_embedding_model="text-embedding-3-small",
        summary_trigger_turns=2,
        summary_kept_turns=1,
        extraction_window_turns=2,
        llm_retry_seconds=5.0,
    )
    workers = [
        WorkerProcess(local, kind, tmp_path / f"{kind}.log", **endpoint.env())
        for kind in ("summary", "extraction", "compaction")
    ]
    try:
        for worker in workers:
            wait_for(
                lambda w=worker: "worker started" in w.log_text(), 60, f"the {worker.kind} worker"
            )
        with TestClient(create_app(local), raise_server_exceptions=False) as client:
            yield local, client
    finally:
        for worker in workers:
            worker.stop()


def _record(client, ids, session_id, n, text, prev=None):
    body = {
        "user_id": ids["user_id"],
        "turn_id": f"{session_id}-{n}",
        "created_at": (T0 + timedelta(minutes=n)).isoformat(),
        "user": text,
        "assistant": "Understood.",
    }
    if prev:
        body["prev_session_id"] = prev
    answer = client.post(f"/v1/sessions/{session_id}/turns", json=body)
    assert answer.status_code == 202, answer.text


def _live(pool, ids):
    return query(
        pool,
        "SELECT text FROM memories WHERE app = %s AND user_id = %s AND valid_to IS NULL "
        "AND entity_name <> %s ORDER BY text",
        ids["app"],
        ids["user_id"],
        SUMMARY_ENTITY,
    )


def test_the_whole_pipeline_runs_on_an_openai_compatible_endpoint(
    pipeline, pool, ids, fake, publisher
):
    settings, client = pipeline
    first = f"{ids['session_id']}-1"
    texts = ["I prefer Dark Mode UI.", "My editor is vim.", "Thanks, that helps with the setup."]
    for n, text in enumerate(texts, start=1):
        _record(client, ids, first, n, text)

    # The summary worker folded the first turns into the session's summary.
    def summary():
        answer = client.get(f"/v1/sessions/{first}", params={"user_id": ids["user_id"]})
        return answer.status_code == 200 and answer.json()["summary"]["text"]

    assert wait_for(summary, 60, "the summary fold") == "User asked: I prefer Dark Mode UI."

    # The extraction worker extracted the window and consolidated it.
    assert (
        client.post(f"/v1/sessions/{first}:flush", json={"user_id": ids["user_id"]}).status_code
        == 202
    )
    expected = [("User prefers Dark Mode UI.",), ("User's editor is vim.",)]
    wait_for(lambda: _live(pool, ids) == expected, 60, "the first session's memories")

    # A changed preference in the next session updates its memory.
    second = f"{ids['session_id']}-2"
    _record(client, ids, second, 10, "I've switched to Light Mode UI.", prev=first)
    assert (
        client.post(f"/v1/sessions/{second}:flush", json={"user_id": ids["user_id"]}).status_code
        == 202
    )
    updated = [("User prefers Light Mode UI.",), ("User's editor is vim.",)]
    wait_for(lambda: _live(pool, ids) == updated, 60, "the updated preference")
    actions = query(
        pool,
        "SELECT r.action FROM memory_revisions r JOIN memories m ON m.id = r.memory_id "
        "WHERE m.app = %s AND m.user_id = %s AND m.text = %s ORDER BY r.id",
        ids["app"],
        ids["user_id"],
        "User prefers Light Mode UI.",
    )
    assert [a for (a,) in actions] == ["CREATED", "UPDATED"]

    # A generate request, extracted and consolidated by the extraction worker.
    event = {"role": "user", "text": "Remember that the staging cluster is called orchid."}
    answer = client.post(
        "/v1/memories:generate",
        json={"user_id": ids["user_id"], "events": [event], "wait": True},
    )
    assert answer.status_code in (200, 202), answer.text
    name = answer.json()["name"]

    def done():
        found = client.get(f"/v1/operations/{name}", params={"user_id": ids["user_id"]}).json()
        return found["done"] and found

    operation = wait_for(done, 60, "the generate operation")
    assert operation["error"] is None
    assert [m["action"] for m in operation["generated_memories"]] == ["CREATED"]
    assert ("The staging cluster is called orchid.",) in _live(pool, ids)

    # The compaction worker folded the old episodes into the long-term summary.
    publisher.publish(compaction_request(ids["app"], ids["user_id"], "", 30, 50)).result(timeout=10)

    def compacted():
        rows = query(
            pool,
            "SELECT text FROM memories WHERE app = %s AND user_id = %s AND entity_name = %s "
            "AND valid_to IS NULL",
            ids["app"],
            ids["user_id"],
            SUMMARY_ENTITY,
        )
        return rows and rows[0][0]

    assert wait_for(compacted, 60, "the compacted summary") == COMPACTED
    assert query(
        pool,
        "SELECT count(*) FROM episodes WHERE app = %s AND user_id = %s",
        ids["app"],
        ids["user_id"],
    ) == [(0,)]

    # Every task went to the endpoint through the openai client, with its schema.
    names = {
        c.body["response_format"]["json_schema"]["name"]
        for c in fake.calls("chat")
        if "response_format" in c.body
    }
    assert names >= set(TASKS)
    assert all(c.authorization == "Bearer test-key" for c in fake.calls("chat"))
    assert fake.calls("embeddings"), "the memories were embedded by the endpoint"
