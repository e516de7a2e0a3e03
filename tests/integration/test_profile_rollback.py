"""Rolling a profile field back against the real API and Postgres: revision N's
value is current again as a new revision whose source is the caller, with the
change event a `PATCH` makes; each refusal is the status the API documents and
writes nothing; the write waits for the user's lock; and an export and import
keep the numbers a rollback names."""

from __future__ import annotations

import threading
from copy import deepcopy

import psycopg
import pytest

from shared.db import unit_of_work
from shared.db.user_lock import user_lock
from tests.integration.test_profiles import SCHEMA, _published, _revisions
from tests.support import wait_for


@pytest.fixture
def profiled(client):
    assert client.put("/v1/config/profile", json=SCHEMA).status_code == 200
    return client


def _patch(client, user: str, **values) -> None:
    answer = client.patch(f"/v1/users/{user}/profile", json={"values": values})
    assert answer.status_code == 200, answer.text


def _rollback(client, user: str, field: str, revision):
    body = {"field": field, "revision": revision}
    return client.post(f"/v1/users/{user}/profile:rollback", json=body)


def _history(client, user: str) -> list[tuple]:
    return _revisions(client, user, ("field", "revision", "action", "value", "previous", "source"))


def _refusal(answer) -> tuple[int, str, str, list[str]]:
    error = answer.json()["error"]
    fields = [f["field"] for f in error["fields"]]
    return answer.status_code, error["code"], error["message"], fields


def test_a_field_rolls_back_to_an_earlier_value_as_a_new_revision(profiled, webhook, ids):
    user = ids["user_id"]
    _patch(profiled, user, timezone="Europe/Berlin")
    _patch(profiled, user, name="Ada", timezone="America/New_York")
    rolled = _rollback(profiled, user, "timezone", 1)
    assert rolled.status_code == 200, rolled.text
    assert rolled.json()["values"] == {"name": "Ada", "timezone": "Europe/Berlin"}
    assert [(f["name"], f["source"]) for f in rolled.json()["fields"]] == [
        ("name", "api"),
        ("timezone", "api"),
    ]
    assert _history(profiled, user) == [
        ("timezone", 1, "SET", "Europe/Berlin", None, "api"),
        ("name", 1, "SET", "Ada", None, "api"),
        ("timezone", 2, "SET", "America/New_York", "Europe/Berlin", "api"),
        ("timezone", 3, "SET", "Europe/Berlin", "America/New_York", "api"),
    ]
    # The rollback is itself a revision, which a rollback undoes.
    again = _rollback(profiled, user, "timezone", 2)
    assert again.json()["values"]["timezone"] == "America/New_York"
    assert [(c[0], *c[2:]) for c in _published(webhook, ids["app"], 5)] == [
        ("CREATED", "timezone", "Europe/Berlin", ""),
        ("CREATED", "name", "Ada", ""),
        ("UPDATED", "timezone", "America/New_York", "Europe/Berlin"),
        ("UPDATED", "timezone", "Europe/Berlin", "America/New_York"),
        ("UPDATED", "timezone", "America/New_York", "Europe/Berlin"),
    ]


def test_a_cleared_revision_clears_and_a_false_one_is_a_value(profiled, webhook, ids):
    user = ids["user_id"]
    _patch(profiled, user, on_call=True)
    _patch(profiled, user, on_call=False)
    _patch(profiled, user, on_call=None)
    assert _rollback(profiled, user, "on_call", 2).json()["values"] == {"on_call": False}
    assert _rollback(profiled, user, "on_call", 3).json()["values"] == {}
    assert _rollback(profiled, user, "on_call", 1).json()["values"] == {"on_call": True}
    assert [r[1:4] for r in _history(profiled, user)] == [
        (1, "SET", True),
        (2, "SET", False),
        (3, "CLEARED", None),
        (4, "SET", False),
        (5, "CLEARED", None),
        (6, "SET", True),
    ]
    # A change from false is an update of a value, as a PATCH's is.
    _rollback(profiled, user, "on_call", 2)
    _rollback(profiled, user, "on_call", 1)
    changes = "CREATED UPDATED DELETED CREATED DELETED CREATED UPDATED UPDATED"
    assert [c[0] for c in _published(webhook, ids["app"], 8)] == changes.split()


