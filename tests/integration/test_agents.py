"""Agents against the real stack: turns recorded through the API with keys limited
to an agent, published to the Pub/Sub emulator and extracted by the extraction
worker (the `offline` provider) into Postgres; then every read and change as each
agent, as the user (no agent) and across users, projects and apps.

Nothing crosses: an agent reads its own memories and the user's, never another
agent's; a memory of a kind the app shares is the user's; a key limited to an
agent names no other (403 naming the field), reads the entities as its agent,
and reaches no route of the whole user or app."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.compaction_worker.handlers import SUMMARY_ENTITY, Compaction
from services.compaction_worker.requests import compaction_request
from shared.api_keys import create_key
from shared.db.episodes import Episode, Episodes
from shared.db.unit_of_work import UnitsOfWork
from shared.embeddings import make_embedder
from shared.events import utcnow
from shared.llm.offline import OfflineLLM
from tests.bus_helpers import extraction_worker
from tests.support import wait_for
from tests.window_helpers import live_texts

TABS = "User prefers tabs over spaces."
FRIDAYS = "User must never deploy on Fridays."
DARK = "User prefers dark mode in their editor."


def _key(settings, app: str, **limits) -> str:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return create_key(conn, app, **limits)[0]


@pytest.fixture
def api(app_settings, topology) -> Iterator[TestClient]:
    """The API of the test's app with authentication on (no key by default)."""
    settings = app_settings.model_copy(update={"auth_disabled": False, "auth_cache_seconds": 0})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def _archived(pool, ids) -> int:
    with pool.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM episodes WHERE app = %s AND user_id = %s",
            (ids["app"], ids["user_id"]),
        ).fetchone()
    return row[0] if row else 0


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _texts(answer) -> list[tuple[str, str | None]]:
    assert answer.status_code == 200, answer.text
    return sorted((m["text"], m["agent_id"]) for m in answer.json()["memories"])


def _ranked(answer) -> list[tuple[str, str | None]]:
    assert answer.status_code == 200, answer.text
    return [(m["text"], m["agent_id"]) for m in answer.json()["memories"]]


def _turn(api, key: str, ids, session: str, n: int, text: str, **body) -> None:
    turn = {"user_id": ids["user_id"], "turn_id": f"t{n}", "user": text, "assistant": "Noted."}
    answer = api.post(f"/v1/sessions/{session}/turns", json=turn | body, headers=_as(key))
    assert answer.status_code == 202, answer.text


@pytest.fixture
def learnt(api, app_settings, ids, pool, publisher):
    """Two agents of one user, each told something through its own key, and a rule
    the app shares: the memories the extraction worker made of it, and the keys."""
    keys = {
        "admin": _key(app_settings, ids["app"], admin=True),
        "app": _key(app_settings, ids["app"]),
        "planner": _key(app_settings, ids["app"], agent_id="planner"),
        "coder": _key(app_settings, ids["app"], agent_id="coder"),
    }
    shared = {"shared_kinds": ["rule"], "shared_topics": []}
    put = api.put("/v1/config/agents", json=shared, headers=_as(keys["admin"]))
    assert put.status_code == 200 and put.json() == shared, put.text
    assert api.get("/v1/config/agents", headers=_as(keys["coder"])).json() == shared
    local = app_settings.model_copy(update={"extraction_window_turns": 1})
    embedder = make_embedder(local)
    with extraction_worker(local, pool, OfflineLLM(), embedder, publisher):
        _turn(api, keys["planner"], ids, "plan-1", 1, "I prefer tabs over spaces.")
        _turn(api, keys["planner"], ids, "plan-1", 2, "We must never deploy on Fridays.")
        # A key of the whole app names the agent itself.
        _turn(
            api, keys["app"], ids, "code-1", 1, "I prefer dark mode in my editor.", agent_id="coder"
        )
        # Nothing to keep in it: recalled as a turn, not carried by a memory.
        _turn(api, keys["coder"], ids, "code-1", 2, "How is the weather in Lisbon today?")
        wait_for(lambda: len(live_texts(pool, ids)) == 3, 60, "the three memories")
        wait_for(lambda: _archived(pool, ids) == 4, 60, "the four turns archived")
    return keys


