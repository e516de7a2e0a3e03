"""What the profile routes answer, against the real API and Postgres: a refusal
names the path the caller wrote (never a member of a union pydantic tried) with a
plain message, in the API and in an import's report; a `PATCH` and a rollback
answer the fields in the schema's order, as a `GET` does; and the history is
oldest first on the user and on a copy imported from an export alike."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_profiles import SCHEMA

SCALAR = "must be a string, a number, true or false, or null"
NUL_PATTERN = "String should match pattern '^[^\\u0000]*$'"


@pytest.fixture
def profiled(client):
    assert client.put("/v1/config/profile", json=SCHEMA).status_code == 200
    return client


def _fields(answer) -> list[dict[str, str]]:
    assert answer.status_code == 422, answer.text
    return answer.json()["error"]["fields"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["Ada"], SCALAR),
        ({"float": 1}, SCALAR),
        ("Ada\u0000", NUL_PATTERN),
        ("x" * 201, "String should have at most 200 characters"),
        # Too long for a string; not read as a number instead.
        ("1" * 201, "String should have at most 200 characters"),
    ],
)
def test_a_bad_value_is_named_by_its_field_once(profiled, ids, value, message):
    answer = profiled.patch(f"/v1/users/{ids['user_id']}/profile", json={"values": {"name": value}})
    assert _fields(answer) == [{"field": "values.name", "message": message}]
    assert answer.json()["error"]["message"] == f"values.name: {message}"


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        (
            {"name": "Name", "type": "string"},
            ("fields.0.name", "String should match pattern '^[a-z][a-z0-9_]{0,39}$'"),
        ),
        (
            {"name": "tier", "type": "enum", "values": []},
            ("fields.0.values", "List should have at least 1 item after validation, not 0"),
        ),
        (
            {"name": "tier", "type": "enum", "values": [7]},
            ("fields.0.values.0", "Input should be a valid string"),
        ),
        ({"name": "tier", "type": "enum"}, ("fields.0.values", "Field required")),
        (
            {"name": "born", "type": "date"},
            ("fields.0.type", "Input should be 'string', 'enum', 'number' or 'boolean'"),
        ),
        ({"name": "born"}, ("fields.0.type", "Field required")),
        ("born", ("fields.0", "must be an object: a field's name, type and description")),
        (
            {"name": "tier", "type": "enum", "values": ["x", "X"]},
            (
                "fields.0.values",
                "'x' and 'X' differ only in case (a value is matched whatever its case)",
            ),
        ),
        (
            {"name": "tier", "type": "enum", "values": ["x", "y", "x"]},
            ("fields.0.values", "each value once"),
        ),
        (
            {"name": "tier", "type": "string", "colour": "red"},
            ("fields.0.colour", "is not a known field"),
        ),
    ],
)
def test_a_bad_schema_field_is_named_by_its_path(client, field, expected):
    answer = client.put("/v1/config/profile", json={"fields": [field]})
    assert [(f["field"], f["message"]) for f in _fields(answer)] == [expected]
    assert client.get("/v1/config/profile").json() == {"fields": []}


def test_an_imported_line_names_the_bad_value_by_its_field(profiled, ids):
    user = ids["user_id"]
    profiled.patch(f"/v1/users/{user}/profile", json={"values": {"name": "Ada"}})
    exported = profiled.get(f"/v1/users/{user}:export").text.splitlines()
    line = next(json.loads(line) for line in exported if '"type" : "profile"' in line)
    revision = line["revisions"][0]
    bad = [
        {**line, "value": ["Ada"]},
        {**line, "value": "Ada\u0000"},
        {**line, "revisions": [{**revision, "previous": {"name": "Ada"}}]},
    ]
    body = "\n".join([exported[0], *(json.dumps(b) for b in bad), exported[-1]]) + "\n"
    answer = profiled.post(f"/v1/users/{user}-copy:import", content=body.encode())
    assert _fields(answer) == [
        {"field": "line 2", "message": f"value: {SCALAR}"},
        {"field": "line 3", "message": f"value: {NUL_PATTERN}"},
        {"field": "line 4", "message": f"revisions[0].previous: {SCALAR}"},
    ]


def test_a_patch_and_a_rollback_answer_in_the_schemas_order(profiled, ids):
    user = ids["user_id"]
    names = [f["name"] for f in SCHEMA["fields"]]
    assert names != sorted(names)  # else the test would not tell the orders apart
    every = {"name": "Ada", "timezone": "CET", "preferred_language": "French"}
    every |= {"role": "SRE", "team_size": 3, "on_call": False}
    # Given in the reverse of the schema's order.
    patched = profiled.patch(
        f"/v1/users/{user}/profile", json={"values": dict(reversed(every.items()))}
    )
    assert patched.status_code == 200, patched.text
    assert list(patched.json()["values"]) == names
    assert [f["name"] for f in patched.json()["fields"]] == names
    assert profiled.get(f"/v1/users/{user}/profile").json() == patched.json()
    profiled.patch(f"/v1/users/{user}/profile", json={"values": {"role": "lead"}})
    back = profiled.post(
        f"/v1/users/{user}/profile:rollback", json={"field": "role", "revision": 1}
    )
    assert back.status_code == 200, back.text
    assert list(back.json()["values"]) == names
    assert [f["name"] for f in back.json()["fields"]] == names


def test_the_history_is_oldest_first_on_the_user_and_on_its_imported_copy(profiled, ids):
    user, copy = ids["user_id"], ids["user_id"] + "-copy"
    for values in (
        {"timezone": "CET"},
        {"name": "Ada"},
        {"timezone": "UTC"},
        {"role": "SRE", "name": "Grace"},  # one instant: by field, then in order
        {"name": None},
    ):
        answer = profiled.patch(f"/v1/users/{user}/profile", json={"values": values})
        assert answer.status_code == 200, answer.text
    keys = ("field", "revision", "action", "value", "created_at")
    expected = [
        ("timezone", 1, "SET", "CET"),
        ("name", 1, "SET", "Ada"),
        ("timezone", 2, "SET", "UTC"),
        ("name", 2, "SET", "Grace"),
        ("role", 1, "SET", "SRE"),
        ("name", 3, "CLEARED", None),
    ]

    def history(who: str) -> list[tuple]:
        revisions = profiled.get(f"/v1/users/{who}/profile/revisions").json()["revisions"]
        return [tuple(r[key] for key in keys) for r in revisions]

    assert [r[:4] for r in history(user)] == expected
    times = [r[4] for r in history(user)]
    assert times == sorted(times)
    exported = profiled.get(f"/v1/users/{user}:export")
    imported = profiled.post(f"/v1/users/{copy}:import", content=exported.content)
    assert imported.status_code == 200, imported.text
    # The export writes one field's history after another's; the answer is the same.
    assert history(copy) == history(user)
