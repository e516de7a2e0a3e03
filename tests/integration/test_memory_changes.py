"""memory.changed.v1: each change of a memory published once, in order per user,
after its transaction committed — received here through a push subscription of
the emulator to an HTTP endpoint of the test's own, as a webhook would be."""

from __future__ import annotations

from shared.bus.changes import ChangeRelay
from shared.bus.publisher import EventPublisher
from shared.db import outbox
from shared.db.memory_rows import NewMemory
from shared.db.pool import make_pool
from shared.db.unit_of_work import UnitsOfWork
from shared.events import utcnow
from tests.support import stays, wait_for


def _changes(events: list[dict]) -> list[tuple[str, str, str]]:
    return [(e["change"], e["text"], e["previous_text"]) for e in events]


def test_each_change_through_the_api_is_pushed_once_in_order(client, webhook, ids, pool):
    user = ids["user_id"]
    first = {"user_id": user, "kind": "preference", "scope": "global", "entity_name": "editor"}
    created = client.post("/v1/memories", json={**first, "text": "Prefers vim."})
    assert created.status_code == 201, created.text
    memory_id = created.json()["memory"]["id"]
    assert client.post("/v1/memories", json={**first, "text": "Prefers helix."}).status_code == 201
    rollback = {"user_id": user, "revision": 1}
    assert client.post(f"/v1/memories/{memory_id}:rollback", json=rollback).status_code == 200
    assert client.delete(f"/v1/memories/{memory_id}", params={"user_id": user}).status_code == 200
    wait_for(lambda: len(webhook.of(ids["app"])) >= 4, 30, "four changes pushed")
    stays(lambda: len(webhook.of(ids["app"])) == 4, 2, "no change pushed twice")
    events = webhook.of(ids["app"])
    assert _changes(events) == [
        ("CREATED", "Prefers vim.", ""),
        ("UPDATED", "Prefers helix.", "Prefers vim."),
        ("ROLLED_BACK", "Prefers vim.", "Prefers helix."),
        ("DELETED", "", "Prefers vim."),
    ]
    assert {e["memory_id"] for e in events} == {memory_id}
    assert {e["user_id"] for e in events} == {user}
    assert {e["agent_id"] for e in events} == {""}  # the user's memory
    assert len({e["event_id"] for e in events}) == 4
    assert all(e["attributes"]["event_type"] == "memory.changed.v1" for e in events)
    # One event per applied revision, and nothing left in the outbox.
    with pool.connection() as conn:
        revisions = conn.execute(
            "SELECT count(*) FROM memory_revisions WHERE app = %s AND applied", (ids["app"],)
        ).fetchone()[0]
        left = conn.execute(
            "SELECT count(*) FROM memory_changes WHERE app = %s", (ids["app"],)
        ).fetchone()[0]
    assert (revisions, left) == (4, 0)


def test_an_agents_memory_changes_name_the_agent(client, webhook, ids):
    user = ids["user_id"]
    body = {"user_id": user, "kind": "fact", "scope": "global", "text": "Plans in sprints."}
    created = client.post("/v1/memories", json=body | {"agent_id": "planner"})
    assert created.status_code == 201, created.text
    memory_id = created.json()["memory"]["id"]
    deleted = client.delete(
        f"/v1/memories/{memory_id}", params={"user_id": user, "agent_id": "planner"}
    )
    assert deleted.status_code == 200, deleted.text
    wait_for(lambda: len(webhook.of(ids["app"])) >= 2, 30, "two changes pushed")
    assert [(e["change"], e["agent_id"]) for e in webhook.of(ids["app"])] == [
        ("CREATED", "planner"),
        ("DELETED", "planner"),
    ]


