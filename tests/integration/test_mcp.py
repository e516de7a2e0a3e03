"""The MCP server (services/mcp_server) through the SDK's own client, on both
transports, against the live API (uvicorn in a thread, API keys required):

- stdio: `python -m services.cli mcp` as a child process, configured by the
  AGENT_MEMORY_* variables, calling the API over HTTP;
- streamable HTTP: the API's own `/mcp`, with the caller's API key.

Each transport lists the tools, remembers a fact, finds it (search and context),
forgets it, sees a permission BLOCK, and answers bad input with tool errors.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import psycopg
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from services.api.app import create_app
from services.dev.localstack.process import free_port
from shared.api_keys import create_key
from shared.client import MemoryClient
from shared.db.episodes import Episode, Episodes
from shared.embeddings import make_embedder
from tests.support import REPO, serve_api

TOOLS = {
    "get_context",
    "remember",
    "record_turn",
    "end_session",
    "search_memories",
    "search_archive",
    "list_memories",
    "entities",
    "edit_memory",
    "memory_history",
    "rollback_memory",
    "memory_feedback",
    "get_profile",
    "update_profile",
    "profile_history",
    "rollback_profile",
    "forget",
    "check_tool_permission",
}


@pytest.fixture
def api_settings(app_settings):
    return app_settings.model_copy(update={"auth_disabled": False, "auth_cache_seconds": 0})


@pytest.fixture
def key(stack, ids) -> str:
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        key, _ = create_key(conn, ids["app"])
    return key


@pytest.fixture
def base_url(api_settings, topology) -> Iterator[str]:
    with serve_api(api_settings) as url:
        yield url


@asynccontextmanager
async def stdio_session(
    url: str, key: str, ids: dict, log: Path, agent: str | None = None
) -> AsyncIterator[ClientSession]:
    """The stdio server as a child process, acting for `agent` when one is given."""
    env = {
        "AGENT_MEMORY_URL": url,
        "AGENT_MEMORY_API_KEY": key,
        "AGENT_MEMORY_USER_ID": ids["user_id"],
        "AGENT_MEMORY_SESSION_ID": ids["session_id"],
        "PYTHONPATH": str(REPO),
    }
    if agent is not None:
        env["AGENT_MEMORY_AGENT_ID"] = agent
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "services.cli", "mcp"], env=env, cwd=str(REPO)
    )
    with log.open("w") as errlog:
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


@asynccontextmanager
async def http_session(url: str, key: str) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **args: Any) -> Any:
    """The tool's answer; a tool error fails the test with its message."""
    result = await session.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    text = result.content[0].text
    return text if tool == "get_context" else json.loads(text)


async def error_of(session: ClientSession, tool: str, **args: Any) -> str:
    result = await session.call_tool(tool, args)
    assert result.is_error, f"{tool}{args} did not fail"
    return result.content[0].text