def test_an_agent_reads_its_own_memories_and_the_users_never_another_agents(api, ids, learnt):
    user = {"user_id": ids["user_id"]}
    listed = {
        who: _texts(api.get("/v1/memories", params=user, headers=_as(learnt[who])))
        for who in ("planner", "coder", "app")
    }
    assert listed == {
        "planner": [(FRIDAYS, None), (TABS, "planner")],
        "coder": [(FRIDAYS, None), (DARK, "coder")],
        "app": [(FRIDAYS, None)],  # no agent named: the user's memories only
    }
    # A key of the whole app reads as any agent it names.
    as_planner = api.get(
        "/v1/memories", params=user | {"agent_id": "planner"}, headers=_as(learnt["app"])
    )
    assert _texts(as_planner) == listed["planner"]
    # The search, the context and the archive, as the coder: nothing of the planner's.
    search = api.post(
        "/v1/memories:search", json=user | {"query": "tabs spaces"}, headers=_as(learnt["coder"])
    )
    assert TABS not in [t for t, _ in _texts(search)]
    planner_search = api.post(
        "/v1/memories:search", json=user | {"query": "tabs spaces"}, headers=_as(learnt["planner"])
    )
    assert _ranked(planner_search)[0] == (TABS, "planner")
    context = api.post(
        "/v1/context",
        json=user | {"session_id": "code-2", "query": "editor tabs deploy weather Lisbon"},
        headers=_as(learnt["coder"]),
    )
    assert context.status_code == 200, context.text
    instruction = context.json()["system_instruction"]
    assert DARK in instruction and FRIDAYS in instruction and TABS not in instruction
    assert "tabs over spaces" not in instruction  # nor the planner's archived turn
    # The coder's own archived turn is recalled, the planner's never.
    recalled = {(t["session_id"], t["turn_id"]) for t in context.json()["recalled_turns"]}
    assert recalled == {("code-1", "t2")}
    planner_context = api.post(
        "/v1/context",
        json=user | {"session_id": "plan-2", "query": "weather in Lisbon"},
        headers=_as(learnt["planner"]),
    )
    assert planner_context.json()["recalled_turns"] == []
    archive = api.post(
        "/v1/archive:search", json=user | {"query": "tabs spaces"}, headers=_as(learnt["coder"])
    )
    assert archive.status_code == 200, archive.text
    # Of the four archived turns, the coder's own two only.
    assert sorted(e["turn_id"] for e in archive.json()["episodes"]) == ["t1", "t2"]
    assert {e["session_id"] for e in archive.json()["episodes"]} == {"code-1"}
    planner_archive = api.post(
        "/v1/archive:search", json=user | {"query": "tabs spaces"}, headers=_as(learnt["planner"])
    )
    assert [e["session_id"] for e in planner_archive.json()["episodes"]] == ["plan-1", "plan-1"]
    # A filter on the built-in field: the agent's own memories only.
    own = api.get(
        "/v1/memories",
        params=user | {"filter": '{"agent_id": {"exists": true}}'},
        headers=_as(learnt["coder"]),
    )
    assert _texts(own) == [(DARK, "coder")]


def test_a_memory_of_another_agent_is_not_found_for_any_change(api, ids, learnt):
    user = {"user_id": ids["user_id"]}
    planner = _as(learnt["planner"])
    tabs = next(
        m
        for m in api.get("/v1/memories", params=user, headers=planner).json()["memories"]
        if m["agent_id"]
    )
    coder = _as(learnt["coder"])
    path = f"/v1/memories/{tabs['id']}"
    assert api.get(path, params=user, headers=coder).status_code == 404
    assert api.patch(path, json=user | {"text": "x"}, headers=coder).status_code == 404
    rollback = api.post(f"{path}:rollback", json=user | {"revision": 1}, headers=coder)
    assert rollback.status_code == 404
    assert api.delete(path, params=user, headers=coder).status_code == 404
    gone = api.post("/v1/memories:delete", json=user | {"query": "tabs"}, headers=coder)
    assert gone.status_code == 200 and gone.json()["deleted"] == [], gone.text
    # Nor as the user (no agent): the planner's memory is the planner's alone.
    assert api.get(path, params=user, headers=_as(learnt["app"])).status_code == 404
    # The planner itself reads, edits and deletes it.
    assert api.get(path, params=user, headers=planner).json()["agent_id"] == "planner"
    edited = api.patch(path, json=user | {"text": "User prefers tabs."}, headers=planner)
    assert edited.status_code == 200 and edited.json()["agent_id"] == "planner", edited.text
    deleted = api.post("/v1/memories:delete", json=user | {"query": "tabs"}, headers=planner)
    assert [m["text"] for m in deleted.json()["deleted"]] == ["User prefers tabs."]


