"""Text the API cannot store is refused on every route that takes text: a lone
UTF-16 surrogate anywhere in a JSON body is a 422 naming its field (it was a 500
where no model checked it). A boolean is only JSON's true or false, and an integer
only a JSON number without a fraction: no numeric string, in a body or a query."""

from __future__ import annotations

import json

import pytest

LONE = "\ud800"


def _post(client, method: str, path: str, body: dict):
    # json.dumps writes the lone surrogate as the escape "\ud800": valid JSON.
    return client.request(
        method, path, content=json.dumps(body), headers={"content-type": "application/json"}
    )


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/v1/memories", {"kind": "fact", "scope": "global", "text": f"a{LONE}"}, "text"),
        (
            "POST",
            "/v1/memories",
            {"kind": "fact", "scope": "global", "text": "a", "entity_name": LONE},
            "entity_name",
        ),
        ("POST", "/v1/memories:search", {"query": LONE}, "query"),
        ("POST", "/v1/archive:search", {"query": f"x {LONE}"}, "query"),
        ("POST", "/v1/context", {"session_id": "s", "query": LONE}, "query"),
        ("POST", "/v1/sessions/s1/turns", {"user": LONE, "assistant": "ok"}, "user"),
        (
            "POST",
            "/v1/sessions/s1/turns",
            {
                "user": "hi",
                "assistant": "ok",
                "tool_events": [{"name": "shell", "arguments": {"cmd": LONE}, "output": ""}],
            },
            "tool_events.0.arguments.cmd",
        ),
        (
            "POST",
            "/v1/permissions/rules",
            {"tool_name": "shell", "pattern": LONE, "action": "BLOCK"},
            "pattern",
        ),
        (
            "POST",
            "/v1/permissions:evaluate",
            {"session_id": "s", "tool_name": "shell", "tool_args": {LONE: 1}},
            "tool_args",
        ),
        (
            "PUT",
            "/v1/config/extraction",
            {"custom_topics": [{"name": "a", "description": LONE}]},
            "custom_topics.0.description",
        ),
    ],
)
def test_a_lone_surrogate_anywhere_is_a_422_naming_its_field(
    client, ids, method, path, body, field
):
    answer = _post(client, method, path, {"user_id": ids["user_id"], **body})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["fields"] == [
        {"field": field, "message": "must be valid Unicode (it contains a lone surrogate)"}
    ]
    assert error["code"] == "invalid_request"


def test_a_valid_pair_of_surrogates_is_text_like_any_other(client, ids):
    body = {
        "user_id": ids["user_id"],
        "kind": "fact",
        "scope": "global",
        "text": "Likes \U0001f600.",
    }
    written = _post(client, "POST", "/v1/memories", body)
    assert written.status_code == 201, written.text
    assert written.json()["memory"]["text"] == "Likes \U0001f600."


@pytest.mark.parametrize("value", [0, 1, "true", None])
def test_read_period_is_only_a_json_boolean(client, ids, value):
    body = {"user_id": ids["user_id"], "query": "Heron", "read_period": value}
    answer = client.post("/v1/archive:search", json=body)
    assert answer.status_code == 422, answer.text
    assert [f["field"] for f in answer.json()["error"]["fields"]] == ["read_period"]


MEMORY = {"kind": "fact", "scope": "global", "text": "Likes tea."}
GRANT = {"session_id": "s", "tool_name": "shell", "tool_args": {"command": "ls"}}
ROLLBACK = "/v1/memories/00000000-0000-4000-8000-000000000000:rollback"


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/v1/memories:search", {"query": "tea", "k": "5"}, "k"),
        ("POST", "/v1/archive:search", {"query": "tea", "context_turns": "1"}, "context_turns"),
        ("POST", "/v1/context", {"session_id": "s", "query": "tea", "k": "8"}, "k"),
        (
            "POST",
            "/v1/context",
            {"session_id": "s", "query": "tea", "token_budget": "2000"},
            "token_budget",
        ),
        ("POST", "/v1/memories", {**MEMORY, "ttl_seconds": "3600"}, "ttl_seconds"),
        ("POST", ROLLBACK, {"revision": "1"}, "revision"),
        ("POST", "/v1/permissions/grants", {**GRANT, "ttl_seconds": "60"}, "ttl_seconds"),
        ("POST", "/v1/compactions", {"retention_days": "30"}, "retention_days"),
        ("POST", "/v1/memories:search", {"query": "tea", "k": 5.5}, "k"),
        ("POST", "/v1/memories:search", {"query": "tea", "k": True}, "k"),
    ],
)
def test_an_integer_is_only_a_json_integer(client, ids, method, path, body, field):
    answer = _post(client, method, path, {"user_id": ids["user_id"], **body})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["fields"] == [
        {"field": field, "message": "Input should be a valid integer"}
    ]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"default": "3600"}, "default"),
        ({"scopes": {"session": {"create": "60"}}}, "scopes.session.create"),
    ],
)
def test_an_app_ttl_is_only_a_json_integer(client, body, field):
    answer = _post(client, "PUT", "/v1/config/ttl", body)
    assert answer.status_code == 422, answer.text
    assert [f["field"] for f in answer.json()["error"]["fields"]] == [field]


def test_an_integer_may_be_written_with_a_zero_fraction(client, ids):
    # JSON Schema's integer: 5.0 is one.
    body = {"user_id": ids["user_id"], "query": "tea", "k": 5.0}
    assert client.post("/v1/memories:search", json=body).status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/memories:search", {"query": "tea"}, "decompose"),
        ("/v1/archive:search", {"query": "tea"}, "read_period"),
        ("/v1/memories", MEMORY, "consolidate"),
        ("/v1/memories:generate", {"events": [{"role": "user", "text": "hi"}]}, "wait"),
    ],
)
@pytest.mark.parametrize("value", [1, "true"])
def test_a_boolean_is_only_a_json_boolean(client, ids, path, body, field, value):
    answer = _post(client, "POST", path, {"user_id": ids["user_id"], **body, field: value})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["fields"] == [
        {"field": field, "message": "Input should be a valid boolean"}
    ]


@pytest.mark.parametrize("limit", ["5.0", " 5", "5_0", "+5", "five"])
def test_a_query_integer_is_its_decimal_digits(client, ids, limit):
    answer = client.get("/v1/memories", params={"user_id": ids["user_id"], "limit": limit})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["fields"] == [{"field": "limit", "message": "must be an integer"}]
    listed = client.get("/v1/memories", params={"user_id": ids["user_id"], "limit": "5"})
    assert listed.status_code == 200, listed.text