async def scenario(session: ClientSession, ids: dict, rules: MemoryClient, **who: str) -> None:
    """The whole tour; `who` is the user and session to pass, when the server has
    no defaults (HTTP)."""
    listed = await session.list_tools()
    assert {tool.name for tool in listed.tools} == TOOLS
    assert all(tool.description and tool.input_schema["properties"] for tool in listed.tools)
    # An argument a tool does not take is refused, and its schema says so.
    assert all(tool.input_schema["additionalProperties"] is False for tool in listed.tools)

    fact = "The user's favourite editor is Helix."
    written = await call(session, "remember", text=fact, kind="preference", **_user(who))
    assert written["action"] == "CREATED"
    memory_id = written["memory"]["id"]
    found = await call(session, "search_memories", query="favourite editor", **_user(who))
    assert memory_id in [m["id"] for m in found["memories"]]
    instruction = await call(session, "get_context", query="Which editor to open?", **who)
    assert fact in instruction

    named = await call(session, "entities", **_user(who))
    assert [(e["name"], e["kind"]) for e in named["entities"]] == [("Helix", "other")]
    helix = await call(session, "entities", name="helix", **_user(who))
    assert [m["id"] for m in helix["memories_mentioning"]] == [memory_id]
    assert "no entity named 'Vim'" in await error_of(session, "entities", name="Vim", **_user(who))
    corrected = "The user's favourite editor is Zed."
    edited = await call(
        session,
        "edit_memory",
        memory_id=memory_id,
        text=corrected,
        metadata={"by": "mcp"},
        **_user(who),
    )
    assert (edited["text"], edited["metadata"], edited["revisions"]) == (
        corrected,
        {"by": "mcp"},
        2,
    )
    by_mcp, by_other = {"metadata.by": "mcp"}, {"metadata.by": "someone"}
    found = await call(session, "search_memories", query="editor", filter=by_mcp, **_user(who))
    assert [m["id"] for m in found["memories"]] == [memory_id]
    listing = await call(session, "list_memories", filter=by_other, **_user(who))
    assert listing["memories"] == []
    rated = await call(
        session, "memory_feedback", memory_id=memory_id, rating="useful", reason="yes", **_user(who)
    )
    assert rated == {
        "id": memory_id,
        "rating": "useful",
        "retired": False,
        "tally": {"useful": 1, "not_useful": 0, "wrong": 0},
    }
    assert "rating" in await error_of(
        session, "memory_feedback", memory_id=memory_id, rating="great", **_user(who)
    )

    assert await call(session, "forget", memory_id=memory_id, **_user(who)) == {
        "deleted": [memory_id]
    }
    found = await call(session, "search_memories", query="favourite editor", **_user(who))
    assert memory_id not in [m["id"] for m in found["memories"]]
    listing = await call(session, "list_memories", **_user(who))
    assert memory_id not in [m["id"] for m in listing["memories"]]

    # The rule is added through the API, as a person (or an admin tool) would.
    rules.add_rule(ids["user_id"], "run_shell", r"^rm -rf", "BLOCK")
    verdict = await call(
        session,
        "check_tool_permission",
        tool_name="run_shell",
        tool_args={"CommandLine": "rm -rf /srv"},
        **who,
    )
    assert verdict["decision"] == "BLOCK"

    ended = await call(session, "end_session", **who)
    assert ended["session_id"] == ids["session_id"]
    assert str(uuid.UUID(ended["event_id"])) == ended["event_id"]  # the request published

    await bad_input(session, who)
    await edits_and_rollback(session, who)
    await filtered_context_and_forget(session, who)


async def bad_input(session: ClientSession, who: dict) -> None:
    """Each is a tool error with the schema's or the API's message; the server
    answers the next call as before."""
    assert "text" in await error_of(session, "remember", **_user(who))  # missing
    assert "kind" in await error_of(session, "remember", text="x", kind="bogus", **_user(who))
    assert "query" in await error_of(session, "search_memories", query=7, **_user(who))
    # The API's own 422 and 404 messages.
    assert "422" in await error_of(session, "search_memories", query="x", k=0, **_user(who))
    missing = await error_of(session, "forget", memory_id=str(uuid.uuid4()), **_user(who))
    assert "404" in missing
    assert "Unknown tool" in await error_of(session, "no_such_tool")
    assert "exactly one" in await error_of(session, "forget", **_user(who))
    assert (await call(session, "list_memories", **_user(who)))["memories"] == []


