"""A custom method's path (`/v1/memories/{id}:rollback`) is that method's alone:
another method there is a 405 whose `Allow` names exactly the route's methods,
and an id that itself ends in `:verb` is reached with its colon encoded, as the
client sends it (services.api.custom_methods)."""

from __future__ import annotations

import re

import pytest

from shared.client.request import segment

MEMORY = "00000000-0000-4000-8000-000000000001"


def _allow(answer) -> list[str]:
    assert answer.status_code == 405, answer.text
    return sorted(m.strip() for m in answer.headers["allow"].split(","))


def test_every_path_s_allow_names_exactly_its_route_s_methods(client):
    document = client.get("/openapi.json").json()
    checked = 0
    for template, operations in document["paths"].items():
        if not template.startswith("/v1/"):
            continue
        path = re.sub(r"\{[^}]+\}", "x", template)
        assert _allow(client.options(path)) == sorted(m.upper() for m in operations), template
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", f"/v1/memories/{MEMORY}:rollback", ["POST"]),
        ("DELETE", f"/v1/memories/{MEMORY}:rollback", ["POST"]),
        ("GET", "/v1/sessions/s-1:flush", ["POST"]),
        ("GET", "/v1/users/u/profile:rollback", ["POST"]),
        ("PATCH", "/v1/users/u/profile:rollback", ["POST"]),
        ("DELETE", "/v1/users/u:import", ["POST"]),
        ("DELETE", "/v1/users/u:export", ["GET"]),
        ("PUT", "/v1/users/u", ["DELETE"]),
    ],
)
def test_another_method_on_a_custom_method_s_path_is_a_405(client, method, path, allow):
    answer = client.request(method, path, params={"user_id": "u"})
    assert _allow(answer) == allow
    assert answer.json()["error"]["code"] == "http_error"


def test_an_id_that_ends_like_a_custom_method_is_reached_with_its_colon_encoded(client):
    for user in ("u:import", "u:export"):
        body = {"user_id": user, "kind": "fact", "scope": "global", "text": f"Of {user}."}
        assert client.post("/v1/memories", json=body).status_code == 201
    sessions = client.post(
        "/v1/sessions/s%3Aflush/turns",
        json={"user_id": "u:import", "user": "Hi.", "assistant": "Hello."},
    )
    assert sessions.status_code == 202, sessions.text
    read = client.get("/v1/sessions/s%3Aflush", params={"user_id": "u:import"})
    assert read.status_code == 200 and read.json()["session_id"] == "s:flush", read.text
    exported = client.get("/v1/users/u%3Aimport:export")
    assert exported.status_code == 200, exported.text
    assert '"user_id": "u:import"' in exported.text or '"user_id":"u:import"' in exported.text
    # The client encodes every id: deleting user `u:export` is not an export of `u`.
    deleted = client.delete(f"/v1/users/{segment('u:export')}")
    assert deleted.status_code == 200, deleted.text
    assert (deleted.json()["user_id"], deleted.json()["deleted"]["memories"]) == ("u:export", 1)
    listed = client.get("/v1/memories", params={"user_id": "u:import"})
    assert len(listed.json()["memories"]) == 1  # the other user is untouched
