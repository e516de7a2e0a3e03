"""An app's extraction metadata against the real stack: set with the topics
through `PUT /v1/config/extraction`, bounded as a memory's metadata is, and
carried by every memory the extraction worker writes, from turns and from a
generate request (the real google-genai client against the fake Gemini endpoint,
its model answering as the `offline` provider would, except that it files the
Lisbon memory under the app's custom topic `travel`): the app's metadata with
its topic's over it, set over the keys of a memory the extraction updates, shown
in the revisions, and found by filters. A memory extracted before the config
keeps what it had."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from shared.client import AsyncMemoryClient, MemoryClient
from shared.client.errors import MemoryApiError
from shared.client.models import ExtractionConfig
from shared.embeddings import make_embedder
from shared.llm.gemini import GeminiLLM
from tests.bus_helpers import extraction_worker, make_turn
from tests.fake_gemini import FakeGemini, Reply, Request, text_reply
from tests.fake_gemini_model import counted, rules_value
from tests.integration.test_profile_clients import served  # noqa: F401 (a fixture)
from tests.support import wait_for
from tests.window_helpers import gemini, live_texts

TRAVEL = {
    "name": "travel",
    "description": "where the user travels and how",
    "examples": [],
    "metadata": {"source": "travel", "team": "trips"},
}
CONFIG = {
    "managed_topics": ["personal_info", "preferences", "rules"],
    "custom_topics": [TRAVEL],
    "metadata": {"source": "extracted", "pipeline": "v2"},
}


def _travel_model(request: Request) -> Reply:
    """The `offline` provider's answer, with the memory of Lisbon filed under
    `travel` (the rules know no custom topic)."""
    messages = request.messages()
    value = rules_value(messages[0][1] if messages else "")
    if value is None:
        return text_reply("pong")  # the workers' probe
    for memory in value.get("memories", []):
        if "Lisbon" in memory["text"]:
            memory["topic"] = "travel"
    return counted(request, json.dumps(value))


@pytest.fixture
def fake():
    with FakeGemini() as server:
        server.defaults["generateContent"] = _travel_model
        yield server


def test_the_config_with_metadata_round_trips(client):
    assert client.put("/v1/config/extraction", json=CONFIG).json() == CONFIG
    assert client.get("/v1/config/extraction").json() == CONFIG
    # A topic or an app without metadata reads back with none.
    plain = {"managed_topics": ["rules"], "custom_topics": [{"name": "food", "description": "x"}]}
    assert client.put("/v1/config/extraction", json=plain).status_code == 200
    assert client.get("/v1/config/extraction").json() == {
        "managed_topics": ["rules"],
        "custom_topics": [{"name": "food", "description": "x", "examples": [], "metadata": {}}],
        "metadata": {},
    }


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"metadata": []}, "metadata"),
        ({"metadata": {"bad key": 1}}, "metadata"),
        ({"metadata": {"big": "x" * 5000}}, "metadata"),
        ({"custom_topics": [{**TRAVEL, "metadata": "trips"}]}, "custom_topics.0.metadata"),
        (
            {"custom_topics": [{**TRAVEL, "metadata": {"a": {"b": {"c": {"d": {"e": 1}}}}}}]},
            "custom_topics.0.metadata.a.b.c.d",
        ),
        (
            {"custom_topics": [{**TRAVEL, "metadata": {"big": "x" * 5000}}]},
            "custom_topics.0.metadata",
        ),
        # Each within the bounds, but a travel memory would carry both: over them.
        (
            {
                "metadata": {"app": "x" * 3000},
                "custom_topics": [{**TRAVEL, "metadata": {"topic": "y" * 3000}}],
            },
            "custom_topics.0.metadata",
        ),
    ],
)
def test_metadata_outside_a_memorys_bounds_is_a_422_naming_the_field(client, config, field):
    answer = client.put("/v1/config/extraction", json=config)
    assert answer.status_code == 422, answer.text
    assert [f["field"] for f in answer.json()["error"]["fields"]] == [field]
    # Nothing was stored: the app still has no config.
    assert client.get("/v1/config/extraction").json()["metadata"] == {}


def _memories(client, ids, **params) -> dict[str, dict]:
    answer = client.get("/v1/memories", params={"user_id": ids["user_id"], **params})
    assert answer.status_code == 200, answer.text
    return {m["text"]: m["metadata"] for m in answer.json()["memories"]}


def _turn(ids, n: int, text: str):
    # Said now: later than the memory written through the API, so its update applies.
    return make_turn(ids, n, user=text, assistant="Noted.", created_at=datetime.now(UTC))


def _generate(client, ids, text: str) -> list[dict]:
    """What `memories:generate` of `text` made, once its operation is done."""
    body = {"user_id": ids["user_id"], "scope": {}, "events": [{"role": "user", "text": text}]}
    started = client.post("/v1/memories:generate", json=body)
    assert started.status_code == 202, started.text
    path = f"/v1/{started.json()['name']}"

    def done():
        operation = client.get(path, params={"user_id": ids["user_id"]}).json()
        return operation if operation["done"] else None

    return wait_for(done, 60, "the generate operation")["generated_memories"]


def test_extracted_memories_carry_the_apps_metadata_and_their_topics_over_it(
    client, settings, ids, fake, publisher, pool
):
    local = gemini(
        settings.model_copy(update={"default_app": ids["app"]}),
        fake,
        extraction_window_turns=1,
        extraction_window_seconds=60.0,
    )
    # The caller's own memory, which a later turn's extraction updates.
    rule = {
        "user_id": ids["user_id"],
        "text": "User must never deploy on Fridays.",
        "kind": "rule",
        "scope": "global",
        "entity_name": "deploy",
        "metadata": {"owner": "ops", "source": "caller"},
    }
    written = client.post("/v1/memories", json=rule)
    assert written.status_code == 201, written.text
    rule_id = written.json()["memory"]["id"]
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        publisher.publish(_turn(ids, 1, "My editor is vim.")).result(timeout=10)
        wait_for(lambda: "User's editor is vim." in live_texts(pool, ids), 60, "the vim memory")
        assert client.put("/v1/config/extraction", json=CONFIG).status_code == 200
        for n, text in enumerate(
            [
                "I prefer tabs over spaces.",
                "I always fly to Lisbon in spring.",
                "We must never deploy on Mondays.",
            ],
            start=2,
        ):
            publisher.publish(_turn(ids, n, text)).result(timeout=10)
        wait_for(lambda: len(live_texts(pool, ids)) == 4, 60, "the turns' memories")
        wait_for(
            lambda: "User must never deploy on Mondays." in live_texts(pool, ids),
            60,
            "the rule updated",
        )
        generated = _generate(client, ids, "My timezone is CET.")
    # A generate request is extracted as a turn is: the app's metadata too (below).
    assert [(g["action"], g["memory"]["text"]) for g in generated] == [
        ("CREATED", "User's timezone is CET.")
    ]
    assert _memories(client, ids) == {
        # Extracted before the config: it keeps what it had.
        "User's editor is vim.": {},
        "User prefers tabs over spaces.": {"source": "extracted", "pipeline": "v2"},
        # The topic's keys win over the app's.
        "User always flies to Lisbon in spring.": {
            "source": "travel",
            "pipeline": "v2",
            "team": "trips",
        },
        # Updated by the extraction: the config's keys set, the caller's other key kept.
        "User must never deploy on Mondays.": {
            "owner": "ops",
            "source": "extracted",
            "pipeline": "v2",
        },
        "User's timezone is CET.": {"source": "extracted", "pipeline": "v2"},
    }
    detail = client.get(f"/v1/memories/{rule_id}", params={"user_id": ids["user_id"]}).json()
    assert [(r["action"], r["new_text"], r["metadata"]) for r in detail["revisions"]] == [
        ("CREATED", "User must never deploy on Fridays.", {"owner": "ops", "source": "caller"}),
        (
            "UPDATED",
            "User must never deploy on Mondays.",
            {"owner": "ops", "source": "extracted", "pipeline": "v2"},
        ),
    ]
    # Filters on the metadata find them.
    assert set(_memories(client, ids, filter=json.dumps({"metadata.team": "trips"}))) == {
        "User always flies to Lisbon in spring."
    }
    assert set(_memories(client, ids, filter=json.dumps({"metadata.source": "extracted"}))) == {
        "User prefers tabs over spaces.",
        "User must never deploy on Mondays.",
        "User's timezone is CET.",
    }
    topic_and_key = {"topic": "travel", "metadata.pipeline": "v2"}
    assert set(_memories(client, ids, filter=json.dumps(topic_and_key))) == {
        "User always flies to Lisbon in spring."
    }
    unset = {"metadata.pipeline": {"exists": False}}
    assert set(_memories(client, ids, filter=json.dumps(unset))) == {"User's editor is vim."}


def test_the_clients_read_and_replace_the_config(served):  # noqa: F811
    url, key, _key_id = served
    config = ExtractionConfig.model_validate(CONFIG)
    with MemoryClient(url, api_key=key) as client:
        assert client.set_extraction_config(config).model_dump(mode="json") == CONFIG
        assert client.extraction_config() == config
        deep = {"a": {"b": {"c": {"d": {"e": 1}}}}}
        with pytest.raises(MemoryApiError) as refused:
            client.set_extraction_config(config.model_copy(update={"metadata": deep}))
        assert refused.value.status == 422
        assert [f["field"] for f in refused.value.fields or []] == ["metadata.a.b.c.d"]

    async def run() -> ExtractionConfig:
        async with AsyncMemoryClient(url, api_key=key) as client:
            plain = config.model_copy(update={"metadata": {"source": "async"}})
            assert await client.set_extraction_config(plain) == plain
            return await client.extraction_config()

    assert asyncio.run(run()).metadata == {"source": "async"}
