"""Tenant authentication on the real API: keys in Postgres, one app per key, the
app scoping every route (a key of another app finds nothing, never a 403)."""

import re
import uuid

import psycopg
import pytest
import structlog.testing
from fastapi.testclient import TestClient

from services.api.app import create_app
from shared.api_keys import create_key, list_keys, revoke_key
from tests.support import run_cli


@pytest.fixture
def auth_settings(settings):
    return settings.model_copy(update={"auth_disabled": False, "auth_cache_seconds": 0})


@pytest.fixture
def keys(stack, ids):
    """A key of app A, an admin key of app A, a key of app B."""
    other = f"{ids['app']}-b"
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        a, a_record = create_key(conn, ids["app"])
        admin, _ = create_key(conn, ids["app"], admin=True)
        b, _ = create_key(conn, other)
    return {"a": a, "a_id": a_record.id, "admin": admin, "b": b}


@pytest.fixture
def api(auth_settings, topology):
    with TestClient(create_app(auth_settings), raise_server_exceptions=False) as client:
        yield client


def bearer(key):
    return {"Authorization": f"Bearer {key}"}


def test_every_v1_route_refuses_a_request_without_a_key(api):
    routes = [
        (method, route.path)
        for route in api.app.routes
        if getattr(route, "path", "").startswith("/v1/")
        for method in route.methods
    ]
    assert len(routes) >= 20
    for method, path in routes:
        answer = api.request(method, re.sub(r"\{[^}]+\}", "x", path))
        assert answer.status_code == 401, (method, path, answer.text)
        assert answer.json()["error"]["code"] == "unauthenticated"


def test_a_key_must_be_valid(api, keys, ids):
    path = f"/v1/memories?user_id={ids['user_id']}"
    missing = api.get(path)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["message"].startswith("missing API key")
    assert api.get(path, headers={"Authorization": "Basic abc"}).status_code == 401
    wrong = api.get(path, headers=bearer("am_" + "x" * 43))
    assert wrong.status_code == 401
    assert wrong.json()["error"] == {
        "code": "unauthenticated",
        "message": "invalid or revoked API key",
        "request_id": wrong.headers["x-request-id"],
    }
    assert api.get(path, headers=bearer(keys["a"])).status_code == 200
    # Health checks stay open (load balancers and `up` call them without a key).
    assert api.get("/healthz").status_code == 200


def test_a_revoked_key_is_refused(api, keys, ids, stack):
    path = f"/v1/memories?user_id={ids['user_id']}"
    assert api.get(path, headers=bearer(keys["a"])).status_code == 200
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        assert revoke_key(conn, keys["a_id"]) is True
        assert revoke_key(conn, keys["a_id"]) is False  # already revoked
        listed = {k.id: k for k in list_keys(conn, ids["app"])}
    assert listed[keys["a_id"]].revoked_at is not None
    assert listed[keys["a_id"]].prefix == keys["a"][:10]
    assert api.get(path, headers=bearer(keys["a"])).status_code == 401


def test_only_a_hash_of_the_key_is_stored(keys, stack):
    with psycopg.connect(stack.database_url) as conn:
        stored = conn.execute(
            "SELECT count(*) FROM api_keys WHERE key_hash::text LIKE %s OR prefix = %s",
            (f"%{keys['a'][10:]}%", keys["a"]),
        ).fetchone()[0]
    assert stored == 0


def test_the_body_never_chooses_the_app(api, keys, ids):
    body = {"user_id": ids["user_id"], "text": "user prefers tea", "scope": "global"}
    body |= {"kind": "preference", "app": "someone-else"}
    refused = api.post("/v1/memories", json=body, headers=bearer(keys["a"]))
    assert refused.status_code == 422
    assert refused.json()["error"]["fields"] == [
        {"field": "app", "message": "is not a known field"}
    ]


SECRET = "oolong7731"  # in A's data only, never in B's requests