def test_wrong_feedback_and_its_rollback_are_pushed_as_changes(client, webhook, ids):
    user = ids["user_id"]
    body = {"user_id": user, "kind": "fact", "scope": "global", "text": "Owns a boat."}
    created = client.post("/v1/memories", json=body)
    assert created.status_code == 201, created.text
    memory_id = created.json()["memory"]["id"]
    useful = {"user_id": user, "rating": "useful"}
    assert client.post(f"/v1/memories/{memory_id}:feedback", json=useful).status_code == 200
    wrong = {"user_id": user, "rating": "wrong", "reason": "sold it"}
    assert client.post(f"/v1/memories/{memory_id}:feedback", json=wrong).status_code == 200
    rollback = {"user_id": user, "revision": 1}
    assert client.post(f"/v1/memories/{memory_id}:rollback", json=rollback).status_code == 200
    wait_for(lambda: len(webhook.of(ids["app"])) >= 3, 30, "three changes pushed")
    stays(lambda: len(webhook.of(ids["app"])) == 3, 2, "useful feedback is no change")
    assert _changes(webhook.of(ids["app"])) == [
        ("CREATED", "Owns a boat.", ""),
        ("DELETED", "", "Owns a boat."),
        ("ROLLED_BACK", "Owns a boat.", "Owns a boat."),
    ]


def test_a_change_committed_by_a_process_that_died_is_published_by_another(
    settings, topology, webhook, ids
):
    pool = make_pool(settings, 2, "test-outbox")
    publisher = EventPublisher(settings)
    try:
        # Committed with no relay running: the process that made it is gone.
        with UnitsOfWork(pool, "test")() as uow:
            uow.memories.lock_user(ids["app"], ids["user_id"])
            _create(uow, ids, "The Heron build uses gcc 14.")
            uow.commit()
        # Another process claimed it and died before publishing: its lease holds it.
        with pool.connection() as conn, conn.transaction():
            assert len(outbox.claim(conn, 10, lease_seconds=1.0)) == 1
        relay = ChangeRelay(settings, pool, publisher)
        assert relay.publish_waiting() == 0
        stays(lambda: webhook.of(ids["app"]) == [], 0.5, "nothing published under the lease")
        wait_for(lambda: relay.publish_waiting() == 1, 10, "the lease to run out")
        wait_for(lambda: len(webhook.of(ids["app"])) == 1, 30, "the change pushed")
        assert relay.publish_waiting() == 0
        stays(lambda: len(webhook.of(ids["app"])) == 1, 2, "it is pushed once")
        assert _changes(webhook.of(ids["app"])) == [("CREATED", "The Heron build uses gcc 14.", "")]
    finally:
        publisher.stop()
        pool.close()


def _create(uow, ids, text: str) -> None:
    uow.memories.create(
        NewMemory(ids["app"], ids["user_id"], "", "", "global", "fact", "", text, None, utcnow()),
        None,
    )


def test_erasing_a_user_publishes_each_live_memory_deleted_without_its_text(client, webhook, ids):
    user = ids["user_id"]
    for text in ("Lives in Lisbon.", "Works on Heron."):
        body = {"user_id": user, "kind": "fact", "scope": "global", "text": text}
        assert client.post("/v1/memories", json=body).status_code == 201
    assert client.delete(f"/v1/users/{user}").status_code == 200
    wait_for(lambda: len(webhook.of(ids["app"])) >= 4, 30, "four changes pushed")
    stays(lambda: len(webhook.of(ids["app"])) == 4, 1, "no more")
    changes = [(e["change"], e["text"], e["previous_text"]) for e in webhook.of(ids["app"])]
    assert changes[2:] == [("DELETED", "", ""), ("DELETED", "", "")]
    # The erased user's text is gone from what is still to be published, too.
    assert {c[0] for c in changes[:2]} == {"CREATED"}


def test_a_change_too_large_to_publish_goes_without_its_texts(settings, topology, webhook, ids):
    small = settings.model_copy(update={"max_event_bytes": 2048})
    pool = make_pool(small, 2, "test-outbox")
    publisher = EventPublisher(small)
    try:
        with UnitsOfWork(pool, "test")() as uow:
            uow.memories.lock_user(ids["app"], ids["user_id"])
            _create(uow, ids, "The Heron build log says: " + "x" * 4000)
            _create(uow, ids, "The Heron build uses gcc 14.")
            uow.commit()
        relay = ChangeRelay(small, pool, publisher)
        assert relay.publish_waiting() == 2  # the large one does not hold the next back
        wait_for(lambda: len(webhook.of(ids["app"])) == 2, 30, "both changes pushed")
        assert _changes(webhook.of(ids["app"])) == [
            ("CREATED", "", ""),
            ("CREATED", "The Heron build uses gcc 14.", ""),
        ]
    finally:
        publisher.stop()
        pool.close()
