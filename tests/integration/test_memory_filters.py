"""Filter expressions against the real API and Postgres: the same filter on the
listing, the search, the context and a delete by query admits exactly the
memories it describes, and a bad one is a 422 naming its part."""

from __future__ import annotations

import json

import pytest

from shared.client import MemoryClient
from tests.support import serve_api

MEMORIES = [
    # text, kind, metadata
    ("Alice leads the infra team", "fact", {"team": "infra", "level": 3, "tags": ["lead"]}),
    ("Bob joined the infra team in May", "fact", {"team": "infra", "level": 1}),
    ("Carol prefers the web team's standup at nine", "preference", {"team": "web", "level": 2}),
    ("Dave has no team yet", "fact", {}),
    ("Never deploy the infra stack on Fridays", "rule", {"team": "infra", "source": "wiki"}),
]


@pytest.fixture
def written(client, ids) -> dict[str, str]:
    """The memories above, by their first word."""
    by_name = {}
    for text, kind, metadata in MEMORIES:
        body = {
            "user_id": ids["user_id"],
            "text": text,
            "kind": kind,
            "scope": "global",
            "metadata": metadata,
            "consolidate": False,
        }
        answer = client.post("/v1/memories", json=body)
        assert answer.status_code == 201, answer.text
        by_name[text.split()[0]] = answer.json()["memory"]["id"]
    return by_name


def _listed(client, ids, expression) -> list[str]:
    params = {"user_id": ids["user_id"], "filter": json.dumps(expression)}
    answer = client.get("/v1/memories", params=params)
    assert answer.status_code == 200, answer.text
    return [m["text"].split()[0] for m in answer.json()["memories"]]


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ({"metadata.team": "infra"}, ["Alice", "Bob", "Never"]),
        ({"metadata.team": {"in": ["web", "infra"]}}, ["Alice", "Bob", "Carol", "Never"]),
        ({"metadata.team": {"ne": "infra"}}, ["Carol", "Dave"]),
        ({"metadata.level": {"gte": 2}}, ["Alice", "Carol"]),
        ({"metadata.level": {"gt": 1, "lt": 3}}, ["Carol"]),
        ({"metadata.level": {"gt": "1"}}, []),  # a string is never a number's peer
        ({"metadata.team": {"exists": False}}, ["Dave"]),
        ({"metadata.tags": {"exists": True}}, ["Alice"]),
        ({"metadata.tags": {"eq": "lead"}}, []),  # equality is of the whole value
        ({"metadata.tags": {"gte": "lead"}}, []),  # nor is an array a string's peer
        ({"metadata.team": {"gte": "infra", "lt": "j"}}, ["Alice", "Bob", "Never"]),
        ({"kind": {"in": ["rule", "preference"]}}, ["Carol", "Never"]),
        ({"and": [{"metadata.team": "infra"}, {"not": {"kind": "rule"}}]}, ["Alice", "Bob"]),
        ({"or": [{"metadata.level": 1}, {"metadata.source": "wiki"}]}, ["Bob", "Never"]),
        ({"metadata.team": "infra", "metadata.level": {"lte": 1}}, ["Bob"]),
        ({"topic": {"exists": True}}, []),
        ({"created_at": {"gte": "2000-01-01T00:00:00Z"}, "kind": "preference"}, ["Carol"]),
        ({"created_at": {"lt": "2000-01-01T00:00:00Z"}}, []),
        ({"metadata.team": "'; DROP TABLE memories; --"}, []),
        # Not a range admits the memories the range does not: those without the key too.
        ({"not": {"metadata.level": {"gte": 2}}}, ["Bob", "Dave", "Never"]),
        ({"metadata.level": {"gt": -0.5, "lte": 1.0}}, ["Bob"]),
        # A value in a range is a quoted literal of the bound JSON path, whatever it holds.
        ({"metadata.team": {"lt": 'web" || true || "\\'}}, ["Alice", "Bob", "Carol", "Never"]),
        ({"metadata.team": {"gt": 'web" || true || "\\'}}, []),
    ],
)
def test_a_filter_lists_exactly_what_it_describes(client, ids, written, expression, names):
    assert _listed(client, ids, expression) == names


