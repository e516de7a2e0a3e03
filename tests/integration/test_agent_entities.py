"""Entities per agent against the real stack: memories written and turns recorded
through the API with keys limited to an agent, the turns published to the Pub/Sub
emulator and archived by the extraction worker (the `offline` provider) into
Postgres; then the entity routes as each agent, as the user (no agent) and across
users, projects and apps.

Nothing crosses: an agent sees an entity only when its own memories and turns or
the user's name it, lists only those and the facts they state, and calls the
entity only by the names they say; a read naming no agent sees the user's rows
only, as the memory routes do (and an entity no row mentions any more); a key
limited to an agent merges nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from shared.db.episodes import Episodes
from shared.embeddings import make_embedder
from shared.llm.offline import OfflineLLM
from tests.bus_helpers import extraction_worker
from tests.integration.test_agents import _archived, _as, _key
from tests.support import wait_for


@pytest.fixture
def api(app_settings, topology) -> Iterator[TestClient]:
    """The API of the test's app with authentication on."""
    settings = app_settings.model_copy(update={"auth_disabled": False, "auth_cache_seconds": 0})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def _write(api, key: str, ids, text: str, **body) -> str:
    memory = {"user_id": ids["user_id"], "text": text, "scope": "global", "kind": "fact"}
    answer = api.post("/v1/memories", json=memory | body, headers=_as(key))
    assert answer.status_code == 201, answer.text
    return answer.json()["memory"]["id"]


def _turn(api, key: str, ids, session: str, text: str) -> None:
    turn = {"user_id": ids["user_id"], "turn_id": "t1", "user": text, "assistant": "Noted."}
    answer = api.post(f"/v1/sessions/{session}/turns", json=turn, headers=_as(key))
    assert answer.status_code == 202, answer.text


@pytest.fixture
def told(api, app_settings, ids, pool, publisher):
    """Two agents of one user and the user's own rows, each naming people: the
    planner's memory names Dana Lee at Acme Corp and its turn Zara Khan, the
    coder's memory only "Dana" and its turn Bob Smith, the user's memory Bob
    Smith. The keys, and the memories' ids."""
    keys = {
        "app": _key(app_settings, ids["app"]),
        "planner": _key(app_settings, ids["app"], agent_id="planner"),
        "coder": _key(app_settings, ids["app"], agent_id="coder"),
    }
    memories = {
        "planner": _write(api, keys["planner"], ids, "Dana Lee works at Acme Corp."),
        "coder": _write(api, keys["coder"], ids, "Dana plays the cello."),
        "user": _write(api, keys["app"], ids, "Bob Smith is a vegetarian."),
    }
    local = app_settings.model_copy(update={"extraction_window_turns": 1})
    with extraction_worker(local, pool, OfflineLLM(), make_embedder(local), publisher):
        _turn(api, keys["planner"], ids, "plan-1", "Has Zara Khan answered yet?")
        _turn(api, keys["coder"], ids, "code-1", "Has Bob Smith answered yet?")
        wait_for(lambda: _archived(pool, ids) == 2, 60, "the two turns archived")
    return keys, memories


def _listed(api, key: str, ids, **params) -> dict[str, tuple]:
    answer = api.get("/v1/entities", params={"user_id": ids["user_id"], **params}, headers=_as(key))
    assert answer.status_code == 200, answer.text
    return {e["name"]: (e["aliases"], e["memories"], e["turns"]) for e in answer.json()["entities"]}


def _detail(api, key: str, ids, entity_id: str, **params):
    path = f"/v1/entities/{entity_id}"
    return api.get(path, params={"user_id": ids["user_id"], **params}, headers=_as(key))


def _ids(api, key: str, ids, **params) -> dict[str, str]:
    answer = api.get("/v1/entities", params={"user_id": ids["user_id"], **params}, headers=_as(key))
    return {e["name"]: e["id"] for e in answer.json()["entities"]}


def test_an_agent_sees_the_entities_its_rows_and_the_users_name_never_another_agents(
    api, ids, told
):
    keys, _ = told
    listed = {who: _listed(api, keys[who], ids) for who in ("planner", "coder", "app")}
    assert listed == {
        "planner": {
            "Acme Corp": (["Acme Corp"], 1, 0),
            "Bob Smith": (["Bob Smith"], 1, 0),  # the user's memory; the coder's turn not
            "Dana Lee": (["Dana Lee"], 1, 0),  # not "Dana": the coder's memory said that
            "Zara Khan": (["Zara Khan"], 0, 1),
        },
        # One entity "Dana Lee" for the user, but the coder's rows only say "Dana".
        "coder": {"Bob Smith": (["Bob Smith"], 1, 1), "Dana": (["Dana"], 1, 0)},
        "app": {"Bob Smith": (["Bob Smith"], 1, 0)},  # no agent named: the user's rows only
    }
    # A key of the whole app reads as any agent it names.
    assert _listed(api, keys["app"], ids, agent_id="planner") == listed["planner"]
    assert _listed(api, keys["app"], ids, agent_id="coder") == listed["coder"]
    # An agent that said nothing sees what the user's rows name.
    assert _listed(api, keys["app"], ids, agent_id="writer") == listed["app"]


