"""Editing a memory directly (`PATCH /v1/memories/{id}`) against the real API,
Postgres and embedder: one UPDATED revision whose source is the caller, the new
text searched by its new embedding, the edit rolled back, and each refusal the
status the other memory routes answer."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from shared.api_keys import create_key
from shared.client import AsyncMemoryClient, MemoryClient
from shared.client.errors import NotFoundError
from tests.support import serve_api

UNKNOWN = "7a1b3c4d-0000-4000-8000-000000000000"


def _write(client, user: str, text: str, **fields) -> dict:
    body = {"user_id": user, "kind": "preference", "scope": "global", "text": text, **fields}
    answer = client.post("/v1/memories", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["memory"]


def _fields(answer) -> list[str]:
    return [f["field"] for f in answer.json()["error"].get("fields", [])]


def _patch(client, memory_id: str, **body):
    return client.patch(f"/v1/memories/{memory_id}", json=body)


def test_an_edit_is_one_revision_by_the_caller_and_is_searched_by_its_new_text(client, ids):
    user = ids["user_id"]
    memory = _write(client, user, "Prefers vim.", entity_name="editor", metadata={"team": "core"})
    assert memory["metadata"] == {"team": "core"}
    answer = _patch(
        client,
        memory["id"],
        user_id=user,
        text="Prefers helix for Rust work.",
        kind="fact",
        metadata={"team": "tools", "level": 3},
    )
    assert answer.status_code == 200, answer.text
    edited = answer.json()
    assert (edited["text"], edited["kind"], edited["entity_name"], edited["metadata"]) == (
        "Prefers helix for Rust work.",
        "fact",
        "editor",
        {"team": "tools", "level": 3},
    )
    revisions = [
        (r["action"], r["old_text"], r["new_text"], r["source"]) for r in edited["revisions"]
    ]
    # Authentication is off in this app: the caller is the API itself.
    assert revisions == [
        ("CREATED", None, "Prefers vim.", ""),
        ("UPDATED", "Prefers vim.", "Prefers helix for Rust work.", "api"),
    ]
    found = client.post("/v1/memories:search", json={"user_id": user, "query": "helix rust"})
    assert [m["text"] for m in found.json()["memories"]] == ["Prefers helix for Rust work."]
    # The same edit again changes nothing and writes no revision.
    again = _patch(client, memory["id"], user_id=user, text="Prefers helix for Rust work.")
    assert again.status_code == 200 and len(again.json()["revisions"]) == 2


def test_an_edit_is_rolled_back_with_its_kind_and_metadata(client, ids):
    user = ids["user_id"]
    memory = _write(client, user, "Lives in Porto.", metadata={"city": "porto"})
    _patch(client, memory["id"], user_id=user, metadata={"city": "lisbon"}, kind="fact")
    rolled = client.post(
        f"/v1/memories/{memory['id']}:rollback", json={"user_id": user, "revision": 1}
    )
    assert rolled.status_code == 200, rolled.text
    body = rolled.json()
    assert (body["text"], body["kind"], body["metadata"]) == (
        "Lives in Porto.",
        "preference",
        {"city": "porto"},
    )
    assert [r["action"] for r in body["revisions"]] == ["CREATED", "UPDATED", "UPDATED"]


def test_expiry_is_set_and_cleared_by_an_edit(client, ids):
    user = ids["user_id"]
    memory = _write(client, user, "Is on call this week.", ttl_seconds=3600)
    assert memory["expire_at"] is not None
    cleared = _patch(client, memory["id"], user_id=user, expire_at=None)
    assert cleared.status_code == 200 and cleared.json()["expire_at"] is None
    later = _patch(client, memory["id"], user_id=user, ttl_seconds=7200)
    assert later.status_code == 200 and later.json()["expire_at"] is not None


def test_each_edit_that_cannot_be_done_is_refused_and_changes_nothing(client, ids):
    user = ids["user_id"]
    editor = _write(client, user, "Prefers vim.", entity_name="editor")
    shell = _write(client, user, "Uses fish.", entity_name="shell")
    taken = _patch(client, shell["id"], user_id=user, entity_name="Editor")
    assert taken.status_code == 409, taken.text
    assert _fields(taken) == ["entity_name"]
    assert _patch(client, UNKNOWN, user_id=user, text="x").status_code == 404
    assert _patch(client, "not-a-uuid", user_id=user, text="x").status_code == 404
    assert _patch(client, editor["id"], user_id="someone-else", text="x").status_code == 404
    assert (
        client.delete(f"/v1/memories/{editor['id']}", params={"user_id": user}).status_code == 200
    )
    gone = _patch(client, editor["id"], user_id=user, text="Prefers emacs.")
    assert gone.status_code == 409 and "deleted" in gone.text
    unchanged = client.get(f"/v1/memories/{shell['id']}", params={"user_id": user}).json()
    assert (unchanged["entity_name"], len(unchanged["revisions"])) == ("shell", 1)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body"),
        ({"text": ""}, "text"),
        ({"text": "x" * 4001}, "text"),
        ({"kind": "opinion"}, "kind"),
        ({"topic": "Not A Topic"}, "topic"),
        ({"metadata": []}, "metadata"),
        ({"metadata": {"a": {"b": {"c": {"d": {"e": 1}}}}}}, "metadata.a.b.c.d"),
        ({"metadata": {"bad key": 1}}, "metadata"),
        ({"metadata": {"big": "x" * 5000}}, "metadata"),
        ({"expire_at": "2001-01-01T00:00:00Z"}, "expire_at"),
        ({"ttl_seconds": 1}, "ttl_seconds"),
        ({"expire_at": "2999-01-01T00:00:00Z", "ttl_seconds": 3600}, "ttl_seconds"),
        ({"scope": "project"}, "scope"),
    ],
)
def test_a_bad_edit_is_a_422_naming_the_field(client, ids, body, field):
    memory = _write(client, ids["user_id"], "A fact.")
    answer = _patch(client, memory["id"], user_id=ids["user_id"], **body)
    assert answer.status_code == 422, answer.text
    assert _fields(answer) == [field], answer.text


def test_an_edit_through_a_key_names_that_key_as_its_source(app_settings, topology, stack, ids):
    with psycopg.connect(app_settings.database_url, autocommit=True) as conn:
        key, record = create_key(conn, ids["app"], name="editor")
    settings = app_settings.model_copy(update={"auth_disabled": False})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {key}"
        memory = _write(client, ids["user_id"], "Prefers tea.")
        edited = _patch(client, memory["id"], user_id=ids["user_id"], text="Prefers green tea.")
    assert edited.status_code == 200, edited.text
    assert edited.json()["revisions"][-1]["source"] == f"key:{record.id}"


def test_the_clients_edit_a_memory(app_settings, topology, ids):
    user = ids["user_id"]
    with serve_api(app_settings) as url, MemoryClient(url) as client:
        memory = client.write_memory(user, "Prefers vim.", metadata={"team": "core"}).memory
        assert memory is not None and memory.metadata == {"team": "core"}
        edited = client.edit_memory(user, memory.id, text="Prefers helix.", ttl_seconds=3600)
        assert (edited.text, edited.metadata, edited.revisions[-1].source) == (
            "Prefers helix.",
            {"team": "core"},
            "api",
        )
        assert edited.expire_at is not None
        cleared = client.edit_memory(user, memory.id, never_expire=True, metadata={})
        assert (cleared.expire_at, cleared.metadata) == (None, {})
        with pytest.raises(NotFoundError):
            client.edit_memory(user, UNKNOWN, text="x")
        # Never expiring and expiring in an hour: refused before anything is sent.
        with pytest.raises(ValueError, match="never_expire: not with expire_at or ttl_seconds"):
            client.edit_memory(user, memory.id, never_expire=True, ttl_seconds=3600)
        assert len(client.get_memory(user, memory.id).revisions) == 3

        async def edit_async() -> str:
            async with AsyncMemoryClient(url) as aclient:
                done = await aclient.edit_memory(user, memory.id, kind="rule", topic="rules")
                return f"{done.kind} {done.topic} {len(done.revisions)}"

        assert asyncio.run(edit_async()) == "rule rules 4"


def test_an_edited_text_names_its_own_entities(client, ids):
    user = ids["user_id"]
    memory = _write(client, user, "Dana Lee works at Acme Corp.", entity_name="dana job")
    edited = _patch(client, memory["id"], user_id=user, text="Dana Lee works at Globex Inc.")
    assert edited.status_code == 200, edited.text
    listed = client.get("/v1/entities", params={"user_id": user})
    assert listed.status_code == 200, listed.text
    found = {e["name"]: e["memories"] for e in listed.json()["entities"]}
    # The new text's entity is linked; Acme keeps its mention of the earlier revision.
    assert found["Globex Inc"] == 1
    assert found["Dana Lee"] == 1
