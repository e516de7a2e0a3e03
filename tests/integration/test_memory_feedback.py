"""Feedback on a memory through the real API (and the clients): each feedback
recorded with its caller, a caller's latest counting; `wrong` retires the memory as
a revision that a rollback undoes, and the turn it came from is not extracted into
it again; useful and not useful weigh it in the search within the configured bound."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import psycopg
import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.extraction_worker.handlers import TURNS_SUBSCRIPTION
from shared.api_keys import create_key
from shared.client import AsyncMemoryClient, MemoryClient
from shared.client.errors import ConflictError, InvalidRequestError, NotFoundError
from shared.events import utcnow
from tests.bus_helpers import make_turn
from tests.support import serve_api

UNKNOWN = "7a1b3c4d-0000-4000-8000-000000000000"


def _write(client, user: str, text: str, **fields) -> dict:
    body = {"user_id": user, "text": text, "scope": "global", "kind": "preference", **fields}
    answer = client.post("/v1/memories", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()["memory"]


def _feedback(client, user: str, memory_id: str, rating: str, **body):
    return client.post(
        f"/v1/memories/{memory_id}:feedback", json={"user_id": user, "rating": rating, **body}
    )


def _given(client, user: str, memory_id: str, rating: str, **body) -> dict:
    answer = _feedback(client, user, memory_id, rating, **body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _search(client, user: str, query: str) -> dict[str, float]:
    answer = client.post("/v1/memories:search", json={"user_id": user, "query": query, "k": 10})
    assert answer.status_code == 200, answer.text
    return {m["text"]: m["score"] for m in answer.json()["memories"]}


def _rows(database_url: str, memory_id: str) -> list[tuple]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT rating, reason, source, source_events::text[], restored_at IS NOT NULL "
            "FROM memory_feedback WHERE memory_id = %s ORDER BY id",
            (memory_id,),
        ).fetchall()


@pytest.fixture
def keyed(app_settings, topology, ids):
    """Clients of the test's app, each with an API key of its own: its callers."""
    with psycopg.connect(app_settings.database_url, autocommit=True) as conn:
        keys = [create_key(conn, ids["app"], name=f"caller-{n}") for n in range(5)]
    settings = app_settings.model_copy(update={"auth_disabled": False})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:

        def as_caller(n: int) -> TestClient:
            client.headers["Authorization"] = f"Bearer {keys[n][0]}"
            return client

        yield as_caller, [f"key:{record.id}" for _, record in keys]


def test_each_feedback_is_recorded_and_each_callers_latest_counts(keyed, app_settings, ids):
    as_caller, sources = keyed
    user = ids["user_id"]
    memory = _write(as_caller(0), user, "Prefers window seats.")
    _given(as_caller(0), user, memory["id"], "useful")
    latest = _given(as_caller(0), user, memory["id"], "not_useful", reason="aisle since March")
    assert latest["feedback"]["rating"] == "not_useful"
    assert latest["feedback"]["reason"] == "aisle since March"
    assert latest["feedback"]["source"] == sources[0]
    assert latest["tally"] == {"useful": 0, "not_useful": 1, "wrong": 0}
    other = _given(as_caller(1), user, memory["id"], "useful")
    assert other["tally"] == {"useful": 1, "not_useful": 1, "wrong": 0}
    # Useful and not useful leave the memory as it is.
    assert other["memory"]["deleted_at"] is None
    assert [r["action"] for r in other["memory"]["revisions"]] == ["CREATED"]
    assert _rows(app_settings.database_url, memory["id"]) == [
        ("useful", "", sources[0], [], False),
        ("not_useful", "aisle since March", sources[0], [], False),
        ("useful", "", sources[1], [], False),
    ]