def test_an_entitys_detail_lists_what_the_reading_agent_sees(api, ids, told):
    keys, memories = told
    dana = _ids(api, keys["planner"], ids)["Dana Lee"]
    as_planner = _detail(api, keys["planner"], ids, dana).json()
    as_coder = _detail(api, keys["coder"], ids, dana).json()
    assert (as_planner["name"], as_coder["name"]) == ("Dana Lee", "Dana")
    assert as_planner["alias_sources"] == [{"alias": "Dana Lee", "how": "name"}]
    assert as_coder["alias_sources"] == [{"alias": "Dana", "how": "first name"}]
    assert [m["id"] for m in as_planner["memories_mentioning"]] == [memories["planner"]]
    assert [m["id"] for m in as_coder["memories_mentioning"]] == [memories["coder"]]
    # The fact the planner's memory states is the planner's to see.
    assert [(f["subject"], f["predicate"], f["object"]) for f in as_planner["facts"]] == [
        ("Dana Lee", "employer", "Acme Corp")
    ]
    assert as_coder["facts"] == []
    # Seen through the user's memory by both, each sees only its own turn of Bob.
    bob = _ids(api, keys["coder"], ids)["Bob Smith"]
    turns = {
        who: [t["session_id"] for t in _detail(api, keys[who], ids, bob).json()["turns_mentioning"]]
        for who in ("planner", "coder", "app")
    }
    assert turns == {"planner": [], "coder": ["code-1"], "app": []}
    bob_memories = {
        who: [m["id"] for m in _detail(api, keys[who], ids, bob).json()["memories_mentioning"]]
        for who in ("planner", "coder", "app")
    }
    assert bob_memories == {who: [memories["user"]] for who in ("planner", "coder", "app")}
    # What only the planner's rows name is not there for the coder, nor for the user.
    acme, zara = (_ids(api, keys["planner"], ids)[n] for n in ("Acme Corp", "Zara Khan"))
    for entity in (acme, zara, dana):
        for who in ("coder", "app"):
            if (entity, who) == (dana, "coder"):
                continue
            answer = _detail(api, keys[who], ids, entity)
            assert answer.status_code == 404, answer.text
            assert answer.json()["error"]["code"] == "not_found"
    # The coder's own memory names its entity by the coder's word too.
    mine = api.get(
        f"/v1/memories/{memories['coder']}",
        params={"user_id": ids["user_id"]},
        headers=_as(keys["coder"]),
    )
    assert [(e["id"], e["name"]) for e in mine.json()["entities"]] == [(dana, "Dana")]


def _kinds(api, key: str, ids, **params) -> dict[str, str]:
    answer = api.get("/v1/entities", params={"user_id": ids["user_id"], **params}, headers=_as(key))
    assert answer.status_code == 200, answer.text
    return {e["name"]: e["kind"] for e in answer.json()["entities"]}


def test_an_entitys_kind_is_what_the_reading_agents_rows_said(api, ids, told):
    keys, memories = told
    # The planner's memory says Dana Lee is a person; the coder's says only "Dana",
    # which names no kind: for the coder she is of none (`other`), in the list, its
    # kind filter, her detail and the coder's memory's entities.
    assert _kinds(api, keys["planner"], ids) == {
        "Acme Corp": "organisation",
        "Bob Smith": "person",
        "Dana Lee": "person",
        "Zara Khan": "other",  # a turn's question: the rules name no kind
    }
    assert _kinds(api, keys["coder"], ids) == {"Bob Smith": "person", "Dana": "other"}
    assert _kinds(api, keys["coder"], ids, kind="person") == {"Bob Smith": "person"}
    assert _kinds(api, keys["coder"], ids, kind="other") == {"Dana": "other"}
    dana = _ids(api, keys["planner"], ids)["Dana Lee"]
    assert _detail(api, keys["coder"], ids, dana).json()["kind"] == "other"
    mine = api.get(
        f"/v1/memories/{memories['coder']}",
        params={"user_id": ids["user_id"]},
        headers=_as(keys["coder"]),
    )
    assert [(e["name"], e["kind"]) for e in mine.json()["entities"]] == [("Dana", "other")]
    # Once a row of the coder's says she is a person, she is one for the coder too.
    _write(api, keys["coder"], ids, "Dana Lee joined the band.")
    assert _kinds(api, keys["coder"], ids, kind="person") == {
        "Bob Smith": "person",
        "Dana Lee": "person",
    }


def _entity_ranked(api, key: str, ids, query: str) -> dict[str, list[str]]:
    """What `memories:search` finds for `query`, by text, with the rankings that found each."""
    body = {"user_id": ids["user_id"], "query": query, "k": 10}
    answer = api.post("/v1/memories:search", json=body, headers=_as(key))
    assert answer.status_code == 200, answer.text
    return {m["text"]: m["rankers"] for m in answer.json()["memories"]}


