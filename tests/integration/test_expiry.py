"""Memories that expire: the app's TTLs through the API, an expired memory gone
from every read at once, and the compaction worker's sweep retiring it (a
DELETED revision, counted) without touching what has not expired."""

from __future__ import annotations

from datetime import timedelta

import pytest

from services.compaction_worker.handlers import Compaction
from services.compaction_worker.requests import compaction_request
from shared.db.unit_of_work import UnitsOfWork
from shared.embeddings import make_embedder
from shared.events import format_time, utcnow
from shared.llm import OfflineLLM
from shared.memory.expiry import retire_expired
from shared.metrics import EXPIRED
from tests.support import wait_for


def _write(client, ids, text: str, **extra) -> dict:
    body = {"user_id": ids["user_id"], "kind": "fact", "scope": "global", "text": text, **extra}
    answer = client.post("/v1/memories", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["memory"]


def _listed(client, ids) -> list[str]:
    page = client.get("/v1/memories", params={"user_id": ids["user_id"]}).json()
    return sorted(m["text"] for m in page["memories"])


def _searched(client, ids, query: str) -> list[str]:
    found = client.post("/v1/memories:search", json={"user_id": ids["user_id"], "query": query})
    return sorted(m["text"] for m in found.json()["memories"])


def _in_context(client, ids, query: str) -> list[str]:
    body = {"user_id": ids["user_id"], "session_id": ids["session_id"], "query": query}
    context = client.post("/v1/context", json=body).json()
    return sorted(m["text"] for m in context["memories"])


def test_the_apps_ttls_are_set_by_an_admin_and_read_back(client):
    assert client.get("/v1/config/ttl").json() == {
        "default": None,
        "create": None,
        "generate_created": None,
        "generate_updated": None,
        "revisions": None,
        "scopes": {},
    }
    body = {"create": 3600, "revisions": 86400, "scopes": {"session": {"default": 600}}}
    assert client.put("/v1/config/ttl", json=body).status_code == 200
    stored = client.get("/v1/config/ttl").json()
    assert (stored["create"], stored["revisions"], stored["default"]) == (3600, 86400, None)
    assert stored["scopes"]["session"]["default"] == 600


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"default": 10}, "default"),
        ({"create": True}, "create"),
        ({"create": 3.5}, "create"),
        ({"forever": 3600}, "forever"),
        ({"scopes": {"galaxy": {"default": 600}}}, "scopes.galaxy.[key]"),
        ({"scopes": {"session": {"revisions": 600}}}, "scopes.session.revisions"),
    ],
)
def test_a_ttl_that_is_not_one_is_a_422_naming_the_field(client, body, field):
    answer = client.put("/v1/config/ttl", json=body)
    assert answer.status_code == 422, answer.text
    assert [f["field"] for f in answer.json()["error"]["fields"]] == [field]


def test_a_write_gets_the_apps_create_ttl_or_its_own(client, ids):
    assert client.put("/v1/config/ttl", json={"create": 3600}).status_code == 200
    before = utcnow()
    by_app = _write(client, ids, "Heron ships in June.")
    own = _write(client, ids, "Heron ships in July.", ttl_seconds=120, entity_name="ship")
    for memory, seconds in ((by_app, 3600), (own, 120)):
        left = memory["expire_at"]
        assert left is not None
        expected = before + timedelta(seconds=seconds)
        assert format_time(expected) <= left <= format_time(expected + timedelta(seconds=30))
    for extra, field in (
        ({"ttl_seconds": 30}, "ttl_seconds"),
        ({"expire_at": format_time(utcnow() - timedelta(minutes=1))}, "expire_at"),
        ({"expire_at": "2999-01-01T00:00:00Z", "ttl_seconds": 600}, "ttl_seconds"),
    ):
        body = {"user_id": ids["user_id"], "kind": "fact", "scope": "global", "text": "x", **extra}
        answer = client.post("/v1/memories", json=body)
        assert answer.status_code == 422, answer.text
        assert field in answer.text


