"""Inputs that once reached Postgres or the bus unchecked and answered 500: each
class of them, as an explicit case. Every one gets a 422 in the API's error shape
naming the field, and changes nothing."""

from __future__ import annotations

import pytest

EMOJI_TEXT = "😀" * 9000  # 9,000 characters: within a character limit, 36,000 bytes

CASES = [
    # NUL in a query, a memory's text or entity name, an operation's name
    ("POST", "/v1/memories:search", {"query": "a\x00b"}, "query"),
    ("POST", "/v1/archive:search", {"query": "a\x00b"}, "query"),
    ("POST", "/v1/memories:delete", {"query": "a\x00b"}, "query"),
    ("POST", "/v1/context", {"session_id": "s1", "query": "a\x00b"}, "query"),
    (
        "POST",
        "/v1/memories",
        {"text": "a\x00b", "kind": "fact", "scope": "global"},
        "text",
    ),
    (
        "POST",
        "/v1/memories",
        {"text": "ok", "kind": "fact", "scope": "global", "entity_name": "a\x00"},
        "entity_name",
    ),
    ("GET", "/v1/operations/generate-a%00b", None, "name"),
    # A nested field of memories:generate: too long, control characters, NUL
    (
        "POST",
        "/v1/memories:generate",
        {"events": [{"role": "user", "text": "hi"}], "scope": {"project_id": "p" * 300}},
        "scope.project_id",
    ),
    (
        "POST",
        "/v1/memories:generate",
        {"events": [{"role": "user", "text": "hi"}], "scope": {"session_id": "s\x01"}},
        "scope.session_id",
    ),
    (
        "POST",
        "/v1/memories:generate",
        {"events": [{"role": "user", "text": "a\x00"}]},
        "events[0].text",
    ),
    # Characters within the limit, UTF-8 bytes not
    (
        "POST",
        "/v1/memories:generate",
        {"events": [{"role": "user", "text": EMOJI_TEXT}]},
        "events[0].text",
    ),
    # A scope and ids that contradict each other (the table's constraints)
    (
        "POST",
        "/v1/memories",
        {"text": "x", "kind": "fact", "scope": "session", "session_id": "s", "project_id": "p"},
        "project_id",
    ),
    (
        "POST",
        "/v1/memories",
        {"text": "x", "kind": "fact", "scope": "project", "project_id": "p", "session_id": "s"},
        "session_id",
    ),
    # A timestamp at the edge of the representable range
    (
        "POST",
        "/v1/archive:search",
        {"query": "x", "after": "0001-01-01T00:00:00+14:00"},
        "after",
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), CASES)
def test_each_class_of_bad_input_is_a_422_naming_the_field(client, ids, method, path, body, field):
    user = ids["user_id"]
    if body is None:
        response = client.request(method, path, params={"user_id": user})
    else:
        response = client.request(method, path, json={"user_id": user, **body})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], [f["field"] for f in error["fields"]]) == ("invalid_request", [field])
    listed = client.get("/v1/memories", params={"user_id": user})
    assert listed.json()["memories"] == []  # nothing was written


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/sessions/s1"),
        ("DELETE", "/v1/sessions/s1"),
        ("GET", "/v1/memories"),
        ("POST", "/v1/context"),
        ("GET", "/v1/config/ttl"),
    ],
)
def test_a_query_parameter_a_route_does_not_take_is_a_422_naming_it(client, ids, method, path):
    """As a body field the route does not declare: what the document calls invalid
    is refused (the fuzzer sends such parameters), not silently ignored."""
    params = {"user_id": ids["user_id"], "limt": "5"}
    body = {"user_id": ids["user_id"], "session_id": "s1", "query": "tea"}
    answer = client.request(method, path, params=params, json=body if method == "POST" else None)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["fields"] == [{"field": "limt", "message": "is not a known query parameter"}]
    assert error["message"] == "limt: is not a known query parameter"
