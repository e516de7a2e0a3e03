"""Deletion on the real stack: forgetting by query (global vs project), a project,
and a whole user (GDPR) whose late and replayed events then create nothing."""

from datetime import UTC, datetime, timedelta

from services.extraction_worker.handlers import TURNS_SUBSCRIPTION
from shared.bus.dlq import DeadLetterQueues
from shared.events import TurnRecorded
from shared.session_buffer import SessionBuffer, SessionKey, user_keys_pattern
from tests.bus_helpers import Recorder, make_turn, running, summary_handler
from tests.support import run_cli, stays, wait_for


def write(client, user_id, text, scope="global", **extra):
    body = {"user_id": user_id, "text": text, "scope": scope, "kind": "preference", **extra}
    response = client.post("/v1/memories", json=body)
    assert response.status_code == 201, response.text
    return response.json()["memory"]


def live_texts(client, user_id, **params):
    page = client.get("/v1/memories", params={"user_id": user_id, **params})
    assert page.status_code == 200, page.text
    return sorted(m["text"] for m in page.json()["memories"])


def count(pool, sql, *params):
    with pool.connection() as conn:
        return conn.execute(sql, params).fetchone()[0]


def pool_rows(pool, sql, *params):
    with pool.connection() as conn:
        return conn.execute(sql, params).fetchall()


def test_delete_by_query_without_project_touches_global_memories_only(client, ids):
    user = ids["user_id"]
    glob = write(client, user, "User prefers dark mode in every editor", entity_name="theme")
    write(client, user, "Project builds run in dark mode dashboards", "project", project_id="P")
    write(client, user, "User prefers tabs", entity_name="indent")

    answer = client.post("/v1/memories:delete", json={"user_id": user, "query": "dark mode"})
    assert answer.status_code == 200, answer.text
    deleted = answer.json()["deleted"]
    assert [(m["id"], m["scope"]) for m in deleted] == [(glob["id"], "global")]
    assert deleted[0]["deleted_at"] is not None
    assert live_texts(client, user, scope="global") == ["User prefers tabs"]
    assert live_texts(client, user, project_id="P") == [
        "Project builds run in dark mode dashboards"
    ]
    detail = client.get(f"/v1/memories/{glob['id']}", params={"user_id": user}).json()
    assert [r["action"] for r in detail["revisions"]] == ["CREATED", "DELETED"]


def test_delete_by_query_with_project_touches_that_project_only(client, ids):
    user = ids["user_id"]
    write(client, user, "User prefers dark mode in every editor", entity_name="theme")
    p = write(client, user, "Project P dashboards use dark mode", "project", project_id="P")
    write(client, user, "Project Q dashboards use dark mode", "project", project_id="Q")

    body = {"user_id": user, "project_id": "P", "query": "dark mode dashboards"}
    answer = client.post("/v1/memories:delete", json=body)
    assert [m["id"] for m in answer.json()["deleted"]] == [p["id"]]
    assert live_texts(client, user) == [
        "Project Q dashboards use dark mode",
        "User prefers dark mode in every editor",
    ]
    # Every word must match: a query sharing only some words deletes nothing.
    partial = {"user_id": user, "project_id": "Q", "query": "dark mode lighthouse"}
    assert client.post("/v1/memories:delete", json=partial).json() == {"deleted": []}
    empty = client.post("/v1/memories:delete", json={"user_id": user, "query": "  "})
    assert empty.status_code == 422
    assert empty.json()["error"]["fields"][0]["field"] == "query"