def _seed(api, key, ids):
    """App A's data for the isolation checks: a memory, a rule, a session turn."""
    user = ids["user_id"]
    body = {
        "user_id": user,
        "text": f"user prefers {SECRET} green tea",
        "scope": "project",
        "kind": "preference",
        "project_id": "P",
        "entity_name": "drink",
    }
    written = api.post("/v1/memories", json=body, headers=bearer(key))
    assert written.status_code == 201, written.text
    rule = api.post(
        "/v1/permissions/rules",
        json={
            "user_id": user,
            "project_id": "P",
            "tool_name": "run_shell",
            "pattern": f"^ls|{SECRET}",
            "action": "ALLOW",
        },
        headers=bearer(key),
    )
    assert rule.status_code == 201, rule.text
    turn = {"user_id": user, "user": f"I prefer {SECRET} green tea", "assistant": "Noted."}
    recorded = api.post(f"/v1/sessions/{ids['session_id']}/turns", json=turn, headers=bearer(key))
    assert recorded.status_code == 202, recorded.text
    return written.json()["memory"]["id"], rule.json()["id"]


# Each case: (method, path template, body or None, the answer app B must get). B's
# key is valid, so B sees an app of its own where A's data does not exist.
CROSS_APP = [
    ("get", "/v1/memories?user_id={user}", None, (200, {"memories": [], "next_cursor": None})),
    ("get", "/v1/memories/{memory}?user_id={user}", None, (404, None)),
    ("delete", "/v1/memories/{memory}?user_id={user}", None, (404, None)),
    ("post", "/v1/memories:search", {"query": "green tea", "project_id": "P"}, (200, None)),
    ("post", "/v1/archive:search", {"query": "green tea", "project_id": "P"}, (200, None)),
    ("post", "/v1/memories:delete", {"query": "green tea", "project_id": "P"}, (200, None)),
    ("get", "/v1/sessions/{session}?user_id={user}", None, (200, None)),
    ("post", "/v1/context", {"session_id": "{session}", "query": "tea"}, (200, None)),
    ("get", "/v1/permissions/rules?user_id={user}", None, (200, None)),
    ("delete", "/v1/permissions/rules/{rule}?user_id={user}", None, (404, None)),
    (
        "post",
        "/v1/permissions:evaluate",
        {
            "session_id": "{session}",
            "project_id": "P",
            "tool_name": "run_shell",
            "tool_args": {"CommandLine": "ls -l"},
        },
        (200, None),
    ),
    ("delete", "/v1/users/{user}/projects/P", None, (200, None)),
    ("delete", "/v1/users/{user}", None, (200, None)),
    ("get", "/v1/operations/{memory}?user_id={user}", None, (404, None)),
    # Writes of B under the same user and session ids land in B's app only.
    ("delete", "/v1/sessions/{session}?user_id={user}", None, (200, None)),
    (
        "post",
        "/v1/sessions/{session}/turns",
        {"user": "B was here", "assistant": "ok"},
        (202, None),
    ),
    (
        "post",
        "/v1/memories",
        {
            "text": "user prefers coffee",
            "scope": "project",
            "kind": "preference",
            "project_id": "P",
            "entity_name": "drink",
        },
        (201, None),
    ),
    (
        "post",
        "/v1/permissions/rules",
        {"project_id": "P", "tool_name": "run_shell", "pattern": "^ls", "action": "BLOCK"},
        (201, None),
    ),
    (
        "post",
        "/v1/permissions/grants",
        {"session_id": "{session}", "tool_name": "run_shell", "tool_args": {"CommandLine": "rm x"}},
        (201, None),
    ),
    (
        "post",
        "/v1/memories:generate",
        {"events": [{"role": "user", "text": "I prefer coffee."}]},
        (202, None),
    ),
]


