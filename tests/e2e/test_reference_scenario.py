"""The reference scenario of long-term memory, end to end: turns recorded through
the API, the extraction worker as a user runs it (`agent-memory worker extraction`,
`offline` LLM, `hash` embeddings), contexts read through the API."""

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.extraction_worker.handlers import TURNS_SUBSCRIPTION
from shared.events import TurnRecorded
from tests.support import WorkerProcess, wait_for

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
USER = "user_dev_42"
QUESTION = (
    "What are my general coding preferences and the backend/timeout rules I chose for "
    "CloudRetail in my previous session?"
)
TURNS = [
    (
        "sess_2026_01",
        None,
        "As universal coding preferences across all my projects, I prefer Dark Mode UI "
        "and standardizing on Python 3.11 with PostgreSQL.",
    ),
    (
        "sess_2026_01",
        "CloudRetail",
        "For project CloudRetail, the backend is FastAPI on AlloyDB, the short-term cache is "
        "Memorystore for Valkey, all tool execution timeouts must be capped at 30 seconds, "
        "and the region is us-east1.",
    ),
    ("sess_2026_01", None, "Can you explain how Python list comprehensions work?"),
    ("sess_2026_01", "CloudRetail", "What's the difference between TCP and UDP?"),
]


@pytest.fixture
def stack_parts(settings, topology, ids, tmp_path):
    local = settings.model_copy(update={"default_app": ids["app"]})
    worker = WorkerProcess(local, "extraction", tmp_path / "extraction.log")
    try:
        wait_for(lambda: "worker started" in worker.log_text(), 60, "the extraction worker")
        with TestClient(create_app(local), raise_server_exceptions=False) as client:
            yield local, client, worker
    finally:
        worker.stop()


def record(client, session_id, n, text, project_id=None, prev=None, at=None):
    body = {
        "user_id": USER,
        "turn_id": f"{session_id}-{n}",
        "created_at": (at or T0 + timedelta(minutes=n)).isoformat(),
        "user": text,
        "assistant": "Understood.",
    }
    if project_id:
        body["project_id"] = project_id
    if prev:
        body["prev_session_id"] = prev
    response = client.post(f"/v1/sessions/{session_id}/turns", json=body)
    assert response.status_code == 202, response.text
    return response.json()["event_id"]


def applied(pool, event_ids):
    def check():
        with pool.connection() as conn:
            n = conn.execute(
                "SELECT count(*) FROM processed_events WHERE consumer = %s AND event_id = ANY(%s)",
                (TURNS_SUBSCRIPTION, event_ids),
            ).fetchone()[0]
        return n == len(event_ids)

    wait_for(check, 60, f"{len(event_ids)} turns extracted")


def context(client, user, session_id, project_id=None, prev=None):
    body = {"user_id": user, "session_id": session_id, "query": QUESTION}
    if project_id:
        body["project_id"] = project_id
    if prev:
        body["prev_session_id"] = prev
    response = client.post("/v1/context", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def every_text(ctx):
    return [m["text"] for m in ctx["memories"]] + [r["text"] for r in ctx["pinned_rules"]]


@pytest.mark.slow
def test_the_reference_scenario(stack_parts, pool, publisher, ids):
    settings, client, worker = stack_parts
    events = [
        record(client, session, n, text, project)
        for n, (session, project, text) in enumerate(TURNS, start=1)
    ]
    applied(pool, events)

    ctx = context(client, USER, "sess_2026_02", "CloudRetail", prev="sess_2026_01")
    assert ctx["degraded"] == []
    by_scope = {}
    for m in ctx["memories"] + ctx["pinned_rules"]:
        by_scope.setdefault((m["scope"], m["project_id"]), []).append(m["text"])
    global_texts = " ".join(by_scope[("global", None)])
    assert "Dark Mode" in global_texts and "Python 3.11" in global_texts
    cloud = " ".join(by_scope[("project", "CloudRetail")])
    assert "FastAPI" in cloud and "AlloyDB" in cloud
    [rule] = [r for r in ctx["pinned_rules"] if "30 seconds" in r["text"]]
    assert rule["kind"] == "rule" and rule["project_id"] == "CloudRetail"
    instruction = ctx["system_instruction"]
    for phrase in ("Dark Mode", "Python 3.11", "FastAPI", "30 seconds"):
        assert phrase in instruction
    # Noise turns leave no memory.
    assert not any("TCP" in t or "comprehension" in t for t in every_text(ctx))

    other = context(client, USER, "sess_2026_03", "OtherProject")
    assert "Dark Mode" in " ".join(every_text(other))
    assert all(m["project_id"] in (None,) for m in other["memories"] + other["pinned_rules"])
    for phrase in ("FastAPI", "30 seconds", "us-east1", "CloudRetail"):
        assert phrase not in other["system_instruction"]

    stranger = context(client, "someone_else", "sess_x", "CloudRetail")
    assert stranger["memories"] == [] and stranger["pinned_rules"] == []
    assert "Dark Mode" not in stranger["system_instruction"]

    # The preference changes; the old memory is updated, with a revision.
    switch = record(
        client,
        "sess_2026_02",
        1,
        "I've switched to Light Mode.",
        prev="sess_2026_01",
        at=T0 + timedelta(days=1),
    )
    applied(pool, [switch])
    theme = [
        m
        for m in client.get("/v1/memories", params={"user_id": USER}).json()["memories"]
        if "Mode" in m["text"]
    ]
    assert len(theme) == 1 and "Light Mode" in theme[0]["text"]
    assert "Dark Mode" not in theme[0]["text"]
    detail = client.get(f"/v1/memories/{theme[0]['id']}", params={"user_id": USER}).json()
    assert [r["action"] for r in detail["revisions"]] == ["CREATED", "UPDATED"]

    # Turn 1 again, as a replay (its own event) and as a late copy (a new event
    # observed at turn 1's time): Dark Mode does not come back.
    replay = TurnRecorded(
        event_id=events[0],
        app=settings.default_app,
        user_id=USER,
        session_id="sess_2026_01",
        turn_id="sess_2026_01-1",
        created_at=T0 + timedelta(minutes=1),
        user=TURNS[0][2],
        assistant="Understood.",
    )
    publisher.publish(replay).result(timeout=10)
    wait_for(
        lambda: any(
            replay.event_id in line and '"duplicate"' in line
            for line in worker.log_text().splitlines()
        ),
        60,
        "the replayed event handled as a duplicate",
    )
    late_id = record(client, "sess_2026_01b", 1, TURNS[0][2], at=T0 + timedelta(minutes=1))
    applied(pool, [late_id])
    after = client.get(f"/v1/memories/{theme[0]['id']}", params={"user_id": USER}).json()
    assert "Light Mode" in after["text"] and after["deleted_at"] is None
    assert [(r["action"], r["applied"]) for r in after["revisions"]][-1][1] is False
    live = client.get("/v1/memories", params={"user_id": USER}).json()["memories"]
    assert not any("Dark Mode" in m["text"] for m in live)
