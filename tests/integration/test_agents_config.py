"""What an app's agents share (`/v1/config/agents`) against the real API and
Postgres: each kind and topic named once, each topic one the extraction may give
a memory of the app (a managed one, or one of its custom topics), refused with a
422 naming the part otherwise; and the setting through both Python clients over
HTTP with an admin key."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from psycopg.types.json import Jsonb

from shared.client import AsyncMemoryClient, MemoryClient
from shared.client.errors import MemoryApiError
from tests.integration.test_profile_clients import served  # noqa: F401 (a fixture)

MIGRATION = Path(__file__).parents[2] / "schemas/migrations/0024_settings_each_name_once.sql"
MANAGED = "personal_info, preferences, key_conversation_details, explicit_instructions, rules"
TRAVEL = {"name": "travel", "description": "where the user travels and how"}


def _refused(answer) -> tuple[list[dict[str, str]], str]:
    assert answer.status_code == 422, answer.text
    return answer.json()["error"]["fields"], answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"shared_kinds": ["rule", "rule"]}, "shared_kinds", "each kind once"),
        (
            {"shared_topics": ["preferences", "rules", "preferences"]},
            "shared_topics",
            "each topic once",
        ),
    ],
)
def test_a_kind_or_topic_named_twice_is_refused(client, body, field, message):
    fields, summary = _refused(client.put("/v1/config/agents", json=body))
    assert fields == [{"field": field, "message": message}]
    assert summary == f"{field}: {message}"
    assert client.get("/v1/config/agents").json() == {"shared_kinds": [], "shared_topics": []}


def test_a_topic_is_one_the_extraction_may_give(client):
    typo = {"shared_topics": ["rules", "travle"]}
    message = (
        f"'travle' is no topic of this app (its topics: {MANAGED}; a custom "
        "one is added by PUT /v1/config/extraction)"
    )
    fields, summary = _refused(client.put("/v1/config/agents", json=typo))
    assert fields == [{"field": "shared_topics.1", "message": message}]
    assert summary == f"shared_topics.1: {message}"
    assert client.get("/v1/config/agents").json() == {"shared_kinds": [], "shared_topics": []}
    # A custom topic once the extraction keeps it; a managed one it does not keep now.
    extraction = {"managed_topics": ["rules"], "custom_topics": [TRAVEL]}
    assert client.put("/v1/config/extraction", json=extraction).status_code == 200
    shared = {"shared_kinds": ["fact"], "shared_topics": ["travel", "preferences"]}
    answer = client.put("/v1/config/agents", json=shared)
    assert (answer.status_code, answer.json()) == (200, shared)
    assert client.get("/v1/config/agents").json() == shared
    fields, _ = _refused(client.put("/v1/config/agents", json={"shared_topics": ["hobbies"]}))
    assert fields[0]["message"].endswith(
        f"(its topics: {MANAGED}, travel; a custom one is added by PUT /v1/config/extraction)"
    )


def test_the_blocking_client(served):  # noqa: F811
    url, key, _key_id = served
    with MemoryClient(url, api_key=key) as client:
        assert client.agents_config().model_dump() == {"shared_kinds": [], "shared_topics": []}
        done = client.set_agents_config(shared_kinds=["rule"], shared_topics=["preferences"])
        assert done.model_dump() == {"shared_kinds": ["rule"], "shared_topics": ["preferences"]}
        assert client.agents_config() == done
        with pytest.raises(MemoryApiError) as refused:
            client.set_agents_config(shared_topics=["travle"])
        assert refused.value.status == 422
        assert refused.value.fields == [
            {
                "field": "shared_topics.0",
                "message": f"'travle' is no topic of this app (its topics: "
                f"{MANAGED}; a custom one is added by PUT /v1/config/extraction)",
            }
        ]
        assert client.set_agents_config().model_dump() == {
            "shared_kinds": [],
            "shared_topics": [],
        }


def test_the_asyncio_client(served):  # noqa: F811
    url, key, _key_id = served

    async def run() -> None:
        async with AsyncMemoryClient(url, api_key=key) as client:
            done = await client.set_agents_config(shared_kinds=["preference", "fact"])
            assert done.model_dump() == {
                "shared_kinds": ["preference", "fact"],
                "shared_topics": [],
            }
            assert await client.agents_config() == done
            with pytest.raises(MemoryApiError) as refused:
                await client.set_agents_config(shared_kinds=["fact", "fact"])
            assert refused.value.status == 422
            assert refused.value.fields == [{"field": "shared_kinds", "message": "each kind once"}]
            assert await client.agents_config() == done

    asyncio.run(run())


def test_settings_stored_before_each_name_had_to_be_once_still_read(client, pool, ids):
    """A setting put before repeats were refused is rewritten by its migration (0024)
    with each name once (the first), as a PUT would now store it: it reads back, never
    a server error."""
    stored = {
        "agents": {"shared_kinds": ["rule", "rule"], "shared_topics": ["rules", "rules"]},
        "profile": {
            "fields": [
                {"name": "tier", "type": "enum", "description": "", "values": ["x", "X", "y"]}
            ]
        },
    }
    with pool.connection() as conn:
        for name, value in stored.items():
            conn.execute(
                "INSERT INTO app_settings (app, name, value) VALUES (%s, %s, %s)",
                (ids["app"], name, Jsonb(value)),
            )
        conn.execute(MIGRATION.read_text())  # as `agent-memory migrate` applied it
    agents = client.get("/v1/config/agents")
    assert agents.status_code == 200, agents.text
    assert agents.json() == {"shared_kinds": ["rule"], "shared_topics": ["rules"]}
    profile = client.get("/v1/config/profile")
    assert profile.status_code == 200, profile.text
    assert profile.json()["fields"][0]["values"] == ["x", "y"]