def test_wrong_retires_the_memory_and_a_rollback_brings_it_back(client, app_settings, ids):
    user = ids["user_id"]
    memory = _write(client, user, "Works at Initech.", entity_name="employer")
    given = _given(client, user, memory["id"], "wrong", reason="never worked there")
    retired = given["memory"]
    assert retired["deleted_at"] is not None
    assert [(r["revision"], r["action"], r["source"]) for r in retired["revisions"]] == [
        (1, "CREATED", ""),
        (2, "DELETED", "api"),
    ]
    assert given["tally"] == {"useful": 0, "not_useful": 0, "wrong": 1}
    assert _search(client, user, "where does the user work") == {}
    # Feedback on a retired memory, of any rating, is a conflict and records nothing.
    for rating in ("wrong", "useful"):
        again = _feedback(client, user, memory["id"], rating)
        assert again.status_code == 409, again.text
        assert (
            again.json()["error"]["message"] == "the memory is deleted (a rollback brings it back)"
        )
    assert len(_rows(app_settings.database_url, memory["id"])) == 1

    back = client.post(
        f"/v1/memories/{memory['id']}:rollback", json={"user_id": user, "revision": 1}
    )
    assert back.status_code == 200, back.text
    restored = back.json()
    assert (restored["deleted_at"], restored["text"]) == (None, "Works at Initech.")
    assert [(r["action"], r["old_text"], r["new_text"]) for r in restored["revisions"]][-1] == (
        "UPDATED",
        "Works at Initech.",
        "Works at Initech.",
    )
    assert list(_search(client, user, "where does the user work")) == ["Works at Initech."]
    # The feedback stays recorded; its retirement is over.
    assert _rows(app_settings.database_url, memory["id"]) == [
        ("wrong", "never worked there", "api", [], True)
    ]
    # Retired again, it cannot come back over a newer memory of its entity.
    _given(client, user, memory["id"], "wrong")
    _write(client, user, "Works at Globex.", entity_name="employer")
    taken = client.post(
        f"/v1/memories/{memory['id']}:rollback", json={"user_id": user, "revision": 1}
    )
    assert taken.status_code == 409, taken.text
    assert taken.json()["error"]["fields"][0]["field"] == "entity_name"
    # The revision that retired it left no text to come back to.
    none = client.post(
        f"/v1/memories/{memory['id']}:rollback", json={"user_id": user, "revision": 4}
    )
    assert none.status_code == 422, none.text
    assert "revision 4 left no text" in none.json()["error"]["message"]


def test_a_memory_deleted_otherwise_is_not_rolled_back(client, ids):
    user = ids["user_id"]
    memory = _write(client, user, "Likes jazz.")
    assert (
        client.delete(f"/v1/memories/{memory['id']}", params={"user_id": user}).status_code == 200
    )
    answer = client.post(
        f"/v1/memories/{memory['id']}:rollback", json={"user_id": user, "revision": 1}
    )
    assert answer.status_code == 409, answer.text


def test_feedback_that_cannot_be_given_is_refused(client, ids):
    user = ids["user_id"]
    memory = _write(client, user, "Owns a bike.")
    for memory_id, who in ((UNKNOWN, user), ("not-a-uuid", user), (memory["id"], "someone-else")):
        answer = _feedback(client, who, memory_id, "useful")
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"rating": "great"}, "rating"),
        ({}, "rating"),
        ({"rating": "useful", "reason": "x" * 1001}, "reason"),
        ({"rating": "useful", "reason": "a\x00b"}, "reason"),
        ({"rating": "useful", "reason": 3}, "reason"),
        ({"rating": "useful", "extra": 1}, "extra"),
    ],
)
def test_a_bad_feedback_body_is_a_422_naming_the_field(client, ids, body, field):
    memory = _write(client, ids["user_id"], "Has a cat.")
    answer = client.post(
        f"/v1/memories/{memory['id']}:feedback", json={"user_id": ids["user_id"], **body}
    )
    assert answer.status_code == 422, answer.text
    assert [f["field"] for f in answer.json()["error"]["fields"]] == [field]


