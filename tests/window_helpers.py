"""What the tests of extraction windows share: the fake Gemini endpoint answering
as the `offline` provider would (`tests.fake_gemini_model`), settings that point
the worker at it, and reads of what the worker wrote."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import SecretStr

from services.extraction_worker.handlers import TURNS_SUBSCRIPTION
from tests.fake_gemini import FakeGemini
from tests.fake_gemini_model import offline_model

STATEMENTS = [
    "My editor is vim.",
    "I prefer tabs over spaces.",
    "My favourite database is PostgreSQL.",
    "Remember that the staging cluster is called orchid.",
    "My timezone is CET.",
]


@contextmanager
def rules_fake() -> Iterator[FakeGemini]:
    """The fake Gemini endpoint, its model answering as the `offline` provider would."""
    with FakeGemini() as server:
        server.defaults["generateContent"] = offline_model
        yield server


def gemini(settings, fake, **updates):
    return settings.model_copy(
        update={
            "llm_provider": "gemini",
            "gemini_api_key": SecretStr("test-key"),
            "gemini_base_url": fake.url,
            "llm_retry_initial_seconds": 0.01,
            "llm_retry_seconds": 0.2,
            "llm_timeout_seconds": 2.0,
            **updates,
        }
    )


def tasks_of(fake):
    """The task of each generateContent call so far: extract, consolidate, ..."""
    names = []
    for call in fake.calls("generateContent"):
        schema = call.body.get("generationConfig", {}).get("responseJsonSchema") or {}
        fields = schema.get("properties", {})
        names.append("extract" if "memories" in fields else "consolidate")
    return names


def query(pool, sql, *params):
    with pool.connection() as conn:
        return conn.execute(sql, params).fetchall()


def live_texts(pool, ids):
    rows = query(
        pool,
        "SELECT text FROM memories WHERE app = %s AND user_id = %s AND valid_to IS NULL",
        ids["app"],
        ids["user_id"],
    )
    return sorted(r[0] for r in rows)


def ledgered(pool, events):
    rows = query(
        pool,
        "SELECT event_id::text FROM processed_events WHERE consumer = %s AND event_id = ANY(%s)",
        TURNS_SUBSCRIPTION,
        [e.event_id for e in events],
    )
    return sorted(r[0] for r in rows)


def waiting(pool, ids):
    return query(
        pool,
        "SELECT turn_id FROM extraction_pending WHERE app = %s AND user_id = %s",
        ids["app"],
        ids["user_id"],
    )


def extracted(pool, events):
    return len(ledgered(pool, events)) == len(events)


def recorder_of(client, ids):
    def record(n):
        body = {"user_id": ids["user_id"], "turn_id": f"turn-{n:04d}", "user": STATEMENTS[n - 1]}
        answer = client.post(
            f"/v1/sessions/{ids['session_id']}/turns", json={**body, "assistant": "Ok."}
        )
        assert answer.status_code == 202, answer.text
        return answer.json()["event_id"]

    return record


def flush(client, ids):
    answer = client.post(
        f"/v1/sessions/{ids['session_id']}:flush", json={"user_id": ids["user_id"]}
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["session_id"] == ids["session_id"]


def a_tool():
    from shared.events import ToolEvent

    return ToolEvent("run_shell", '{"command": "ls"}', "README.md\nsrc\n")


def fields_of(call):
    schema = call.body.get("generationConfig", {}).get("responseJsonSchema") or {}
    return schema.get("properties", {})


def system_of(call):
    return "\n".join(p.get("text", "") for p in call.body["systemInstruction"]["parts"])
