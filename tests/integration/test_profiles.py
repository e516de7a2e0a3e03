"""Profiles against the real API, Postgres and the `offline` provider: an app's
schema set by its admin, a user's profile filled by the extraction (with
revisions, the late-event rule and change events), set and cleared by `PATCH`,
read without a search, carried by the context within its budget and caps, and
erased with the user."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from shared.db import outbox
from shared.events import format_time
from shared.memory.context_budget import piece
from shared.memory.context_text import TITLES
from shared.metrics import PROFILE_VALUES_REFUSED
from shared.tokens import estimate_tokens
from tests.bus_helpers import make_turn
from tests.support import wait_for

SCHEMA = {
    "fields": [
        {"name": "name", "type": "string", "description": "what to call them"},
        {"name": "timezone", "type": "string", "description": ""},
        {
            "name": "preferred_language",
            "type": "enum",
            "description": "",
            "values": ["English", "French", "German"],
        },
        {"name": "role", "type": "string", "description": ""},
        {"name": "team_size", "type": "number", "description": ""},
        {"name": "on_call", "type": "boolean", "description": ""},
    ]
}
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def profiled(client):
    assert client.put("/v1/config/profile", json=SCHEMA).status_code == 200
    return client


def _profile(client, user: str) -> dict:
    answer = client.get(f"/v1/users/{user}/profile")
    assert answer.status_code == 200, answer.text
    return answer.json()


def _revisions(
    client, user: str, keys=("field", "action", "value", "previous", "applied", "source")
) -> list[tuple]:
    answer = client.get(f"/v1/users/{user}/profile/revisions")
    assert answer.status_code == 200, answer.text
    return [tuple(r[key] for key in keys) for r in answer.json()["revisions"]]


def _change(body: dict) -> tuple[str, str, str, str, str]:
    return (body["change"], body["topic"], body["entity_name"], body["text"], body["previous_text"])


def _outbox(pool, app: str) -> list[tuple[str, str, str, str, str]]:
    """The profile's changes waiting in the outbox (the turns' memories have their
    own). For what the test's own extraction wrote: its pool's topic prefix is no
    API's, so no change relay publishes (and removes) them."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT body FROM memory_changes WHERE app = %s AND body->>'topic' = %s ORDER BY id",
            (app, outbox.PROFILE_TOPIC),
        ).fetchall()
    return [_change(body) for (body,) in rows]


def _published(webhook, app: str, count: int) -> list[tuple[str, str, str, str, str]]:
    """The profile's changes the API made, as a subscriber received them, once
    `count` have arrived (its change relay publishes a user's in their order)."""

    def received() -> list[dict]:
        return [e for e in webhook.of(app) if e["topic"] == outbox.PROFILE_TOPIC]

    wait_for(lambda: len(received()) >= count, 30, f"{count} profile changes published")
    return [_change(body) for body in received()]


def test_the_schema_is_the_admins_and_reads_back(client):
    assert client.get("/v1/config/profile").json() == {"fields": []}
    assert client.put("/v1/config/profile", json=SCHEMA).json() == SCHEMA
    assert client.get("/v1/config/profile").json() == SCHEMA
    twice = {"fields": [SCHEMA["fields"][0], SCHEMA["fields"][0]]}
    answer = client.put("/v1/config/profile", json=twice)
    assert answer.status_code == 422
    assert answer.json()["error"]["fields"] == [{"field": "fields", "message": "each name once"}]
    no_values = {"fields": [{"name": "tier", "type": "enum", "values": []}]}
    answer = client.put("/v1/config/profile", json=no_values)
    assert answer.status_code == 422
    assert answer.json()["error"]["fields"][0]["field"] == "fields.0.values"