def test_feedback_weighs_a_memory_within_the_bound(keyed, ids):
    as_caller, _ = keyed
    user = ids["user_id"]
    query = "which tea does the user drink"
    _write(as_caller(0), user, "Drinks green tea every morning.", entity_name="tea")
    weaker = _write(as_caller(0), user, "Bought a tea kettle last year.", entity_name="kettle")
    before = _search(as_caller(0), user, query)
    strong, weak = before["Drinks green tea every morning."], before[weaker["text"]]
    assert strong > weak
    # One caller's useful: the balance 1 / 2, the score times 1 + 0.25 * 1/2.
    _given(as_caller(0), user, weaker["id"], "useful")
    assert _search(as_caller(0), user, query)[weaker["text"]] == pytest.approx(
        weak * 1.125, abs=2e-6
    )
    # Five callers' useful: 5 / 6, still short of the bound 1 + 0.25.
    for n in range(1, 5):
        _given(as_caller(n), user, weaker["id"], "useful")
    lifted = _search(as_caller(0), user, query)
    assert lifted[weaker["text"]] == pytest.approx(weak * (1 + 0.25 * 5 / 6), abs=2e-6)
    assert lifted["Drinks green tea every morning."] == strong
    # Each caller's latest counts: all five now find it not useful.
    for n in range(5):
        _given(as_caller(n), user, weaker["id"], "not_useful")
    lowered = _search(as_caller(0), user, query)[weaker["text"]]
    assert lowered == pytest.approx(weak * (1 - 0.25 * 5 / 6), abs=2e-6)


def test_a_weight_of_0_leaves_the_ranking_alone(app_settings, topology, ids):
    settings = app_settings.model_copy(update={"search_feedback_weight": 0.0})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        user = ids["user_id"]
        memory = _write(client, user, "Reads science fiction.")
        before = _search(client, user, "science fiction books")
        _given(client, user, memory["id"], "useful")
        assert _search(client, user, "science fiction books") == before


def _live(pool, ids) -> list[str]:
    with pool.connection() as conn:
        return [
            row[0]
            for row in conn.execute(
                "SELECT text FROM memories WHERE app = %s AND user_id = %s AND valid_to IS NULL "
                "ORDER BY text",
                (ids["app"], ids["user_id"]),
            ).fetchall()
        ]


def _forget_turn(pool, event_id: str) -> None:
    """The ledger forgets the turn, so its window is extracted again (as after a
    replay into a database that holds the feedback but not the turn's ledger row)."""
    with pool.connection() as conn:
        conn.execute(
            "DELETE FROM processed_events WHERE consumer = %s AND event_id = %s",
            (TURNS_SUBSCRIPTION, event_id),
        )


def _revisions(pool, memory_id: str) -> int:
    with pool.connection() as conn:
        return conn.execute(
            "SELECT count(*) FROM memory_revisions WHERE memory_id = %s", (memory_id,)
        ).fetchone()[0]


def test_the_turn_of_a_wrong_memory_is_not_extracted_into_it_again(client, extraction, pool, ids):
    user = ids["user_id"]
    said = utcnow() - timedelta(minutes=5)
    turn = make_turn(ids, 1, user="My dog is called Rex.", assistant="Noted.", created_at=said)
    assert extraction.handle_turn(turn, None) == "applied"
    memory = client.get("/v1/memories", params={"user_id": user}).json()["memories"][0]
    assert memory["text"] == "User's dog is called Rex."
    # Its entity renamed by hand first: a candidate of the turn no longer names it.
    renamed = client.patch(
        f"/v1/memories/{memory['id']}", json={"user_id": user, "entity_name": "pet"}
    )
    assert renamed.status_code == 200, renamed.text
    _given(client, user, memory["id"], "wrong", reason="the dog is Max")
    revisions = _revisions(pool, memory["id"])

    # Delivered again: the ledger knows it.
    assert extraction.handle_turn(turn, None) == "duplicate"
    # Extracted again: the candidate is held back; nothing is written anywhere.
    _forget_turn(pool, turn.event_id)
    assert extraction.handle_turn(turn, None) == "applied"
    assert _live(pool, ids) == []
    assert _revisions(pool, memory["id"]) == revisions

    # A rollback brings it back.
    back = client.post(
        f"/v1/memories/{memory['id']}:rollback", json={"user_id": user, "revision": 1}
    )
    assert back.status_code == 200, back.text
    assert _live(pool, ids) == ["User's dog is called Rex."]
    # A later turn that says it again is the user's word again: it is kept.
    _given(client, user, memory["id"], "wrong")
    again = make_turn(ids, 2, user="My dog is called Rex.", assistant="Noted.", created_at=utcnow())
    assert extraction.handle_turn(again, None) == "applied"
    assert _live(pool, ids) == ["User's dog is called Rex."]