def _fill(value, names):
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("method", "path", "body", "expected"), CROSS_APP, ids=lambda v: str(v))
def test_a_key_of_another_app_finds_nothing(api, keys, ids, method, path, body, expected):
    memory_id, rule_id = _seed(api, keys["a"], ids)
    names = {
        "user": ids["user_id"],
        "memory": memory_id,
        "rule": rule_id,
        "session": ids["session_id"],
    }
    kwargs = {"headers": bearer(keys["b"])}
    if body is not None:
        kwargs["json"] = {"user_id": ids["user_id"], **_fill(body, names)}
    answer = api.request(method.upper(), _fill(path, names), **kwargs)
    status, exact = expected
    assert answer.status_code == status, answer.text
    data = answer.json()
    if exact is not None:
        assert data == exact
    # Whatever B did, B saw none of A's data ...
    text = answer.text
    assert SECRET not in text
    for own_id in (memory_id, rule_id):
        assert own_id in _fill(path, names) or own_id not in text
    if path.startswith("/v1/permissions:evaluate"):
        assert data["decision"] == "PENDING" and data["tier"] == "none"
    if "/v1/users/" in path:
        assert all(count == 0 for count in data["deleted"].values()), data
    if path == "/v1/memories:delete":
        assert data == {"deleted": []}
    # ... and A's data is all still there.
    a = bearer(keys["a"])
    got = api.get(f"/v1/memories/{memory_id}?user_id={ids['user_id']}", headers=a)
    assert got.status_code == 200 and got.json()["deleted_at"] is None
    assert got.json()["text"] == f"user prefers {SECRET} green tea"
    rules = api.get(f"/v1/permissions/rules?user_id={ids['user_id']}", headers=a).json()
    assert [r["id"] for r in rules["rules"]] == [rule_id]
    session = api.get(f"/v1/sessions/{ids['session_id']}?user_id={ids['user_id']}", headers=a)
    assert [t["user"] for t in session.json()["turns"]] == [f"I prefer {SECRET} green tea"]
    # B's grant is no grant for A: A's call in the same session still needs a human.
    call = {
        "user_id": ids["user_id"],
        "session_id": ids["session_id"],
        "project_id": "P",
        "tool_name": "run_shell",
        "tool_args": {"CommandLine": "rm x"},
    }
    verdict = api.post("/v1/permissions:evaluate", json=call, headers=a).json()
    assert (verdict["decision"], verdict["tier"]) == ("PENDING", "none")


def test_compaction_needs_an_admin_key(api, keys, ids):
    body = {"user_id": ids["user_id"], "retention_days": 7}
    refused = api.post("/v1/compactions", json=body, headers=bearer(keys["a"]))
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    accepted = api.post("/v1/compactions", json=body, headers=bearer(keys["admin"]))
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["retention_days"] == 7
    uuid.UUID(accepted.json()["event_id"])
    bad = api.post(
        "/v1/compactions",
        json={"user_id": ids["user_id"], "retention_days": 0},
        headers=bearer(keys["admin"]),
    )
    assert bad.status_code == 422
    assert bad.json()["error"]["fields"][0]["field"] == "retention_days"


def test_keys_command_creates_lists_and_revokes(settings, ids):
    app = f"{ids['app']}-cli"
    created = run_cli(settings, "keys", "create", "--app", app, "--name", "ci")
    assert created.returncode == 0, created.stderr
    lines = created.stdout.strip().splitlines()
    key = lines[-1]
    assert key.startswith("am_") and len(key) == 46
    key_id = lines[0].split()[2]
    listed = run_cli(settings, "keys", "list", "--app", app)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("\n") == 1
    assert key_id in listed.stdout and key[:10] in listed.stdout and key not in listed.stdout
    assert "active" in listed.stdout
    revoked = run_cli(settings, "keys", "revoke", key_id)
    assert revoked.returncode == 0 and revoked.stdout.strip() == f"revoked {key_id}"
    again = run_cli(settings, "keys", "revoke", key_id)
    assert again.returncode == 1 and "no active key" in again.stderr
    bad = run_cli(settings, "keys", "create", "--app", "bad\x07app")
    assert bad.returncode == 2 and "app: must not contain control characters" in bad.stderr
    # An empty agent is a mistake, not a key of the whole app: nothing is created.
    empty = run_cli(settings, "keys", "create", "--app", app, "--agent", "")
    assert empty.returncode == 2 and "agent: must not be empty" in empty.stderr, empty.stderr
    assert run_cli(settings, "keys", "list", "--app", app).stdout.count("\n") == 1


def test_disabled_authentication_is_loud(settings, topology):
    assert settings.auth_disabled is True  # what the tests of other features run with
    with (
        structlog.testing.capture_logs() as logs,
        TestClient(create_app(settings), raise_server_exceptions=False) as client,
    ):
        assert client.get("/v1/memories?user_id=u").status_code == 200
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [e["event"].split(" (")[0] for e in warnings] == ["authentication is disabled"]
