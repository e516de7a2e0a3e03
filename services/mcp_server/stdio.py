"""`agent-memory mcp`: the MCP tools over stdio, for a client that launches them.

Configured by the environment the MCP client's configuration gives it (never by
the API's own `AM_*` settings: this process only calls the API over HTTP):

- `AGENT_MEMORY_URL`, `AGENT_MEMORY_API_KEY`: where the API is, and the key of
  the app (tenant) whose memory this is. Both required.
- `AGENT_MEMORY_USER_ID`, `AGENT_MEMORY_PROJECT_ID`, `AGENT_MEMORY_SESSION_ID`:
  the ids a tool call that omits them gets. Without a session id each run of the
  server is a session of its own.
- `AGENT_MEMORY_AGENT_ID`: the agent every tool call acts as (no tool takes it).

stdout carries the protocol: every log line goes to stderr.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Mapping
from contextlib import nullcontext

import anyio

from services.mcp_server.tools import Defaults, build_server
from shared.client import AsyncMemoryClient

REQUIRED = ("AGENT_MEMORY_URL", "AGENT_MEMORY_API_KEY")


class MissingConfiguration(Exception):
    """A required variable is unset: one line for stderr."""


def defaults_from(env: Mapping[str, str]) -> Defaults:
    return Defaults(
        user_id=env.get("AGENT_MEMORY_USER_ID") or None,
        project_id=env.get("AGENT_MEMORY_PROJECT_ID") or None,
        agent_id=env.get("AGENT_MEMORY_AGENT_ID") or None,
        session_id=env.get("AGENT_MEMORY_SESSION_ID") or f"mcp-{uuid.uuid4().hex[:12]}",
    )


def endpoint_from(env: Mapping[str, str]) -> tuple[str, str]:
    missing = [name for name in REQUIRED if not env.get(name)]
    if missing:
        raise MissingConfiguration(
            f"agent-memory mcp: set {' and '.join(missing)} (the API's URL and an API key "
            "from `agent-memory keys create`)"
        )
    return env["AGENT_MEMORY_URL"], env["AGENT_MEMORY_API_KEY"]


async def serve(url: str, api_key: str, defaults: Defaults, version: str) -> None:
    # One client for the process's life: its connections are reused call after call.
    async with AsyncMemoryClient(url, api_key=api_key) as client:
        server = build_server(lambda _ctx: nullcontext(client), defaults, version)
        await server.run_stdio_async()


def main(version: str = "", env: Mapping[str, str] | None = None) -> int:
    """Serve until the client closes stdin; 2 when the configuration is missing."""
    env = os.environ if env is None else env
    try:
        url, api_key = endpoint_from(env)
    except MissingConfiguration as exc:
        print(exc, file=sys.stderr)
        return 2
    anyio.run(serve, url, api_key, defaults_from(env), version)
    return 0
