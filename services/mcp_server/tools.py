"""The MCP tools: each one call of the API through `AsyncMemoryClient`.

A tool's failure is raised as the SDK's `ToolError`, which the client receives
as a tool result with `isError` set and the message: the API's own message for
an API error (it names the bad field), the schema's for a bad argument or one
the tool does not take (`strict.strict_tool`). The server keeps serving either way.

No `from __future__ import annotations` here: the SDK reads the tools'
signatures (their types and `Field` descriptions) to build the input schemas.
"""

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from services.mcp_server.arguments import (
    ExpireAt,
    Filter,
    Kind,
    Metadata,
    ProjectId,
    Scope,
    Scoped,
    SessionId,
    TtlSeconds,
    UserId,
)
from services.mcp_server.edit_tools import EditTools
from services.mcp_server.entity_tools import EntityTools
from services.mcp_server.profile_tools import ProfileTools
from services.mcp_server.search_tools import SearchTools
from services.mcp_server.strict import strict_tool
from shared.client import AsyncMemoryClient, MemoryClientError

# Opens the API client for one tool call: the stdio server's one client, or on
# HTTP a client of the app in process carrying the caller's key.
Connect = Callable[[Context], AbstractAsyncContextManager[AsyncMemoryClient]]

INSTRUCTIONS = (
    "Long-term memory of the user across sessions. Call get_context at the start of a "
    "task for what is known about the user; remember durable facts, preferences and "
    "rules as you learn them; record_turn after each exchange so the memory learns "
    "from the conversation, and end_session when the conversation is over; "
    "check_tool_permission before running a risky tool."
)


@dataclass(frozen=True)
class Defaults:
    """The ids a call that omits them gets (the stdio server's environment)."""

    user_id: str | None = None
    project_id: str | None = None
    session_id: str | None = None
    # The agent the server acts as (no tool argument: an agent is what it is
    # configured as, not what the model says; over HTTP, a key limited to it).
    agent_id: str | None = None