def test_an_expired_memory_leaves_every_read_at_once_and_the_sweep_retires_it(
    client, ids, settings, publisher, pool
):
    soon = format_time(utcnow() + timedelta(seconds=3))
    expiring = _write(client, ids, "The Heron demo room is B12.", expire_at=soon)
    kept = _write(client, ids, "The Heron build uses gcc 14.")
    everything = ["The Heron build uses gcc 14.", "The Heron demo room is B12."]
    assert _listed(client, ids) == everything
    assert _searched(client, ids, "Heron room build") == everything
    wait_for(lambda: _listed(client, ids) == [kept["text"]], 30, "the memory to expire")
    assert _searched(client, ids, "Heron room build") == [kept["text"]]
    assert _in_context(client, ids, "Which room is the Heron demo in?") == [kept["text"]]
    # Until the sweep, it is only out of sight; the sweep retires it, once.
    detail = client.get(f"/v1/memories/{expiring['id']}", params={"user_id": ids["user_id"]})
    assert detail.json()["deleted_at"] is None
    counted = EXPIRED.labels("memories")._value.get()
    compaction = Compaction(
        UnitsOfWork(pool, "compaction"), OfflineLLM(), make_embedder(settings), settings, publisher
    )
    sweep = compaction_request(ids["app"], "", "", retention_days=30, batch_limit=50)
    for _ in range(2):  # a redelivered sweep retires nothing more
        compaction.handle_request(sweep, None)
    assert EXPIRED.labels("memories")._value.get() == counted + 1
    detail = client.get(f"/v1/memories/{expiring['id']}", params={"user_id": ids["user_id"]})
    assert detail.json()["deleted_at"] is not None
    assert [r["action"] for r in detail.json()["revisions"]] == ["CREATED", "DELETED"]
    kept_now = client.get(f"/v1/memories/{kept['id']}", params={"user_id": ids["user_id"]})
    assert kept_now.json()["deleted_at"] is None


def test_revisions_are_kept_as_long_as_the_apps_revisions_ttl(client, ids, settings, pool):
    assert client.put("/v1/config/ttl", json={"revisions": 60}).status_code == 200
    memory = _write(client, ids, "The Heron build uses gcc 12.", entity_name="gcc")
    _write(client, ids, "The Heron build uses gcc 14.", entity_name="gcc")
    with pool.connection() as conn:
        kept = conn.execute(
            "SELECT min(expire_at - created_at) FROM memory_revisions WHERE memory_id = %s",
            (memory["id"],),
        ).fetchone()[0]
        assert kept == timedelta(seconds=60)
        # A minute later, as far as the sweep can tell.
        conn.execute(
            "UPDATE memory_revisions SET expire_at = now() - interval '1 s' WHERE memory_id = %s",
            (memory["id"],),
        )
    swept = retire_expired(UnitsOfWork(pool, "compaction"), ids["app"])
    assert (swept.memories, swept.revisions) == (0, 2)
    detail = client.get(f"/v1/memories/{memory['id']}", params={"user_id": ids["user_id"]})
    assert detail.json()["text"] == "The Heron build uses gcc 14."
    assert detail.json()["revisions"] == []


def test_an_expired_memory_makes_way_for_a_new_one_of_its_entity_and_is_not_rolled_back(
    client, ids, pool
):
    old = _write(client, ids, "Prefers vim.", entity_name="editor", ttl_seconds=60)
    with pool.connection() as conn:  # a minute later, as the reads can tell
        conn.execute(
            "UPDATE memories SET expire_at = now() - interval '1 s' WHERE id = %s", (old["id"],)
        )
    rollback = client.post(
        f"/v1/memories/{old['id']}:rollback", json={"user_id": ids["user_id"], "revision": 1}
    )
    assert rollback.status_code == 409, rollback.text
    assert "expired" in rollback.text
    body = {
        "user_id": ids["user_id"],
        "kind": "preference",
        "scope": "global",
        "entity_name": "editor",
        "text": "Prefers emacs.",
    }
    written = client.post("/v1/memories", json=body)
    assert written.status_code == 201, written.text
    assert written.json()["action"] == "CREATED"
    assert written.json()["memory"]["id"] != old["id"]
    assert _listed(client, ids) == ["Prefers emacs."]
    gone = client.get(f"/v1/memories/{old['id']}", params={"user_id": ids["user_id"]}).json()
    assert gone["deleted_at"] is not None


def test_a_revisions_ttl_of_a_century_still_lets_memories_be_written(client, ids):
    assert client.put("/v1/config/ttl", json={"revisions": 3153600000}).status_code == 200
    _write(client, ids, "Heron ships in June.")