def test_each_rollback_that_cannot_be_done_is_refused_and_writes_nothing(profiled, webhook, ids):
    user = ids["user_id"]
    _patch(profiled, user, timezone="CET", preferred_language="French")
    _patch(profiled, user, timezone="UTC", preferred_language="English")
    before, changes = _history(profiled, user), _published(webhook, ids["app"], 4)
    missing = "revision: no revision {} of field {!r} for this user: it has {}"
    current = "revision: revision 2's value of field 'timezone' is already current"
    for who, field, revision, status, message in [
        (user, "timezone", 3, 404, missing.format(3, "timezone", "revisions 1 to 2")),
        (user, "name", 1, 404, missing.format(1, "name", "none")),
        ("nobody-" + user, "timezone", 1, 404, missing.format(1, "timezone", "none")),
        (user, "shoe_size", 1, 404, "field: the app's profile schema has no field 'shoe_size'"),
        (user, "timezone", 2, 409, current),
    ]:
        code = "not_found" if status == 404 else "conflict"
        expected = (status, code, message, [message.split(":")[0]])
        assert _refusal(_rollback(profiled, who, field, revision)) == expected
    # The schema's enum no longer has French: that value cannot come back.
    narrower = deepcopy(SCHEMA)
    narrower["fields"][2]["values"] = ["English", "German"]
    assert profiled.put("/v1/config/profile", json=narrower).status_code == 200
    assert _refusal(_rollback(profiled, user, "preferred_language", 1)) == (
        409,
        "conflict",
        "revision: revision 1's value no longer fits field 'preferred_language': "
        "'French' is not one of English, German",
        ["revision"],
    )
    for body, field in [
        ({"field": "timezone", "revision": 0}, "revision"),
        ({"field": "timezone", "revision": "1"}, "revision"),
        ({"field": "Time-Zone", "revision": 1}, "field"),
        ({"revision": 1}, "field"),
        ({"field": "timezone", "revision": 1, "agent_id": "a"}, "agent_id"),
    ]:
        answer = profiled.post(f"/v1/users/{user}/profile:rollback", json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert [f["field"] for f in answer.json()["error"]["fields"]] == [field], body
    assert _history(profiled, user) == before
    # A change after them all: the user's changes arrive in order, so a change of
    # a refusal would show before it.
    _patch(profiled, user, name="Ada")
    assert _published(webhook, ids["app"], 5) == [
        *changes,
        ("CREATED", "profile", "name", "Ada", ""),
    ]


def test_the_rollback_waits_for_the_users_lock(profiled, ids, stack, monkeypatch):
    user, app = ids["user_id"], ids["app"]
    _patch(profiled, user, timezone="CET")
    _patch(profiled, user, timezone="UTC")
    before = _history(profiled, user)
    # No patience: the writer waits on the lock itself, where pg_locks shows it.
    monkeypatch.setattr(unit_of_work, "LOCK_PATIENCE_SECONDS", 0.0)
    answers = []
    with psycopg.connect(stack.database_url) as holder:
        user_lock(holder, app, user)  # another write of the user's, under way
        writer = threading.Thread(
            target=lambda: answers.append(_rollback(profiled, user, "timezone", 1))
        )
        writer.start()
        wait_for(
            lambda: _waiting_for_the_lock(stack.database_url, app, user),
            30,
            "the rollback to wait for the user's lock",
        )
        assert (answers, _history(profiled, user)) == ([], before)
        holder.commit()
    writer.join(timeout=30)
    assert [a.status_code for a in answers] == [200]
    assert _history(profiled, user)[-1] == ("timezone", 3, "SET", "CET", "UTC", "api")


def _waiting_for_the_lock(database_url: str, app: str, user: str) -> bool:
    with psycopg.connect(database_url, autocommit=True) as conn:
        (waiting,) = conn.execute(
            "WITH k AS (SELECT hashtextextended(%s, 0) AS key) "
            "SELECT count(*) FROM pg_locks, k WHERE locktype = 'advisory' AND NOT granted "
            "AND classid = ((key >> 32) & 4294967295)::oid AND objid = (key & 4294967295)::oid",
            (f"memories/{app}/{user}",),
        ).fetchone()
    return waiting == 1


def test_an_export_and_import_keep_the_numbers_a_rollback_names(profiled, ids):
    user, copy = ids["user_id"], ids["user_id"] + "-copy"
    _patch(profiled, user, timezone="CET")
    _patch(profiled, user, name="Ada")
    _patch(profiled, user, timezone="UTC")
    _rollback(profiled, user, "timezone", 1)
    exported = profiled.get(f"/v1/users/{user}:export")
    assert exported.status_code == 200
    headers = {"Content-Type": "application/x-ndjson"}
    imported = profiled.post(f"/v1/users/{copy}:import", content=exported.content, headers=headers)
    assert imported.status_code == 200, imported.text
    assert imported.json()["profiles"] == 2
    assert _history(profiled, copy) == _history(profiled, user)
    assert [r for r in _history(profiled, copy) if r[0] == "timezone"] == [
        ("timezone", 1, "SET", "CET", None, "api"),
        ("timezone", 2, "SET", "UTC", "CET", "api"),
        ("timezone", 3, "SET", "CET", "UTC", "api"),
    ]
    assert profiled.get(f"/v1/users/{copy}/profile").json()["values"] == {
        "name": "Ada",
        "timezone": "CET",
    }
    # The copy rolls back by the same numbers as the original.
    for who in (user, copy):
        assert _rollback(profiled, who, "timezone", 2).json()["values"]["timezone"] == "UTC"
    assert _history(profiled, copy)[-1] == _history(profiled, user)[-1]