def test_deleting_a_project_removes_everything_of_it_and_nothing_else(
    client, extraction, pool, valkey_client, ids
):
    user = ids["user_id"]
    tea = write(client, user, "User prefers tea", entity_name="drink")
    fridays = write(
        client, user, "P deploys on Fridays", "project", project_id="P", entity_name="deploy"
    )
    write(client, user, "Q deploys on Mondays", "project", project_id="Q", entity_name="deploy")
    for memory in (tea, fridays):
        rated = {"user_id": user, "rating": "useful"}
        assert client.post(f"/v1/memories/{memory['id']}:feedback", json=rated).status_code == 200
    # An entity of the project (its memory's), and one of the user's own.
    write(client, user, "Priya Patel approves every deploy", "project", project_id="P")
    write(client, user, "Dana Lee likes tea", entity_name="dana")
    for n, project in enumerate(["P", "P", "Q"]):
        assert extraction.handle_turn(make_turn(ids, n, project_id=project), None) == "applied"
    rule = {"user_id": user, "project_id": "P", "tool_name": "sh", "pattern": "^ls"}
    assert client.post("/v1/permissions/rules", json=rule | {"action": "ALLOW"}).status_code == 201
    # Short-term memory: a session with a turn of P (and a grant), one of Q only.
    for session, project in (("s-p", "P"), ("s-q", "Q")):
        turn = {"user_id": user, "project_id": project, "user": f"on {project}", "assistant": "ok"}
        assert client.post(f"/v1/sessions/{session}/turns", json=turn).status_code == 202
    grant = {"user_id": user, "session_id": "s-p", "tool_name": "sh", "tool_args": {}}
    assert client.post("/v1/permissions/grants", json=grant).status_code == 201
    p_keys = list(valkey_client.scan_iter(match=f"am:{{{ids['app']}:{user}:s-p}}:*"))
    assert len(p_keys) == 5  # turns, data, seen, meta and the grant

    answer = client.delete(f"/v1/users/{user}/projects/P")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "user_id": user,
        "project_id": "P",
        "deleted": {
            "memory_revisions": 2,
            "memory_feedback": 1,
            "entities": 1,
            "memories": 2,
            "episodes": 2,
            "extraction_pending": 0,
            "permission_rules": 1,
            "valkey_keys": 5,
        },
        "deleted_at": None,
    }
    assert list(valkey_client.scan_iter(match=f"am:{{{ids['app']}:{user}:s-p}}:*")) == []
    view = client.get("/v1/sessions/s-q", params={"user_id": user}).json()
    assert [t["user"] for t in view["turns"]] == ["on Q"]
    assert live_texts(client, user) == [
        "Dana Lee likes tea",
        "Q deploys on Mondays",
        "User prefers tea",
    ]
    names = pool_rows(
        pool, "SELECT name FROM entities WHERE app = %s AND user_id = %s", ids["app"], user
    )
    assert names == [("Dana Lee",)]
    kept = pool_rows(pool, "SELECT memory_id::text FROM memory_feedback WHERE user_id = %s", user)
    assert kept == [(tea["id"],)]
    episodes = count(
        pool, "SELECT count(*) FROM episodes WHERE app = %s AND user_id = %s", ids["app"], user
    )
    assert episodes == 1
    bad = client.delete(f"/v1/users/{user}/projects/bad%07id")
    assert bad.status_code == 422
    assert bad.json()["error"]["fields"][0]["field"] == "project_id"


def test_deleting_a_user_removes_everything_and_late_events_create_nothing(
    client, extraction, pool, valkey_client, app_settings, ids
):
    user, app = ids["user_id"], ids["app"]
    tea = write(client, user, "User prefers tea", entity_name="drink")
    rated = {"user_id": user, "rating": "useful", "reason": "asked for tea"}
    assert client.post(f"/v1/memories/{tea['id']}:feedback", json=rated).status_code == 200
    write(client, user, "P deploys on Fridays", "project", project_id="P", entity_name="deploy")
    early = make_turn(ids, 1, user="Remember that my name is Ada.")
    assert extraction.handle_turn(early, None) == "applied"
    turn = {"user_id": user, "user": "hello", "assistant": "hi"}
    assert client.post(f"/v1/sessions/{ids['session_id']}/turns", json=turn).status_code == 202
    rule = {"user_id": user, "tool_name": "sh", "pattern": "^ls", "action": "ALLOW"}
    assert (
        client.post("/v1/permissions/rules", json=rule | {"project_id": "global"}).status_code
        == 201
    )
    grant = {"user_id": user, "session_id": ids["session_id"], "tool_name": "sh"}
    assert client.post("/v1/permissions/grants", json=grant | {"tool_args": {}}).status_code == 201
    generate = {"user_id": user, "events": [{"role": "user", "text": "I prefer green tea."}]}
    assert client.post("/v1/memories:generate", json=generate).status_code == 202
    other = write(client, f"{user}-other", "Other user prefers coffee", entity_name="drink")
    keys_before = list(valkey_client.scan_iter(match=user_keys_pattern(app, user)))
    assert len(keys_before) >= 5  # the session's keys and the grant

    answer = client.delete(f"/v1/users/{user}")
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["deleted"] == {
        "entities": 1,  # Ada
        "memory_revisions": 3,  # two written memories and one extracted
        "memory_feedback": 1,
        "memories": 3,
        "episodes": 1,
        "extraction_pending": 0,
        "extraction_flushes": 0,
        "permission_rules": 1,
        "operations": 1,
        "profile_revisions": 0,
        "profile_values": 0,
        "valkey_keys": len(keys_before),
    }
    deleted_at = datetime.fromisoformat(result["deleted_at"])
    assert list(valkey_client.scan_iter(match=user_keys_pattern(app, user))) == []
    for table in (
        "memories",
        "memory_revisions",
        "memory_feedback",
        "episodes",
        "permission_rules",
        "entities",
        "entity_aliases",
        "entity_mentions",
        "entity_facts",
    ):
        assert (
            count(pool, f"SELECT count(*) FROM {table} WHERE app=%s AND user_id=%s", app, user) == 0
        )
    assert (
        client.get(f"/v1/memories/{other['id']}", params={"user_id": f"{user}-other"}).status_code
        == 200
    )

    # A late event of the user (created before the deletion) creates nothing ...
    late = make_turn(ids, 2, created_at=deleted_at - timedelta(seconds=1))
    assert extraction.handle_turn(late, None) == "dropped"
    assert count(pool, "SELECT count(*) FROM episodes WHERE app=%s AND user_id=%s", app, user) == 0
    buffer = SessionBuffer(valkey_client, 3600)
    assert summary_handler(app_settings, buffer).first([(late, None)]) == ["dropped"]
    assert list(valkey_client.scan_iter(match=user_keys_pattern(app, user))) == []
    # ... nor does a client retrying an old turn through the API (410, nothing published) ...
    old = turn | {"turn_id": "old", "created_at": (deleted_at - timedelta(minutes=1)).isoformat()}
    refused = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=old)
    assert refused.status_code == 410, refused.text
    assert refused.json()["error"]["fields"][0]["field"] == "created_at"
    assert list(valkey_client.scan_iter(match=user_keys_pattern(app, user))) == []
    # ... while the user may come back: a new turn is a new start.
    assert client.post(f"/v1/sessions/{ids['session_id']}/turns", json=turn).status_code == 202
    key = SessionKey(app, user, ids["session_id"])
    assert [t.user for t in buffer.read(key).turns] == ["hello"]
    assert client.delete(f"/v1/users/{user}").status_code == 200  # deleting again is fine