def test_a_key_limited_to_an_agent_names_no_other_and_serves_no_whole_user_route(api, ids, learnt):
    user = {"user_id": ids["user_id"]}
    coder = _as(learnt["coder"])
    refusals = [
        api.get("/v1/memories", params=user | {"agent_id": "planner"}, headers=coder),
        api.post(
            "/v1/memories:search", json=user | {"query": "x", "agent_id": "planner"}, headers=coder
        ),
        api.post(
            "/v1/memories",
            json=user | {"text": "x", "scope": "global", "kind": "fact", "agent_id": "planner"},
            headers=coder,
        ),
        api.post(
            "/v1/sessions/s/turns",
            json=user | {"user": "hi", "assistant": "hello", "agent_id": "planner"},
            headers=coder,
        ),
    ]
    for answer in refusals:
        assert answer.status_code == 403, answer.text
        message = "this key is limited to agent coder, not planner"
        assert answer.json()["error"]["fields"] == [{"field": "agent_id", "message": message}]
    generate = api.post(
        "/v1/memories:generate",
        json=user | {"scope": {"agent_id": "planner"}, "events": [{"role": "user", "text": "hi"}]},
        headers=coder,
    )
    assert (
        generate.status_code == 403
        and generate.json()["error"]["fields"][0]["field"] == "scope.agent_id"
    )
    whole = [
        api.post(
            "/v1/entities/00000000-0000-0000-0000-000000000000:unmerge", json=user, headers=coder
        ),
        api.get(f"/v1/users/{ids['user_id']}:export", headers=coder),
        api.delete(f"/v1/users/{ids['user_id']}", headers=coder),
        api.post(
            "/v1/permissions/rules",
            json=user | {"tool_name": "sh", "pattern": "*", "action": "ALLOW"},
            headers=coder,
        ),
    ]
    for answer in whole:
        assert answer.status_code == 403, answer.text
        assert "limited to agent coder" in answer.json()["error"]["message"]
    assert api.put("/v1/config/agents", json={}, headers=coder).status_code == 403
    # The entities are read as the key's agent (tests/integration/test_agent_entities.py).
    entities = {
        who: [
            (e["name"], e["turns"])
            for e in api.get("/v1/entities", params=user, headers=_as(learnt[who])).json()[
                "entities"
            ]
        ]
        for who in ("coder", "planner")
    }
    assert entities == {"coder": [("Lisbon", 1)], "planner": []}  # the coder's turn's
    # The user's memories are all still there.
    assert len(api.get("/v1/memories", params=user, headers=coder).json()["memories"]) == 2


def test_nothing_crosses_users_projects_or_apps(api, app_settings, ids, learnt):
    coder = _as(learnt["coder"])
    other_user = {"user_id": f"other-{uuid.uuid4().hex[:6]}"}
    assert api.get("/v1/memories", params=other_user, headers=coder).json()["memories"] == []
    # The same user and agent ids in another app: nothing of this app's.
    other_app = _as(_key(app_settings, f"other-{ids['app']}", agent_id="coder"))
    user = {"user_id": ids["user_id"]}
    assert api.get("/v1/memories", params=user, headers=other_app).json()["memories"] == []
    # A project memory of the coder: in its project only, and the coder's only.
    write = {
        "text": "Atlas builds with Bazel.",
        "scope": "project",
        "kind": "fact",
        "project_id": "atlas",
    }
    made = api.post("/v1/memories", json=user | write, headers=coder)
    assert made.status_code == 201 and made.json()["memory"]["agent_id"] == "coder", made.text
    in_atlas = api.get("/v1/memories", params=user | {"project_id": "atlas"}, headers=coder)
    assert "Atlas builds with Bazel." in [t for t, _ in _texts(in_atlas)]
    elsewhere = api.post(
        "/v1/memories:search", json=user | {"query": "Bazel", "project_id": "zeus"}, headers=coder
    )
    assert "Atlas builds with Bazel." not in [t for t, _ in _texts(elsewhere)]
    planner = api.post(
        "/v1/memories:search",
        json=user | {"query": "Bazel", "project_id": "atlas"},
        headers=_as(learnt["planner"]),
    )
    assert "Atlas builds with Bazel." not in [t for t, _ in _texts(planner)]