def test_extraction_fills_the_profile_with_revisions_and_change_events(
    profiled, extraction, ids, pool
):
    user, app = ids["user_id"], ids["app"]
    said = [
        "Hi, my name is Ada Lovelace and I'm based in the Europe/Berlin timezone.",
        "I work as a data engineer at Acme. Please answer in French.",
        "My team size is twelve people.",  # not a number: refused, counted
        "Actually I'm in the America/New_York timezone now.",
    ]
    refused = PROFILE_VALUES_REFUSED.labels(app, "wrong_type")._value.get()
    for n, text in enumerate(said, start=1):
        extraction.handle_turn(make_turn(ids, n, user=text, assistant="Noted."), None)
    profile = _profile(profiled, user)
    assert profile["values"] == {
        "name": "Ada Lovelace",
        "timezone": "America/New_York",
        "preferred_language": "French",
        "role": "data engineer",
    }
    assert [f["name"] for f in profile["fields"]] == [
        "name",
        "timezone",
        "preferred_language",
        "role",
    ]
    assert {f["source"] for f in profile["fields"]} == {""}
    assert profile["fields"][1]["observed_at"] == format_time(T0 + timedelta(seconds=4))
    assert PROFILE_VALUES_REFUSED.labels(app, "wrong_type")._value.get() == refused + 1
    assert _revisions(profiled, user) == [
        ("name", "SET", "Ada Lovelace", None, True, ""),
        ("timezone", "SET", "Europe/Berlin", None, True, ""),
        ("preferred_language", "SET", "French", None, True, ""),
        ("role", "SET", "data engineer", None, True, ""),
        ("timezone", "SET", "America/New_York", "Europe/Berlin", True, ""),
    ]
    assert _outbox(pool, app) == [
        ("CREATED", "profile", "name", "Ada Lovelace", ""),
        ("CREATED", "profile", "timezone", "Europe/Berlin", ""),
        ("CREATED", "profile", "preferred_language", "French", ""),
        ("CREATED", "profile", "role", "data engineer", ""),
        ("UPDATED", "profile", "timezone", "America/New_York", "Europe/Berlin"),
    ]
    # A late turn (observed before the value it would replace) is history only.
    late = make_turn(ids, 2, turn_id="late", user="My timezone is Asia/Tokyo.", assistant="Ok.")
    extraction.handle_turn(late, None)
    assert _profile(profiled, user)["values"]["timezone"] == "America/New_York"
    assert _revisions(profiled, user)[-1] == (
        "timezone",
        "HISTORY",
        "Asia/Tokyo",
        "America/New_York",
        False,
        "",
    )
    assert len(_outbox(pool, app)) == 5