def test_a_replayed_dead_letter_of_a_deleted_user_creates_nothing(
    client, extraction, pool, valkey_client, app_settings, publisher, ids
):
    """The GDPR case that matters: an event of the user dead-lettered before the
    deletion and replayed by an operator after it."""
    user, app = ids["user_id"], ids["app"]
    turn = make_turn(ids, 1, created_at=datetime.now(UTC), user="Remember that my name is Ada.")
    broken = {"on": True}

    def handler(event, delivery):
        if broken["on"]:
            raise ConnectionError("database is down")
        return extraction.handle_turn(event, delivery)

    recorder = Recorder()
    table = {TurnRecorded: recorder.wrap(handler)}
    with running(app_settings, "turns-extraction", table, publisher):
        publisher.publish(turn).result(timeout=10)
        queues = DeadLetterQueues(app_settings)
        wait_for(lambda: len(queues.peek("turns-extraction")) == 1, 120, "the dead letter")

        assert client.delete(f"/v1/users/{user}").status_code == 200
        broken["on"] = False
        replay = run_cli(app_settings, "dlq", "replay", "turns-extraction")
        assert replay.returncode == 0, replay.stderr
        assert replay.stdout.strip().splitlines()[-1] == "replayed 1, skipped 0, failed 0"
        wait_for(lambda: "dropped" in recorder.outcomes("turn-0001"), 60, "the replayed event")

    assert count(pool, "SELECT count(*) FROM episodes WHERE app=%s AND user_id=%s", app, user) == 0
    assert count(pool, "SELECT count(*) FROM memories WHERE app=%s AND user_id=%s", app, user) == 0
    ledger = "SELECT count(*) FROM processed_events WHERE consumer = %s AND event_id = %s"
    assert count(pool, ledger, TURNS_SUBSCRIPTION, turn.event_id) == 1
    # The summary path drops its copy too (the turns topic feeds both subscriptions);
    # the replay was for turns-extraction only, so turns-summary skips that one.
    buffer = SessionBuffer(valkey_client, 3600)
    summary = Recorder()
    with running(
        app_settings,
        "turns-summary",
        {TurnRecorded: summary.wrap(summary_handler(app_settings, buffer))},
        publisher,
    ):
        wait_for(lambda: summary.outcomes("turn-0001") == ["dropped"], 60, "the original copy")
        stays(lambda: summary.outcomes("turn-0001") == ["dropped"], 3, "one copy handled")
    assert list(valkey_client.scan_iter(match=user_keys_pattern(app, user))) == []