def test_two_agents_keep_their_own_memory_of_one_entity(client, ids):
    user = {"user_id": ids["user_id"]}

    def write(agent: str | None, text: str) -> dict:
        body = user | {
            "text": text,
            "scope": "global",
            "kind": "preference",
            "entity_name": "ui theme",
        }
        answer = client.post("/v1/memories", json=body | ({"agent_id": agent} if agent else {}))
        assert answer.status_code == 201, answer.text
        return answer.json()

    assert write("planner", "Prefers a light theme.")["action"] == "CREATED"
    assert write("coder", "Prefers a dark theme.")["action"] == "CREATED"
    assert write(None, "Prefers a high-contrast theme.")["action"] == "CREATED"
    # The same entity again for the coder updates the coder's memory only.
    again = write("coder", "Prefers a solarized dark theme.")
    assert (again["action"], again["memory"]["agent_id"]) == ("UPDATED", "coder")
    seen = {
        agent: _texts(
            client.get("/v1/memories", params=user | ({"agent_id": agent} if agent else {}))
        )
        for agent in ("planner", "coder", None)
    }
    assert seen == {
        "planner": [
            ("Prefers a high-contrast theme.", None),
            ("Prefers a light theme.", "planner"),
        ],
        "coder": [
            ("Prefers a high-contrast theme.", None),
            ("Prefers a solarized dark theme.", "coder"),
        ],
        None: [("Prefers a high-contrast theme.", None)],
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"agent_id": ""}, "agent_id"),
        ({"agent_id": "a\u0000b"}, "agent_id"),
        ({"agent_id": "x" * 257}, "agent_id"),
        ({"agent_id": 7}, "agent_id"),
    ],
)
def test_a_bad_agent_id_is_a_422_naming_it(client, ids, body, field):
    write = {"user_id": ids["user_id"], "text": "x", "scope": "global", "kind": "fact"}
    answer = client.post("/v1/memories", json=write | body)
    assert answer.status_code == 422, answer.text
    assert [f["field"] for f in answer.json()["error"]["fields"]] == [field]
    bad_config = client.put("/v1/config/agents", json={"shared_kinds": ["gossip"]})
    assert bad_config.status_code == 422
    assert [f["field"] for f in bad_config.json()["error"]["fields"]] == ["shared_kinds.0"]


def test_an_agents_old_turns_are_compacted_into_a_summary_of_its_own(
    client, app_settings, publisher, pool, ids
):
    said = [
        ("planner", "I prefer Python for scripts."),
        ("coder", "The API timeout must be 30 seconds."),
        ("", "Never deploy on Fridays."),
    ]
    with pool.connection() as conn:
        for n, (agent, text) in enumerate(said):
            Episodes(conn).archive_locally(
                Episode(
                    app=ids["app"],
                    user_id=ids["user_id"],
                    project_id="",
                    session_id=f"s-{agent or 'none'}",
                    turn_id=f"t{n}",
                    event_id=str(uuid.uuid4()),
                    user_text=text,
                    assistant_text="Noted.",
                    tool_events=[],
                    created_at=utcnow() - timedelta(days=40, seconds=-n),
                    agent_id=agent,
                ),
                lambda texts: [None] * len(texts),
                neighbours=2,
                dated=True,
            )
    units = UnitsOfWork(pool, "compaction")
    compaction = Compaction(
        units, OfflineLLM(), make_embedder(app_settings), app_settings, publisher
    )
    request = compaction_request(ids["app"], ids["user_id"], "", 30, 100)
    assert compaction.handle_request(request, None) == "applied"
    with pool.connection() as conn:
        summaries = conn.execute(
            "SELECT agent_id, text FROM memories WHERE app = %s AND user_id = %s "
            "AND entity_name = %s AND valid_to IS NULL ORDER BY agent_id",
            (ids["app"], ids["user_id"], SUMMARY_ENTITY),
        ).fetchall()
    assert summaries == [
        ("", "User: Never deploy on Fridays."),
        ("coder", "User: The API timeout must be 30 seconds."),
        ("planner", "User: I prefer Python for scripts."),
    ]
    body = {"user_id": ids["user_id"], "session_id": "s-new", "query": "python timeout deploy"}
    context = client.post("/v1/context", json=body | {"agent_id": "coder"})
    assert context.status_code == 200, context.text
    assert sorted(s["text"] for s in context.json()["long_term_summaries"]) == [
        "User: Never deploy on Fridays.",
        "User: The API timeout must be 30 seconds.",
    ]