def test_the_search_the_context_and_a_delete_take_the_same_filter(client, ids, written):
    user, infra = ids["user_id"], {"metadata.team": "infra"}
    found = client.post(
        "/v1/memories:search",
        json={"user_id": user, "query": "who is on which team", "k": 10, "filter": infra},
    )
    assert found.status_code == 200, found.text
    assert sorted(m["text"].split()[0] for m in found.json()["memories"]) == [
        "Alice",
        "Bob",
        "Never",
    ]
    body = {"user_id": user, "session_id": ids["session_id"], "query": "who is on which team"}
    context = client.post("/v1/context", json={**body, "filter": {"metadata.team": "web"}})
    assert context.status_code == 200, context.text
    built = context.json()
    assert [m["text"] for m in built["memories"]] == [MEMORIES[2][0]]
    assert built["pinned_rules"] == []  # the rule is infra's
    deleted = client.post(
        "/v1/memories:delete",
        json={"user_id": user, "query": "team", "filter": {"metadata.level": {"lt": 3}}},
    )
    assert deleted.status_code == 200, deleted.text
    assert sorted(m["text"].split()[0] for m in deleted.json()["deleted"]) == ["Bob", "Carol"]
    assert _listed(client, ids, {"metadata.team": {"exists": True}}) == ["Alice", "Never"]


DEEP: dict = {"metadata.team": "x"}
for _ in range(4):
    DEEP = {"not": DEEP}


@pytest.mark.parametrize(
    ("expression", "field", "message"),
    [
        ({}, "filter", "at least one key"),
        ({"colour": "red"}, "filter", "'colour' is not a field a filter knows"),
        ({"kind": {"gt": "fact"}}, "filter.kind.gt", "kind takes eq, ne, in, exists"),
        ({"created_at": {"gt": "yesterday"}}, "filter.created_at.gt", "RFC 3339"),
        (
            {"and": [{"kind": "fact"}, {"metadata.x": {"in": []}}]},
            "filter.and[1].metadata.x.in",
            "1 to 100",
        ),
        ({"or": {"kind": "fact"}}, "filter.or", "a list of 1 to 20"),
        ({"not": {"metadata.bad key": 1}}, "filter.not", "'metadata.bad key': a metadata key"),
        ({"metadata.a": {"eq": [1]}}, "filter.metadata.a.eq", "a string, a number"),
        ({"metadata.a": {"exists": "yes"}}, "filter.metadata.a.exists", "true or false"),
        (DEEP, "filter.not.not.not.not", "nested more than 4 filters deep"),
        (
            {"or": [{"metadata.n": i} for i in range(20)] + []}
            | {"and": [{"metadata.m": i} for i in range(13)]},
            "filter.and[12].metadata.m",
            "more than 32 conditions",
        ),
    ],
)
def test_a_bad_filter_is_a_422_naming_the_part(client, ids, expression, field, message):
    user = ids["user_id"]
    answers = [
        client.post(
            "/v1/memories:search", json={"user_id": user, "query": "q", "filter": expression}
        ),
        client.get("/v1/memories", params={"user_id": user, "filter": json.dumps(expression)}),
    ]
    for answer in answers:
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert [f["field"] for f in error["fields"]] == [field], answer.text
        assert message in error["message"], answer.text


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("{kind", "filter", "is not JSON"),
        ("NaN", "filter", "is not JSON"),
        ("[" * 1100 + "]" * 1100, "filter", "nests too deep"),
        ("[" * 5000, "filter", "nests too deep"),
        ('{"metadata.a": "\\ud800"}', "filter.metadata.a", "must be valid Unicode"),
        ('{"metadata.a": {"in": ["\\ud800"]}}', "filter.metadata.a.in[0]", "must be valid Unicode"),
        ('{"metadata.a": {"gt": "\\udfff"}}', "filter.metadata.a.gt", "must be valid Unicode"),
    ],
)
def test_a_filter_query_parameter_that_is_no_filters_json_is_a_422(
    client, ids, text, field, message
):
    answer = client.get("/v1/memories", params={"user_id": ids["user_id"], "filter": text})
    assert answer.status_code == 422, answer.text
    (named,) = answer.json()["error"]["fields"]
    assert named["field"] == field
    assert named["message"].startswith(message), named
    assert answer.json()["error"]["message"] == f"{field}: {named['message']}"


def test_the_client_passes_a_filter_to_every_read_and_delete(app_settings, topology, ids):
    user, infra = ids["user_id"], {"metadata.team": "infra"}
    with serve_api(app_settings) as url, MemoryClient(url) as client:
        for text, kind, metadata in MEMORIES:
            client.write_memory(user, text, kind=kind, metadata=metadata, consolidate=False)
        listed = [m.text.split()[0] for m in client.iter_memories(user, limit=2, filter=infra)]
        assert listed == ["Alice", "Bob", "Never"]
        found = client.search(user, "team", filter={"metadata.level": {"gte": 3}})
        assert [m.text.split()[0] for m in found] == ["Alice"]
        built = client.context(user, ids["session_id"], "team", filter={"kind": "rule"})
        assert [r.text for r in built.pinned_rules] == [MEMORIES[4][0]]
        assert built.memories == []
        gone = client.delete_memories(user, "team", filter={"metadata.team": "web"})
        assert [m.text.split()[0] for m in gone] == ["Carol"]