class MemoryTools(SearchTools, EditTools, EntityTools, ProfileTools):
    """The tools, bound to how they reach the API and to the default ids."""

    def __init__(self, connect: Connect, defaults: Defaults) -> None:
        self._connect = connect
        self._defaults = defaults

    async def get_context(
        self,
        query: Annotated[str, Field(description="The task or question at hand")],
        ctx: Context,
        user_id: UserId = None,
        session_id: SessionId = None,
        project_id: ProjectId = None,
        token_budget: Annotated[
            int | None, Field(description="Cap on the instruction's size in tokens")
        ] = None,
        sections: Annotated[
            dict[str, int] | None,
            Field(
                description="Caps in tokens per section (0 leaves it out): rules, summary, "
                "recent_turns, profile, memories, long_term_summaries, recalled_turns"
            ),
        ] = None,
        filter: Filter = None,
    ) -> str:
        """The system instruction to work with for this query: the user's rules and
        profile, the memories relevant to it, the session's summary and its recent turns, and the
        turns of earlier conversations that bear on it, with their dates. Call it at
        the start of a task, with the task as the query."""
        user, session = self._user(user_id), self._session(session_id)
        scope = self._scope(project_id)
        answer = await self._call(
            ctx,
            lambda c: c.context(
                user,
                session,
                query,
                token_budget=token_budget,
                sections=sections,
                filter=filter,
                **scope,
            ),
        )
        return answer.system_instruction

    async def remember(
        self,
        text: Annotated[str, Field(description="The memory, one self-contained sentence")],
        ctx: Context,
        kind: Annotated[Kind, Field(description="What sort of memory it is")] = "fact",
        scope: Annotated[
            Scope, Field(description="Where it applies: always, in a project, or this session")
        ] = "global",
        entity_name: Annotated[str, Field(description="Who or what it is about")] = "",
        metadata: Metadata = None,
        expire_at: ExpireAt = None,
        ttl_seconds: TtlSeconds = None,
        user_id: UserId = None,
        project_id: ProjectId = None,
        session_id: SessionId = None,
    ) -> dict[str, Any]:
        """Store a fact, preference, rule or event about the user now. It is merged
        with what is already known: the answer's action is CREATED, UPDATED (an
        existing memory rewritten), DELETED (it contradicted one) or NONE (known)."""
        user = self._user(user_id)
        # A memory names only the id of its own scope (the API refuses others).
        project = self._project(project_id) if scope == "project" else None
        session = self._session(session_id) if scope == "session" else None
        answer = await self._call(
            ctx,
            lambda c: c.write_memory(
                user,
                text,
                scope=scope,
                kind=kind,
                project_id=project,
                session_id=session,
                agent_id=self._agent(),
                entity_name=entity_name,
                metadata=metadata,
                expire_at=expire_at,
                ttl_seconds=ttl_seconds,
            ),
        )
        return answer.model_dump(mode="json")

    async def record_turn(
        self,
        user: Annotated[str, Field(description="What the user said")],
        assistant: Annotated[str, Field(description="What the assistant answered")],
        ctx: Context,
        user_id: UserId = None,
        session_id: SessionId = None,
        project_id: ProjectId = None,
    ) -> dict[str, Any]:
        """Record one exchange of the conversation. Memories are extracted from it in
        the background (seconds later), and it joins the session's summary."""
        who, session = self._user(user_id), self._session(session_id)
        project = self._project(project_id)
        agent = self._defaults.agent_id
        answer = await self._call(
            ctx,
            lambda c: c.record_turn(
                session, who, user, assistant, project_id=project, agent_id=agent
            ),
        )
        return answer.model_dump(mode="json")

    async def end_session(
        self, ctx: Context, user_id: UserId = None, session_id: SessionId = None
    ) -> dict[str, Any]:
        """The conversation is over: what its turns say becomes long-term memories
        now, instead of after a few more turns or a quiet spell."""
        who, session = self._user(user_id), self._session(session_id)
        agent = self._agent()
        answer = await self._call(ctx, lambda c: c.flush_session(session, who, agent_id=agent))
        return answer.model_dump(mode="json")

    async def forget(
        self,
        ctx: Context,
        memory_id: Annotated[str | None, Field(description="The memory's id")] = None,
        query: Annotated[
            str | None, Field(description="Delete the memories matching this instead")
        ] = None,
        filter: Filter = None,
        user_id: UserId = None,
        project_id: ProjectId = None,
    ) -> dict[str, Any]:
        """Delete a memory the user wants gone or that is wrong: by its id (from
        search_memories or list_memories), or every memory matching a query (and the
        filter, if given). Give exactly one of memory_id and query."""
        if (memory_id is None) == (query is None):
            raise ToolError("give exactly one of memory_id and query")
        if memory_id is not None and filter is not None:
            raise ToolError("filter: only with query (memory_id names one memory)")
        user, agent = self._user(user_id), self._agent()
        if memory_id is not None:
            answer = await self._call(
                ctx, lambda c: c.delete_memory(user, memory_id, agent_id=agent)
            )
            return {"deleted": [answer.memory_id] if answer.deleted else []}
        scope = self._scope(project_id)
        assert query is not None  # exactly one of the two, checked above
        gone = await self._call(
            ctx, lambda c: c.delete_memories(user, query, filter=filter, **scope)
        )
        return {"deleted": [m.id for m in gone]}

    async def check_tool_permission(
        self,
        tool_name: Annotated[str, Field(description="The tool the agent is about to run")],
        ctx: Context,
        tool_args: Annotated[
            dict[str, Any] | None, Field(description="Its arguments, as it would get them")
        ] = None,
        user_id: UserId = None,
        session_id: SessionId = None,
        project_id: ProjectId = None,
    ) -> dict[str, Any]:
        """May the agent run this tool call? decision ALLOW: go ahead; BLOCK: do not,
        the user forbade it (reason says why); PENDING: ask the user first."""
        user, session = self._user(user_id), self._session(session_id)
        project = self._project(project_id)
        verdict = await self._call(
            ctx,
            lambda c: c.evaluate_permission(
                user, session, tool_name, tool_args or {}, project_id=project
            ),
        )
        return verdict.model_dump(mode="json")

    async def _call(self, ctx: Context, call: Callable[[AsyncMemoryClient], Any]) -> Any:
        """`call`'s answer; a client error, or arguments the client refuses (a
        ValueError), as a ToolError carrying its message."""
        try:
            async with self._connect(ctx) as client:
                return await call(client)
        except (MemoryClientError, ValueError) as exc:
            raise ToolError(str(exc)) from exc

    def _user(self, given: str | None) -> str:
        user = given or self._defaults.user_id
        if not user:
            raise ToolError("user_id is required: no default user is configured")
        return user

    def _session(self, given: str | None) -> str:
        session = given or self._defaults.session_id
        if not session:
            raise ToolError("session_id is required: no default session is configured")
        return session

    def _project(self, given: str | None) -> str | None:
        return given or self._defaults.project_id

    def _agent(self) -> str | None:
        return self._defaults.agent_id

    def _scope(self, project_id: str | None) -> Scoped:
        """The project (the given one, else the default) and the agent a call is
        scoped to."""
        return {"project_id": self._project(project_id), "agent_id": self._agent()}


_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
_DELETES = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)
TOOLS = {
    "get_context": _READ_ONLY,
    "remember": _WRITES,
    "record_turn": _WRITES,
    "end_session": _WRITES,
    "search_memories": _READ_ONLY,
    "search_archive": _READ_ONLY,
    "list_memories": _READ_ONLY,
    "entities": _READ_ONLY,
    "edit_memory": _WRITES,
    "memory_history": _READ_ONLY,
    "rollback_memory": _WRITES,
    # `wrong` retires the memory (a rollback brings it back).
    "memory_feedback": _DELETES,
    "get_profile": _READ_ONLY,
    "update_profile": _WRITES,
    "profile_history": _READ_ONLY,
    "rollback_profile": _WRITES,
    "forget": _DELETES,
    # It consumes a one-time grant when one matches: not read-only.
    "check_tool_permission": _WRITES,
}


def build_server(connect: Connect, defaults: Defaults, version: str = "") -> MCPServer:
    """The MCP server with every tool, reaching the API through `connect`."""
    # The SDK configures the root logger when a server is built; the process's
    # logging is the project's own (shared.logging), so it is put back.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    tools = MemoryTools(connect, defaults)
    server = MCPServer(
        "agent-memory",
        instructions=INSTRUCTIONS,
        version=version,
        tools=[strict_tool(getattr(tools, n), n, notes) for n, notes in TOOLS.items()],
    )
    root.handlers[:] = handlers
    root.setLevel(level)
    return server