def test_patch_sets_and_clears_fields_all_or_nothing(profiled, webhook, ids):
    user = ids["user_id"]
    answer = profiled.patch(
        f"/v1/users/{user}/profile",
        json={"values": {"name": "Grace", "team_size": 7, "on_call": True}},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["values"] == {"name": "Grace", "team_size": 7, "on_call": True}
    assert {f["source"] for f in answer.json()["fields"]} == {"api"}
    for values, field, message in [
        ({"team_size": "7"}, "values.team_size", "must be a number"),
        ({"on_call": 1}, "values.on_call", "must be true or false"),
        ({"preferred_language": "Klingon"}, "values.preferred_language", "is not one of"),
        ({"name": "Ada", "shoe_size": 42}, "values.shoe_size", "has no field 'shoe_size'"),
    ]:
        refused = profiled.patch(f"/v1/users/{user}/profile", json={"values": values})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["fields"][0]["field"] == field
        assert message in error["fields"][0]["message"]
    # Nothing of a refused patch was written (the name stayed Grace).
    assert _profile(profiled, user)["values"]["name"] == "Grace"
    cleared = profiled.patch(f"/v1/users/{user}/profile", json={"values": {"on_call": None}})
    assert cleared.json()["values"] == {"name": "Grace", "team_size": 7}
    same = profiled.patch(f"/v1/users/{user}/profile", json={"values": {"name": "Grace"}})
    assert same.status_code == 200
    # The first three at one instant: by field.
    assert [r[:3] for r in _revisions(profiled, user)] == [
        ("name", "SET", "Grace"),
        ("on_call", "SET", True),
        ("team_size", "SET", 7),
        ("on_call", "CLEARED", None),
    ]
    # A change after them all: the user's changes arrive in order, so a change of
    # a refused patch or of the one that changed nothing would show before it.
    profiled.patch(f"/v1/users/{user}/profile", json={"values": {"role": "SRE"}})
    assert [c[:3] for c in _published(webhook, ids["app"], 5)] == [
        ("CREATED", "profile", "name"),
        ("CREATED", "profile", "team_size"),
        ("CREATED", "profile", "on_call"),
        ("DELETED", "profile", "on_call"),
        ("CREATED", "profile", "role"),
    ]


def test_a_change_from_false_is_an_update(profiled, webhook, ids):
    user = ids["user_id"]
    for value in (True, False, True):
        profiled.patch(f"/v1/users/{user}/profile", json={"values": {"on_call": value}})
    changes = _published(webhook, ids["app"], 3)
    assert [c[0] for c in changes] == ["CREATED", "UPDATED", "UPDATED"]


def test_a_schema_change_keeps_the_values_of_the_fields_it_still_names(profiled, ids):
    user = ids["user_id"]
    profiled.patch(f"/v1/users/{user}/profile", json={"values": {"name": "Lin", "role": "SRE"}})
    narrower = {"fields": [SCHEMA["fields"][3]]}
    assert profiled.put("/v1/config/profile", json=narrower).status_code == 200
    assert _profile(profiled, user)["values"] == {"role": "SRE"}
    assert profiled.put("/v1/config/profile", json=SCHEMA).status_code == 200
    assert _profile(profiled, user)["values"] == {"name": "Lin", "role": "SRE"}


def test_the_context_carries_the_profile_within_its_budget_and_caps(profiled, ids):
    user = ids["user_id"]
    values = {"name": "Ada", "timezone": "Europe/Berlin", "preferred_language": "French"}
    profiled.patch(f"/v1/users/{user}/profile", json={"values": values})
    body = {"user_id": user, "session_id": ids["session_id"], "query": "plan my week"}
    context = profiled.post("/v1/context", json=body).json()
    assert context["profile"] == values
    assert (
        "## The user's profile\n- name: Ada\n- timezone: Europe/Berlin\n"
        "- preferred language: French"
    ) in context["system_instruction"]
    assert context["tokens_by_section"]["profile"] > 0
    off = profiled.post("/v1/context", json={**body, "sections": {"profile": 0}}).json()
    assert off["profile"] == {} and "profile" not in off["system_instruction"]
    assert "profile" not in off["omitted"]
    # A cap that holds the heading and the name's line: the other two are omitted.
    one = estimate_tokens("\n\n" + TITLES["profile"]) + piece("- name: Ada")
    capped = profiled.post("/v1/context", json={**body, "sections": {"profile": one}}).json()
    assert capped["profile"] == {"name": "Ada"} and capped["omitted"]["profile"] == 2
    assert capped["tokens_by_section"]["profile"] == one


def test_deleting_the_user_erases_the_profile_and_announces_it(profiled, webhook, ids):
    user, app = ids["user_id"], ids["app"]
    profiled.patch(f"/v1/users/{user}/profile", json={"values": {"name": "Ada", "role": "CTO"}})
    deleted = profiled.delete(f"/v1/users/{user}")
    assert deleted.status_code == 200
    assert deleted.json()["deleted"]["profile_values"] == 2
    assert deleted.json()["deleted"]["profile_revisions"] == 2
    assert _profile(profiled, user)["values"] == {}
    assert _revisions(profiled, user) == []
    published = _published(webhook, app, 4)
    # (A change still waiting when the user was erased went out without its text.)
    assert [c[:3] for c in published[:2]] == [
        ("CREATED", "profile", "name"),
        ("CREATED", "profile", "role"),
    ]
    assert published[2:] == [
        ("DELETED", "profile", "name", "", ""),
        ("DELETED", "profile", "role", "", ""),
    ]
    # A field's changes name it by one id, made of the app, the user and the field.
    ids_of_name = {e["memory_id"] for e in webhook.of(app) if e["entity_name"] == "name"}
    assert ids_of_name == {outbox.profile_field_id(app, user, "name")}


def test_the_profile_is_exported_with_its_history_and_imported_once(profiled, ids):
    user, copy = ids["user_id"], ids["user_id"] + "-copy"
    profiled.patch(f"/v1/users/{user}/profile", json={"values": {"name": "Ada", "on_call": True}})
    profiled.patch(f"/v1/users/{user}/profile", json={"values": {"on_call": None}})
    exported = profiled.get(f"/v1/users/{user}:export")
    assert exported.status_code == 200
    lines = [json.loads(line) for line in exported.text.splitlines()]
    profile_lines = [line for line in lines if line.get("type") == "profile"]
    assert [(p["field"], p["value"], len(p["revisions"])) for p in profile_lines] == [
        ("name", "Ada", 1),
        ("on_call", None, 2),
    ]
    assert lines[-1] == {
        "type": "end",
        "memories": 0,
        "episodes": 0,
        "profiles": 2,
        "entities": 0,
        "facts": 0,
        "merges": 0,
    }
    headers = {"Content-Type": "application/x-ndjson"}
    imported = profiled.post(f"/v1/users/{copy}:import", content=exported.content, headers=headers)
    assert imported.status_code == 200, imported.text
    assert (imported.json()["profiles"], imported.json()["skipped"]) == (2, 0)
    assert _profile(profiled, copy)["values"] == {"name": "Ada"}
    assert _revisions(profiled, copy) == _revisions(profiled, user)
    again = profiled.post(f"/v1/users/{copy}:import", content=exported.content, headers=headers)
    assert (again.json()["profiles"], again.json()["skipped"]) == (0, 2)
    assert _revisions(profiled, copy) == _revisions(profiled, user)