def test_the_clients_give_feedback(app_settings, topology, ids):
    user = ids["user_id"]
    with serve_api(app_settings) as url, MemoryClient(url) as client:
        memory = client.write_memory(user, "Prefers trains to planes.").memory
        assert memory is not None
        given = client.give_feedback(user, memory.id, "useful", reason="booked a train")
        assert (given.feedback.rating, given.feedback.reason, given.tally.useful) == (
            "useful",
            "booked a train",
            1,
        )
        with pytest.raises(NotFoundError):
            client.give_feedback(user, UNKNOWN, "useful")
        with pytest.raises(InvalidRequestError, match="rating"):
            client.give_feedback(user, memory.id, "meh")

        async def wrong_async() -> str:
            async with AsyncMemoryClient(url) as aclient:
                done = await aclient.give_feedback(user, memory.id, "wrong")
                return f"{done.tally.wrong} {done.memory.deleted_at is not None}"

        assert asyncio.run(wrong_async()) == "1 True"
        with pytest.raises(ConflictError):
            client.give_feedback(user, memory.id, "useful")
        assert client.rollback_memory(user, memory.id, 1).deleted_at is None
        # An agent's memory is rated as that agent, sync and async; as none, not found.
        agents = client.write_memory(user, "Prefers aisle seats.", agent_id="travel").memory
        assert agents is not None
        with pytest.raises(NotFoundError):
            client.give_feedback(user, agents.id, "useful")
        rated = client.give_feedback(user, agents.id, "useful", agent_id="travel")
        assert rated.tally.useful == 1

        async def as_agent() -> int:
            async with AsyncMemoryClient(url) as aclient:
                done = await aclient.give_feedback(user, agents.id, "not_useful", agent_id="travel")
                return done.tally.not_useful

        assert asyncio.run(as_agent()) == 1


def _memory_lines(export: str) -> list[dict]:
    return [r for r in map(json.loads, export.splitlines()) if r.get("type") == "memory"]


def test_feedback_goes_with_its_memory_through_an_export_and_an_import(
    client, extraction, app_settings, ids
):
    user, copy = ids["user_id"], f"{ids['user_id']}-copy"
    said = utcnow() - timedelta(minutes=5)
    turn = make_turn(ids, 1, user="I live in Lisbon.", assistant="Noted.", created_at=said)
    assert extraction.handle_turn(turn, None) == "applied"
    lisbon = client.get("/v1/memories", params={"user_id": user}).json()["memories"][0]
    tea = _write(client, user, "Drinks green tea every morning.")
    _given(client, user, tea["id"], "useful", reason="yes")
    _given(client, user, lisbon["id"], "wrong", reason="moved to Porto")
    exported = client.get(f"/v1/users/{user}:export")
    assert exported.status_code == 200, exported.text
    feedback = {m["text"]: m["feedback"] for m in _memory_lines(exported.text)}
    assert [f["rating"] for f in feedback["User lives in Lisbon."]] == ["wrong"]

    imported = client.post(f"/v1/users/{copy}:import", content=exported.content)
    assert imported.status_code == 200, imported.text
    with psycopg.connect(app_settings.database_url) as conn:
        rows = conn.execute(
            "SELECT user_id, rating, reason, source, source_events::text[], restored_at "
            "FROM memory_feedback WHERE app = %s ORDER BY user_id, created_at",
            (ids["app"],),
        ).fetchall()
    original = [row[1:] for row in rows if row[0] == user]
    assert [row[1:] for row in rows if row[0] == copy] == original
    assert original == [
        ("useful", "yes", "api", [], None),
        ("wrong", "moved to Porto", "api", [turn.event_id], None),
    ]
    # The copy ranks as the original, its feedback included.
    query = "green tea in the morning"
    assert _search(client, copy, query) == _search(client, user, query)
    # Its retirement stands there too: a rollback brings the copy back.
    copies = [
        m["id"]
        for m in _memory_lines(client.get(f"/v1/users/{copy}:export").text)
        if m["valid_to"] is not None
    ]
    assert len(copies) == 1
    back = client.post(f"/v1/memories/{copies[0]}:rollback", json={"user_id": copy, "revision": 1})
    assert back.status_code == 200, back.text
    assert back.json()["text"] == "User lives in Lisbon."
