"""An app's extraction topics: set through the API, sent to Gemini (the real
google-genai client against the fake endpoint) in the extraction's prompt, and a
memory of a topic the app does not keep never created; each memory records its
topic, shown and filterable in the API."""

from __future__ import annotations

import pytest

from shared.embeddings import make_embedder
from shared.llm.gemini import GeminiLLM
from tests.bus_helpers import extraction_worker, make_turn
from tests.support import wait_for
from tests.window_helpers import gemini, live_texts, rules_fake

TRAVEL = {
    "name": "travel",
    "description": "where the user travels and how",
    "examples": [
        {
            "conversation": "User: I fly to Lisbon every spring.",
            "memories": ["User flies to Lisbon every spring."],
        }
    ],
}


@pytest.fixture
def fake():
    """The fake Gemini endpoint answering as the `offline` provider would: it knows
    nothing of the app's topics, so it files a preference under `preferences`."""
    with rules_fake() as server:
        yield server


def test_the_topics_an_app_keeps_are_in_the_prompt_and_nothing_else_is_made(
    client, settings, ids, fake, publisher, pool
):
    config = {"managed_topics": ["rules", "personal_info"], "custom_topics": [TRAVEL]}
    assert client.put("/v1/config/extraction", json=config).status_code == 200
    # Read back with what was not given: no metadata, the app's or the topic's.
    stored = {**config, "custom_topics": [{**TRAVEL, "metadata": {}}], "metadata": {}}
    assert client.get("/v1/config/extraction").json() == stored
    local = gemini(
        settings.model_copy(update={"default_app": ids["app"]}),
        fake,
        extraction_window_turns=2,
        extraction_window_seconds=60.0,
    )
    turns = [
        make_turn(ids, 1, user="I prefer tabs over spaces.", assistant="Noted."),
        make_turn(ids, 2, user="We must never deploy on Fridays.", assistant="Noted."),
    ]
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in turns:
            publisher.publish(turn).result(timeout=10)
        wait_for(lambda: live_texts(pool, ids) != [], 60, "the window's memory")
    # The model was told what to keep, with the custom topic's description and example.
    (call,) = [c for c in fake.calls("generateContent") if "Turns, oldest first" in c.prompt_text()]
    system = call.body["systemInstruction"]["parts"][0]["text"]
    assert "- travel: where the user travels and how;" in system
    assert "from 'User: I fly to Lisbon every spring.' keep: User flies to Lisbon" in system
    assert "- rules: constraints and vetoes" in system and "- preferences:" not in system
    schema = call.body["generationConfig"]["responseJsonSchema"]
    topic = schema["properties"]["memories"]["items"]["properties"]["topic"]
    assert topic["enum"] == ["rules", "personal_info", "travel"]
    # It answered a preference too (it is the rules model): not kept, not made.
    assert live_texts(pool, ids) == ["User must never deploy on Fridays."]
    listed = client.get("/v1/memories", params={"user_id": ids["user_id"], "topic": "rules"})
    assert [(m["text"], m["topic"]) for m in listed.json()["memories"]] == [
        ("User must never deploy on Fridays.", "rules")
    ]
    none = client.get("/v1/memories", params={"user_id": ids["user_id"], "topic": "preferences"})
    assert none.json()["memories"] == []


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"managed_topics": ["gossip"]}, "managed_topics.0"),
        ({"managed_topics": ["rules", "rules"]}, "managed_topics"),
        ({"custom_topics": [{**TRAVEL, "name": "Travel Plans"}]}, "custom_topics.0.name"),
        ({"custom_topics": [{**TRAVEL, "name": "rules"}]}, "custom_topics"),
        ({"custom_topics": [TRAVEL, TRAVEL]}, "custom_topics"),
        ({"custom_topics": [{**TRAVEL, "description": ""}]}, "custom_topics.0.description"),
        ({"custom_topics": [{**TRAVEL, "description": "x" * 501}]}, "custom_topics.0.description"),
        (
            {"custom_topics": [{**TRAVEL, "examples": [TRAVEL["examples"][0]] * 6}]},
            "custom_topics.0.examples",
        ),
        ({"custom_topics": [{**TRAVEL, "name": f"t{n}"} for n in range(11)]}, "custom_topics"),
        ({"topics": []}, "topics"),
    ],
)
def test_a_topic_config_over_its_limits_is_a_422_naming_the_field(client, config, field):
    answer = client.put("/v1/config/extraction", json=config)
    assert answer.status_code == 422, answer.text
    assert [f["field"] for f in answer.json()["error"]["fields"]] == [field]
