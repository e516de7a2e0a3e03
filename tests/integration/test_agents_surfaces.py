"""Agents through every surface but the HTTP routes themselves, on the real stack:
the Python client (blocking and asyncio) over real HTTP, the MCP tools on both
transports (stdio configured with AGENT_MEMORY_AGENT_ID; `/mcp` with a key
limited to an agent), the entities each reads, a user's export and import, and
the GDPR delete."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from shared.api_keys import create_key
from shared.client import AsyncMemoryClient, MemoryClient
from shared.client.errors import NotFoundError, PermissionDeniedError
from tests.integration.test_mcp import call, http_session, stdio_session
from tests.support import serve_api


@pytest.fixture
def api_settings(app_settings):
    return app_settings.model_copy(update={"auth_disabled": False, "auth_cache_seconds": 0})


@pytest.fixture
def keys(stack, ids) -> dict[str, str]:
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        return {
            "app": create_key(conn, ids["app"])[0],
            "admin": create_key(conn, ids["app"], admin=True)[0],
            "planner": create_key(conn, ids["app"], agent_id="planner")[0],
            "coder": create_key(conn, ids["app"], agent_id="coder")[0],
        }


@pytest.fixture
def base_url(api_settings, topology) -> Iterator[str]:
    with serve_api(api_settings) as url:
        yield url


def _texts(memories) -> list[tuple[str, str | None]]:
    return sorted((m.text, m.agent_id) for m in memories)


def test_the_blocking_client_acts_as_its_keys_agent(base_url, keys, ids):
    user = ids["user_id"]
    with (
        MemoryClient(base_url, api_key=keys["planner"]) as planner,
        MemoryClient(base_url, api_key=keys["coder"]) as coder,
        MemoryClient(base_url, api_key=keys["app"]) as app,
    ):
        mine = planner.write_memory(user, "Plans in two-week sprints.", entity_name="cadence")
        assert mine.memory is not None and mine.memory.agent_id == "planner"
        shared = app.write_memory(user, "Works from Lisbon.", entity_name="city").memory
        assert shared is not None and shared.agent_id is None
        # The app's key writes as any agent it names.
        coded = app.write_memory(user, "Reviews in pairs.", agent_id="coder").memory
        assert coded is not None and coded.agent_id == "coder"
        assert _texts(planner.iter_memories(user)) == [
            ("Plans in two-week sprints.", "planner"),
            ("Works from Lisbon.", None),
        ]
        assert _texts(coder.list_memories(user).memories) == [
            ("Reviews in pairs.", "coder"),
            ("Works from Lisbon.", None),
        ]
        assert _texts(app.search(user, "sprints lisbon pairs")) == [("Works from Lisbon.", None)]
        found = app.search(user, "sprints", agent_id="planner")
        assert found[0].text == "Plans in two-week sprints."
        memory_id = mine.memory.id
        with pytest.raises(NotFoundError):
            coder.get_memory(user, memory_id)
        with pytest.raises(NotFoundError):
            coder.edit_memory(user, memory_id, text="Plans in sprints.")
        with pytest.raises(PermissionDeniedError) as refused:
            coder.search(user, "sprints", agent_id="planner")
        assert "agent_id: this key is limited to agent coder" in str(refused.value)
        edited = planner.edit_memory(user, memory_id, text="Plans in one-week sprints.")
        assert (edited.agent_id, len(edited.revisions)) == ("planner", 2)
        rolled = planner.rollback_memory(user, memory_id, 1)
        assert rolled.text == "Plans in two-week sprints."
        context = coder.context(user, "c-1", "how does the team work?")
        assert "sprints" not in context.system_instruction
        assert "Reviews in pairs." in context.system_instruction
        assert [m.text for m in coder.delete_memories(user, "sprints")] == []
        assert planner.delete_memory(user, memory_id).deleted


def test_the_asyncio_client_acts_as_the_agent_it_names(base_url, keys, ids):
    user = ids["user_id"]

    async def run() -> tuple[list, list, str]:
        async with AsyncMemoryClient(base_url, api_key=keys["app"]) as app:
            await app.write_memory(user, "Drafts specs first.", agent_id="planner")
            await app.write_memory(user, "Writes tests first.", agent_id="coder")
            turn = await app.record_turn("s-1", user, "Hello", "Hi", agent_id="coder")
            planner = (await app.list_memories(user, agent_id="planner")).memories
            coder = await app.search(user, "first", agent_id="coder")
            return _texts(planner), _texts(coder), turn.turn_id

    planner, coder, turn_id = asyncio.run(run())
    assert planner == [("Drafts specs first.", "planner")]
    assert coder == [("Writes tests first.", "coder")]
    assert turn_id


def test_the_mcp_tools_act_as_their_agent_on_both_transports(base_url, keys, ids, tmp_path):
    user = {"user_id": ids["user_id"]}
    by_planner = {"metadata.by": "planner"}

    async def run() -> dict[str, list[str]]:
        log = tmp_path / "mcp.log"
        async with stdio_session(base_url, keys["app"], ids, log, agent="planner") as stdio:
            kept = {
                "text": "Keeps a decision log.",
                "entity_name": "log",
                "metadata": {"by": "planner"},
            }
            made = await call(stdio, "remember", **kept)
            assert made["memory"]["agent_id"] == "planner"
            memory_id = made["memory"]["id"]
            await call(stdio, "edit_memory", memory_id=memory_id, text="Keeps a design log.")
            rolled = await call(stdio, "rollback_memory", memory_id=memory_id, revision=1)
            assert rolled["text"] == "Keeps a decision log."
            history = await call(stdio, "memory_history", memory_id=memory_id)
            assert [r["action"] for r in history["revisions"]] == ["CREATED", "UPDATED", "UPDATED"]
            planner = await call(stdio, "list_memories")
        async with http_session(base_url, keys["coder"]) as http:
            await call(http, "remember", text="Prefers small pull requests.", **user)
            coder = await call(http, "search_memories", query="decision log pull requests", **user)
            asked = {"query": "decision log", "session_id": "c-1", "filter": by_planner}
            context = await call(http, "get_context", **asked, **user)
            assert "decision log" not in context
            missing = planner["memories"][0]["id"]
            # The planner's memory is none of the coder's to read, change or delete.
            for tool, args in (
                ("forget", {}),
                ("memory_history", {}),
                ("rollback_memory", {"revision": 2}),
                ("edit_memory", {"topic": "x"}),
                ("memory_feedback", {"rating": "wrong"}),
            ):
                refused = await http.call_tool(tool, {"memory_id": missing, **args, **user})
                assert refused.is_error and "no memory" in refused.content[0].text, tool
            assert await call(http, "forget", query="decision log", filter=by_planner, **user) == {
                "deleted": []
            }
        async with stdio_session(base_url, keys["app"], ids, log, agent="planner") as stdio:
            context = await call(stdio, "get_context", query="decision log", filter=by_planner)
            assert "Keeps a decision log." in context
            rated = await call(stdio, "memory_feedback", memory_id=memory_id, rating="useful")
            assert (rated["retired"], rated["tally"]["useful"]) == (False, 1)
            gone = await call(stdio, "forget", query="decision log", filter=by_planner)
            assert gone == {"deleted": [memory_id]}
        return {
            "planner": [m["text"] for m in planner["memories"]],
            "coder": [m["text"] for m in coder["memories"]],
        }

    assert asyncio.run(run()) == {
        "planner": ["Keeps a decision log."],
        "coder": ["Prefers small pull requests."],
    }


def test_the_clients_and_the_mcp_tool_read_entities_as_their_agent(base_url, keys, ids, tmp_path):
    user = ids["user_id"]
    with (
        MemoryClient(base_url, api_key=keys["app"]) as app,
        MemoryClient(base_url, api_key=keys["coder"]) as coder,
    ):
        app.write_memory(user, "Dana Lee works at Acme Corp.", agent_id="planner")
        app.write_memory(user, "Dana plays the cello.", agent_id="coder")
        listed = {
            who: [e.name for e in page.entities]
            for who, page in (
                ("coder", coder.list_entities(user)),
                ("planner", app.list_entities(user, agent_id="planner")),
                ("user", app.list_entities(user)),
            )
        }
        assert listed == {"coder": ["Dana"], "planner": ["Acme Corp", "Dana Lee"], "user": []}
        dana = coder.list_entities(user).entities[0].id
        mine = coder.get_entity(user, dana)
        assert [m.text for m in mine.memories_mentioning] == ["Dana plays the cello."]
        with pytest.raises(PermissionDeniedError) as refused:
            coder.list_entities(user, agent_id="planner")
        assert "agent_id: this key is limited to agent coder" in str(refused.value)

    async def run() -> tuple[list[str], str, dict, dict, str]:
        async with AsyncMemoryClient(base_url, api_key=keys["app"]) as aio:
            page = await aio.list_entities(user, agent_id="planner")
            seen = await aio.get_entity(user, dana, agent_id="coder")
        log = tmp_path / "mcp.log"
        async with stdio_session(base_url, keys["app"], ids, log, agent="planner") as stdio:
            planner = await call(stdio, "entities")
        async with http_session(base_url, keys["coder"]) as http:
            detail = await call(http, "entities", name="Dana", user_id=user)
            unknown = await http.call_tool("entities", {"name": "Dana Lee", "user_id": user})
        assert unknown.is_error
        return [e.name for e in page.entities], seen.name, planner, detail, unknown.content[0].text

    names, seen, planner, detail, unknown = asyncio.run(run())
    assert (names, seen) == (["Acme Corp", "Dana Lee"], "Dana")
    assert [e["name"] for e in planner["entities"]] == ["Acme Corp", "Dana Lee"]
    # Not the planner's fact that Dana Lee works at Acme Corp.
    assert (detail["name"], detail["facts"]) == ("Dana", [])
    assert unknown == "Error executing tool entities: no entity named 'Dana Lee'"


def test_export_import_keeps_each_memorys_agent_and_the_user_delete_takes_all(base_url, keys, ids):
    user, copy = ids["user_id"], f"{ids['user_id']}-copy"
    with MemoryClient(base_url, api_key=keys["admin"]) as admin:
        admin.write_memory(user, "Tracks the roadmap.", agent_id="planner")
        admin.write_memory(user, "Owns the CI config.", agent_id="coder")
        admin.write_memory(user, "Is called Sam.")
        headers = {"Authorization": f"Bearer {keys['admin']}"}
        exported = httpx.get(f"{base_url}/v1/users/{user}:export", headers=headers, timeout=30)
        assert exported.status_code == 200, exported.text
        lines = [json.loads(line) for line in exported.text.splitlines()]
        owners = sorted((r["text"], r["agent_id"]) for r in lines if r.get("type") == "memory")
        assert owners == [
            ("Is called Sam.", None),
            ("Owns the CI config.", "coder"),
            ("Tracks the roadmap.", "planner"),
        ]
        imported = httpx.post(
            f"{base_url}/v1/users/{copy}:import", content=exported.content, headers=headers
        )
        assert imported.status_code == 200, imported.text
        copied = {
            agent: _texts(admin.list_memories(copy, agent_id=agent).memories)
            for agent in ("planner", "coder")
        }
        assert copied == {
            "planner": [("Is called Sam.", None), ("Tracks the roadmap.", "planner")],
            "coder": [("Is called Sam.", None), ("Owns the CI config.", "coder")],
        }
        assert admin.delete_user(user).deleted["memories"] == 3
        for agent in ("planner", "coder", None):
            assert admin.list_memories(user, agent_id=agent).memories == []
        # The copy is another user's: the delete left it whole.
        assert _texts(admin.list_memories(copy, agent_id="coder").memories) == copied["coder"]