async def edits_and_rollback(session: ClientSession, who: dict) -> None:
    """remember with metadata and a TTL; edit_memory's topic and expiry; an unknown
    argument refused with nothing changed; memory_history and rollback_memory."""
    user = _user(who)
    first = "The user's build tool is Bazel."
    before = datetime.now(UTC)
    written = await call(
        session, "remember", text=first, metadata={"x": 1}, ttl_seconds=3600, **user
    )
    memory_id = written["memory"]["id"]
    history = await call(session, "memory_history", memory_id=memory_id, **user)
    assert (history["text"], history["metadata"]) == (first, {"x": 1})
    _expires_in(history["expire_at"], 3600, before)

    edited = await call(session, "edit_memory", memory_id=memory_id, topic="preferences", **user)
    assert (edited["topic"], edited["text"], edited["revisions"]) == ("preferences", first, 2)
    before = datetime.now(UTC)
    edited = await call(session, "edit_memory", memory_id=memory_id, ttl_seconds=600, **user)
    _expires_in(edited["expire_at"], 600, before)
    assert edited["revisions"] == 3
    edited = await call(session, "edit_memory", memory_id=memory_id, never_expire=True, **user)
    assert (edited["expire_at"], edited["revisions"]) == (None, 4)
    past = await error_of(
        session, "edit_memory", memory_id=memory_id, expire_at="2020-01-01T00:00:00Z", **user
    )
    assert "422" in past and "expire_at: must be in the future" in past
    both = await error_of(
        session, "edit_memory", memory_id=memory_id, never_expire=True, ttl_seconds=600, **user
    )
    assert "never_expire: not with expire_at or ttl_seconds" in both

    # Misspelt or made up: an error naming it, and nothing written.
    typo = await error_of(session, "edit_memory", memory_id=memory_id, ttl_secs=600, **user)
    assert "ttl_secs\n  Extra inputs are not permitted" in typo
    made_up = await error_of(session, "remember", text="Uses Nix.", tags=["build"], **user)
    assert "tags\n  Extra inputs are not permitted" in made_up
    unchanged = await call(session, "memory_history", memory_id=memory_id, **user)
    assert (unchanged["expire_at"], len(unchanged["revisions"])) == (None, 4)
    listing = await call(session, "list_memories", **user)
    assert [m["text"] for m in listing["memories"]] == [first]

    second = "The user's build tool is Buck2."
    await call(session, "edit_memory", memory_id=memory_id, text=second, metadata={"x": 2}, **user)
    history = await call(session, "memory_history", memory_id=memory_id, **user)
    assert [(r["revision"], r["action"], r["new_text"]) for r in history["revisions"]] == [
        (1, "CREATED", first),
        (2, "UPDATED", first),
        (3, "UPDATED", first),
        (4, "UPDATED", first),
        (5, "UPDATED", second),
    ]
    rolled = await call(session, "rollback_memory", memory_id=memory_id, revision=1, **user)
    assert (rolled["text"], rolled["metadata"], rolled["revisions"]) == (first, {"x": 1}, 6)
    again = await error_of(session, "rollback_memory", memory_id=memory_id, revision=1, **user)
    assert "409" in again and "already current" in again
    beyond = await error_of(session, "rollback_memory", memory_id=memory_id, revision=99, **user)
    assert "422" in beyond and "revision" in beyond
    assert await call(session, "forget", memory_id=memory_id, **user) == {"deleted": [memory_id]}


async def filtered_context_and_forget(session: ClientSession, who: dict) -> None:
    """get_context and forget (by query) take the filter search_memories takes: each
    admits only what the filter admits; a bad filter is the API's 422 naming it."""
    user = _user(who)
    deploys, reviews = "Deploys go out on Tuesdays.", "Code reviews happen on Tuesdays."
    ids = {}
    for text, team, entity in ((deploys, "infra", "deploys"), (reviews, "web", "reviews")):
        made = await call(
            session, "remember", text=text, entity_name=entity, metadata={"team": team}, **user
        )
        ids[team] = made["memory"]["id"]
    query = "What happens on Tuesdays?"
    both = await call(session, "get_context", query=query, **who)
    assert deploys in both and reviews in both
    web = {"metadata.team": "web"}
    only_web = await call(session, "get_context", query=query, filter=web, **who)
    assert reviews in only_web and deploys not in only_web
    bad = await error_of(session, "get_context", query=query, filter={"or": {"kind": "x"}}, **who)
    assert "422" in bad and "filter.or" in bad and "a list of 1 to 20" in bad

    infra = {"metadata.team": "infra"}
    by_id = await error_of(session, "forget", memory_id=ids["infra"], filter=infra, **user)
    assert "filter: only with query" in by_id
    gone = await call(session, "forget", query="Tuesdays", filter=infra, **user)
    assert gone == {"deleted": [ids["infra"]]}
    left = await call(session, "list_memories", **user)
    assert [m["id"] for m in left["memories"]] == [ids["web"]]
    gone = await call(session, "forget", query="Tuesdays", **user)
    assert gone == {"deleted": [ids["web"]]}


def _expires_in(expire_at: str, seconds: int, before: datetime) -> None:
    """`expire_at` is `seconds` after a moment between `before` and now."""
    expiry = datetime.fromisoformat(expire_at)
    span = timedelta(seconds=seconds)
    assert before + span <= expiry <= datetime.now(UTC) + span


def _user(who: dict) -> dict:
    return {k: v for k, v in who.items() if k == "user_id"}


def test_stdio_server(base_url, key, ids, tmp_path):
    async def run() -> None:
        with MemoryClient(base_url, api_key=key) as rules:
            async with stdio_session(base_url, key, ids, tmp_path / "mcp.log") as session:
                await scenario(session, ids, rules)

    anyio.run(run)


