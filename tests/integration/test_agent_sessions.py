"""Sessions of agents against the real API and Valkey: a session is the agent's
that recorded its first turn (or the user's own), and no other agent of the user,
nor the user's own requests, records turns in it, reads it (its view, the
context's session part, its summary carried into another session), flushes or
deletes it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from shared.api_keys import create_key
from shared.db.episodes import Episode, Episodes
from shared.embeddings import HashEmbedder
from shared.events import utcnow
from shared.session_buffer import SessionBuffer, SessionKey


@pytest.fixture
def api(app_settings, topology) -> Iterator[TestClient]:
    settings = app_settings.model_copy(update={"auth_disabled": False, "auth_cache_seconds": 0})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def keys(app_settings, ids) -> dict[str, dict[str, str]]:
    """Bearer headers: a key of the whole app and two limited to an agent each."""
    limits = {"app": {}, "planner": {"agent_id": "planner"}, "coder": {"agent_id": "coder"}}
    with psycopg.connect(app_settings.database_url, autocommit=True) as conn:
        return {
            who: {"Authorization": f"Bearer {create_key(conn, ids['app'], **limit)[0]}"}
            for who, limit in limits.items()
        }


def _turn(api, headers, ids, session: str, turn_id: str, text: str, **body):
    turn = {"user_id": ids["user_id"], "turn_id": turn_id, "user": text, "assistant": "Noted."}
    return api.post(f"/v1/sessions/{session}/turns", json=turn | body, headers=headers)


def _refusal(answer) -> tuple[int, str | None, str]:
    error = answer.json()["error"]
    named = [f["field"] for f in error.get("fields", [])]
    return answer.status_code, ",".join(named) or None, error["message"]


def test_an_agents_session_is_its_own(api, ids, keys):
    user = {"user_id": ids["user_id"]}
    planner, coder, app = keys["planner"], keys["coder"], keys["app"]
    assert _turn(api, planner, ids, "plan-1", "t1", "I prefer tabs.").status_code == 202
    # Another agent, and the user's own request, record nothing in it.
    refused = _turn(api, coder, ids, "plan-1", "t2", "I prefer spaces.")
    assert _refusal(refused) == (
        409,
        "agent_id",
        "agent_id: session plan-1 is not a session of agent coder; "
        "an agent records turns in sessions of its own",
    )
    as_user = _turn(api, app, ids, "plan-1", "t3", "Hello.")
    assert as_user.status_code == 409, as_user.text
    # A key of the whole app records as the agent it names.
    assert _turn(api, app, ids, "plan-1", "t4", "Thanks.", agent_id="planner").status_code == 202

    view = api.get("/v1/sessions/plan-1", params=user, headers=planner)
    assert view.status_code == 200, view.text
    assert [t["turn_id"] for t in view.json()["turns"]] == ["t1", "t4"]
    assert view.json()["turns_total"] == 2  # the refused turns were never appended
    as_planner = api.get("/v1/sessions/plan-1", params=user | {"agent_id": "planner"}, headers=app)
    assert as_planner.json()["turns"] == view.json()["turns"]

    not_coders = (404, "session_id", "session_id: session plan-1 is not a session of agent coder")
    assert _refusal(api.get("/v1/sessions/plan-1", params=user, headers=coder)) == not_coders
    flush = api.post("/v1/sessions/plan-1:flush", json=user, headers=coder)
    assert _refusal(flush) == not_coders
    delete = api.delete("/v1/sessions/plan-1", params=user, headers=coder)
    assert _refusal(delete) == not_coders
    context = api.post(
        "/v1/context", json=user | {"session_id": "plan-1", "query": "tabs"}, headers=coder
    )
    assert _refusal(context) == not_coders
    not_users = "session_id: session plan-1 is not a session of the user (no agent_id)"
    assert _refusal(api.get("/v1/sessions/plan-1", params=user, headers=app))[2] == not_users

    # The planner's own requests still find everything in place.
    context = api.post(
        "/v1/context", json=user | {"session_id": "plan-1", "query": "tabs"}, headers=planner
    )
    assert [t["turn_id"] for t in context.json()["recent_turns"]] == ["t1", "t4"]
    assert api.post("/v1/sessions/plan-1:flush", json=user, headers=planner).status_code == 202
    deleted = api.delete("/v1/sessions/plan-1", params=user, headers=planner)
    assert deleted.status_code == 200 and deleted.json()["deleted_keys"] > 0, deleted.text
    # Once deleted, the id is free again: the next first turn says whose it is.
    assert _turn(api, coder, ids, "plan-1", "t5", "Hi.").status_code == 202


def test_a_summary_is_carried_only_into_a_session_of_its_agent(
    api, app_settings, ids, keys, valkey_client
):
    user = {"user_id": ids["user_id"]}
    planner, coder = keys["planner"], keys["coder"]
    assert _turn(api, planner, ids, "plan-1", "t1", "I prefer tabs.").status_code == 202
    # A fold as the summary worker stores it: the session's summary at version 1.
    buffer = SessionBuffer(valkey_client, app_settings.session_ttl_seconds)
    key = SessionKey(ids["app"], ids["user_id"], "plan-1")
    folded = buffer.read(key).turns
    assert buffer.store_fold(key, 0, "Tabs.", folded, utcnow()).version == 1
    follows = {"prev_session_id": "plan-1"}
    assert _turn(api, planner, ids, "plan-2", "t1", "Go on.", **follows).status_code == 202
    assert _turn(api, coder, ids, "code-1", "t1", "Go on.", **follows).status_code == 202
    carried = {
        who: api.get(f"/v1/sessions/{session}", params=user, headers=keys[who]).json()
        for who, session in (("planner", "plan-2"), ("coder", "code-1"))
    }
    assert carried["planner"]["carried_summary"] == {
        "session_id": "plan-1",
        "text": "Tabs.",
        "version": 1,
    }
    assert carried["coder"]["carried_summary"] is None
    for who, session in (("planner", "plan-2"), ("coder", "code-1")):
        context = api.post(
            "/v1/context", json=user | {"session_id": session, "query": "tabs"}, headers=keys[who]
        )
        assert context.status_code == 200, context.text
        assert ("Tabs." in context.json()["system_instruction"]) is (who == "planner")


def test_the_console_reads_an_agents_session_as_its_agent(client, pool, ids):
    """The console's key is the app's: it reads an agent's session as the agent its
    archived turns name (or the link names)."""
    user = ids["user_id"]
    said = "I prefer tabs over spaces."
    assert _turn(client, {}, ids, "plan-1", "t1", said, agent_id="planner").status_code == 202
    with pool.connection() as conn:
        archived = Episode(
            app=ids["app"],
            user_id=user,
            project_id="",
            session_id="plan-1",
            turn_id="t1",
            event_id=str(uuid.uuid4()),
            user_text=said,
            assistant_text="Noted.",
            tool_events=[],
            created_at=utcnow(),
            agent_id="planner",
        )
        Episodes(conn).archive_locally(archived, HashEmbedder(768).embed, neighbours=2, dated=True)
    page = client.get("/console/user/session", params={"user": user, "id": "plan-1"})
    assert page.status_code == 200, page.text
    assert said in page.text
    as_coder = {"user": user, "id": "plan-1", "agent": "coder"}
    refused = client.get("/console/user/session", params=as_coder)
    assert refused.status_code == 404 and refused.headers["content-type"].startswith("text/html")
    assert "session plan-1 is not a session of agent coder" in refused.text