def test_another_agents_names_and_facts_rank_nothing_for_an_agent(api, ids, told):
    keys, _ = told
    query = "Who works at Acme Corp?"
    # "Acme Corp" is a name only the planner's memory says, and the fact that Dana
    # Lee works there is the planner's. The coder's memory of Dana is that fact's
    # hop away from Acme Corp, but for the coder the name names nothing: no row
    # is found by the entity ranking.
    as_coder = _entity_ranked(api, keys["coder"], ids, query)
    assert set(as_coder) == {"Dana plays the cello.", "Bob Smith is a vegetarian."}
    assert all("entity" not in rankers for rankers in as_coder.values()), as_coder
    # Once the coder's own memory says the name, it names Acme Corp for the coder,
    # and Dana a hop away: the same search finds her memory by the entity ranking.
    _write(api, keys["coder"], ids, "Dana works at Acme Corp now.")
    as_coder = _entity_ranked(api, keys["coder"], ids, query)
    assert "entity" in as_coder["Dana plays the cello."], as_coder


def test_a_key_limited_to_an_agent_names_no_other_and_merges_nothing(api, ids, told):
    keys, _ = told
    user = {"user_id": ids["user_id"]}
    dana = _ids(api, keys["planner"], ids)["Dana Lee"]
    refused = [
        api.get("/v1/entities", params=user | {"agent_id": "planner"}, headers=_as(keys["coder"])),
        _detail(api, keys["coder"], ids, dana, agent_id="planner"),
    ]
    for answer in refused:
        assert answer.status_code == 403, answer.text
        message = "this key is limited to agent coder, not planner"
        assert answer.json()["error"]["fields"] == [{"field": "agent_id", "message": message}]
        assert answer.json()["error"]["message"] == f"agent_id: {message}"
    bob = _ids(api, keys["coder"], ids)["Bob Smith"]
    for path, body in (
        (f"/v1/entities/{dana}:merge", user | {"into": bob}),
        (f"/v1/entities/{dana}:unmerge", user),
    ):
        answer = api.post(path, json=body, headers=_as(keys["coder"]))
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["message"] == (
            f"this key is limited to agent coder; POST {path.replace(dana, '{entity_id}')} "
            "changes an entity that every agent of the user sees, which needs a key that is "
            "not limited to an agent"
        )
    # Nothing moved: the planner still sees Dana Lee as before.
    assert _listed(api, keys["planner"], ids)["Dana Lee"] == (["Dana Lee"], 1, 0)


def test_agent_entities_never_cross_users_projects_or_apps(api, app_settings, ids, told):
    keys, _ = told
    coder = keys["coder"]
    assert _listed(api, coder, {"user_id": f"other-{uuid.uuid4().hex[:6]}"}) == {}
    # The same user and agent ids in another app: nothing of this app's.
    other_app = _key(app_settings, f"other-{ids['app']}", agent_id="coder")
    assert _listed(api, other_app, ids) == {}
    dana = _ids(api, coder, ids)["Dana"]
    assert _detail(api, other_app, ids, dana).status_code == 404
    # A project memory of the coder: its project's entity, the coder's only.
    _write(api, coder, ids, "Priya Patel leads Atlas.", scope="project", project_id="atlas")
    assert _listed(api, coder, ids, project_id="atlas") == {
        "Atlas": (["Atlas"], 1, 0),
        "Bob Smith": (["Bob Smith"], 1, 1),
        "Dana": (["Dana"], 1, 0),
        "Priya Patel": (["Priya Patel"], 1, 0),
    }
    assert "Priya Patel" not in _listed(api, coder, ids)
    assert "Priya Patel" not in _listed(api, keys["planner"], ids, project_id="atlas")
    priya = _ids(api, coder, ids, project_id="atlas")["Priya Patel"]
    assert _detail(api, coder, ids, priya).status_code == 404  # without its project
    assert _detail(api, keys["planner"], ids, priya, project_id="atlas").status_code == 404
    assert _detail(api, coder, ids, priya, project_id="atlas").json()["name"] == "Priya Patel"


def test_an_entity_no_row_mentions_any_more_is_the_users(api, ids, pool, told):
    keys, _ = told
    zara = _ids(api, keys["planner"], ids)["Zara Khan"]
    # The planner's turn folded away, as compaction removes archived turns.
    with pool.connection() as conn:
        turn = conn.execute(
            "SELECT id::text FROM episodes WHERE app = %s AND user_id = %s AND agent_id = %s",
            (ids["app"], ids["user_id"], "planner"),
        ).fetchone()
        assert turn is not None
        assert Episodes(conn).delete(ids["app"], ids["user_id"], [turn[0]]) == 1
    assert "Zara Khan" not in _listed(api, keys["planner"], ids)
    assert _detail(api, keys["planner"], ids, zara).status_code == 404
    assert _listed(api, keys["app"], ids)["Zara Khan"] == (["Zara Khan"], 0, 0)
    assert _detail(api, keys["app"], ids, zara).json()["turns_mentioning"] == []