def test_an_operation_is_read_as_the_agent_that_started_it(api, app_settings, ids):
    """A generate's operation names the memories it made: another agent's key, and a
    read naming no agent, find no operation of an agent's (404); the agent does."""
    planner = _key(app_settings, ids["app"], agent_id="planner")
    coder = _key(app_settings, ids["app"], agent_id="coder")
    whole = _key(app_settings, ids["app"])
    events = {"user_id": ids["user_id"], "events": [{"role": "user", "text": "I like tea."}]}
    started = api.post("/v1/memories:generate", json=events, headers=_as(planner))
    assert started.status_code == 202, started.text
    path = f"/v1/operations/{started.json()['name']}"
    user = {"user_id": ids["user_id"]}
    reads = {
        "planner": api.get(path, params=user, headers=_as(planner)),
        "whole app as planner": api.get(
            path, params=user | {"agent_id": "planner"}, headers=_as(whole)
        ),
        "coder": api.get(path, params=user, headers=_as(coder)),
        "whole app as coder": api.get(
            path, params=user | {"agent_id": "coder"}, headers=_as(whole)
        ),
        "whole app, no agent": api.get(path, params=user, headers=_as(whole)),
    }
    assert {who: answer.status_code for who, answer in reads.items()} == {
        "planner": 200,
        "whole app as planner": 200,
        "coder": 404,
        "whole app as coder": 404,
        "whole app, no agent": 404,
    }
    assert reads["planner"].json()["name"] == started.json()["name"]
    refused = api.get(path, params=user | {"agent_id": "planner"}, headers=_as(coder))
    assert refused.status_code == 403, refused.text
    # An operation of no agent's is the user's: every read of the user sees it.
    mine = api.post("/v1/memories:generate", json=events, headers=_as(whole))
    shared = f"/v1/operations/{mine.json()['name']}"
    assert api.get(shared, params=user, headers=_as(coder)).status_code == 200
    assert api.get(shared, params=user, headers=_as(whole)).status_code == 200


def test_an_agent_rates_what_it_reads_and_reads_the_users_profile(api, app_settings, ids):
    """Feedback is refused (404) on a memory the agent does not read, as an edit is;
    a key limited to an agent rates its own and the user's memories, and reads and
    changes the user's profile, which every agent's context carries."""
    planner = _key(app_settings, ids["app"], agent_id="planner")
    coder = _key(app_settings, ids["app"], agent_id="coder")
    whole = _key(app_settings, ids["app"], admin=True)
    user = {"user_id": ids["user_id"]}

    def written(key: str, text: str) -> str:
        body = user | {"text": text, "scope": "global", "kind": "fact", "consolidate": False}
        answer = api.post("/v1/memories", json=body, headers=_as(key))
        assert answer.status_code == 201, answer.text
        return answer.json()["memory"]["id"]

    def rated(key: str, memory: str, **extra: str) -> int:
        body = user | {"rating": "useful"} | extra
        return api.post(f"/v1/memories/{memory}:feedback", json=body, headers=_as(key)).status_code

    planners, users = written(planner, "The planner likes Gantt charts."), written(whole, "Tea.")
    assert rated(coder, planners) == 404
    assert rated(whole, planners) == 404  # naming no agent: the user's memories only
    assert rated(whole, planners, agent_id="planner") == 200
    assert rated(planner, planners) == 200
    assert rated(coder, users) == 200
    assert rated(coder, planners, agent_id="planner") == 403
    # `wrong` from another agent retires nothing of the planner's.
    wrong = user | {"rating": "wrong"}
    answer = api.post(f"/v1/memories/{planners}:feedback", json=wrong, headers=_as(coder))
    assert answer.status_code == 404, answer.text
    shown = api.get(f"/v1/memories/{planners}", params=user, headers=_as(planner)).json()
    assert shown["deleted_at"] is None

    schema = {"fields": [{"name": "name", "type": "string", "description": ""}]}
    assert api.put("/v1/config/profile", json=schema, headers=_as(whole)).status_code == 200
    assert api.get("/v1/config/profile", headers=_as(coder)).json() == schema
    profile = f"/v1/users/{ids['user_id']}/profile"
    changed = api.patch(profile, json={"values": {"name": "Ada"}}, headers=_as(coder))
    assert changed.status_code == 200, changed.text
    read = api.get(profile, headers=_as(planner))
    assert read.status_code == 200, read.text
    assert read.json()["values"] == {"name": "Ada"}
    history = api.get(f"{profile}/revisions", headers=_as(planner))
    assert [r["value"] for r in history.json()["revisions"]] == ["Ada"]
    assert api.patch(profile, json={"values": {"name": "Ada L."}}, headers=_as(coder)).is_success
    back = api.post(
        f"{profile}:rollback", json={"field": "name", "revision": 1}, headers=_as(planner)
    )
    assert back.status_code == 200, back.text
    assert back.json()["values"] == {"name": "Ada"}
    # A route of the whole user names its path as the docs write it.
    export = api.get(f"/v1/users/{ids['user_id']}:export", headers=_as(planner))
    assert export.status_code == 403
    assert "GET /v1/users/{user_id}:export serves the whole user" in export.text