def test_stdio_server_passes_on_the_apis_401(base_url, ids, tmp_path):
    async def run() -> None:
        async with stdio_session(base_url, "am_wrong", ids, tmp_path / "mcp.log") as session:
            for _ in range(2):  # and it keeps serving
                message = await error_of(session, "list_memories")
                assert "401" in message and "invalid or revoked API key" in message

    anyio.run(run)


def test_http_server(base_url, key, ids):
    who = {"user_id": ids["user_id"], "session_id": ids["session_id"]}

    async def run() -> None:
        with MemoryClient(base_url, api_key=key) as rules:
            async with http_session(base_url, key) as session:
                await scenario(session, ids, rules, **who)
                message = await error_of(session, "get_context", query="x")
                assert "user_id is required" in message

    anyio.run(run)


def _refused(message: object) -> Future:
    """Pub/Sub refusing a message: recording the turn answers 503."""
    refused: Future = Future()
    refused.set_exception(RuntimeError("Pub/Sub is down"))
    return refused


def test_an_api_503_is_a_tool_error(api_settings, topology, key, ids, monkeypatch):
    who = {"user_id": ids["user_id"], "session_id": ids["session_id"]}
    app = create_app(api_settings)

    async def run() -> None:
        async with http_session(url, key) as session:
            for _ in range(2):  # and it keeps serving
                message = await error_of(session, "record_turn", user="hi", assistant="ok", **who)
                assert "503 publish_failed: the turn could not be published" in message

    with serve_api(api_settings, app) as url:
        monkeypatch.setattr(app.state.api.publisher, "publish_message", _refused)
        anyio.run(run)


def test_stdio_server_with_the_api_unreachable(ids, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    async def run() -> None:
        async with stdio_session(url, "am_any", ids, tmp_path / "mcp.log") as session:
            for _ in range(2):
                message = await error_of(session, "search_memories", query="x")
                assert "no answer after 4 attempt(s): ConnectError" in message

    anyio.run(run)


def test_adk_mcp_toolset_over_http(base_url, key):
    """The ADK wiring docs/mcp.md shows: ADK's own McpToolset finds every tool."""
    mcp_tool = pytest.importorskip("google.adk.tools.mcp_tool")

    async def run() -> None:
        params = mcp_tool.StreamableHTTPConnectionParams(
            url=f"{base_url}/mcp", headers={"Authorization": f"Bearer {key}"}
        )
        toolset = mcp_tool.McpToolset(connection_params=params)
        try:
            assert {tool.name for tool in await toolset.get_tools()} == TOOLS
        finally:
            await toolset.close()

    asyncio.run(run())


def test_http_server_needs_an_api_key(base_url):
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    for headers in ({}, {"Authorization": "Bearer am_wrong"}):
        answer = httpx.post(f"{base_url}/mcp", json=initialize, headers=headers, timeout=10)
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthenticated"


def test_stdio_server_without_its_configuration_exits_2():
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "mcp"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "agent-memory mcp: set AGENT_MEMORY_URL and AGENT_MEMORY_API_KEY (the API's URL "
        "and an API key from `agent-memory keys create`)"
    ]
    assert "Traceback" not in done.stderr


def test_the_context_carries_the_turns_of_earlier_conversations(
    base_url, key, ids, pool, api_settings
):
    """An archived turn of an earlier session is in `get_context`'s instruction,
    under its session and day; a caller can leave the section out."""
    with pool.connection() as conn:
        Episodes(conn).archive_locally(
            Episode(
                app=ids["app"],
                user_id=ids["user_id"],
                project_id="",
                session_id="earlier",
                turn_id="t1",
                event_id=str(uuid.uuid4()),
                user_text="The staging database is called orchid.",
                assistant_text="Noted.",
                tool_events=[],
                created_at=datetime(2026, 3, 2, 10, 0, tzinfo=UTC),
            ),
            make_embedder(api_settings).embed,
            neighbours=2,
            dated=True,
        )
    who = {"user_id": ids["user_id"], "session_id": ids["session_id"]}

    async def run() -> None:
        async with http_session(base_url, key) as session:
            query = "What is the staging database called?"
            instruction = await call(session, "get_context", query=query, **who)
            assert "### Session earlier, Monday 2 March 2026, morning\n" in instruction
            assert "User: The staging database is called orchid." in instruction
            left_out = await call(
                session, "get_context", query=query, sections={"recalled_turns": 0}, **who
            )
            assert "orchid" not in left_out

    anyio.run(run)
