"""Text the API cannot store is refused on every route that takes text: a lone
UTF-16 surrogate anywhere in a JSON body is a 422 naming its field (it was a 500
where no model checked it), and a boolean is only JSON's true or false."""

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
