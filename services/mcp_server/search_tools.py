"""The MCP tools that find memories and turns: search the memories, list them a
page at a time, search the archive of past turns.

A mixin of `services.mcp_server.tools.MemoryTools`, which gives it `_call`, `_user`
and `_scope`. No `from __future__ import annotations`: the SDK reads the signatures.
"""

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from services.mcp_server.arguments import Filter, K, Kind, ProjectId, Query, Scope, Scoped, UserId
from shared.client import AsyncMemoryClient


class SearchTools:
    async def _call(self, ctx: Context, call: Callable[[AsyncMemoryClient], Any]) -> Any:
        raise NotImplementedError  # MemoryTools'

    def _user(self, given: str | None) -> str:
        raise NotImplementedError  # MemoryTools'

    def _scope(self, project_id: str | None) -> Scoped:
        raise NotImplementedError  # MemoryTools'

    async def search_memories(
        self,
        query: Query,
        ctx: Context,
        k: K = None,
        kinds: Annotated[list[Kind] | None, Field(description="Only these kinds")] = None,
        filter: Filter = None,
        user_id: UserId = None,
        project_id: ProjectId = None,
    ) -> dict[str, Any]:
        """Search the user's long-term memories (facts, preferences, rules, events)
        by meaning and by words; the best matches first, each with its id."""
        user, scope = self._user(user_id), self._scope(project_id)
        found = await self._call(
            ctx, lambda c: c.search(user, query, k=k, kinds=kinds, filter=filter, **scope)
        )
        return {"memories": [_brief(m.model_dump(mode="json")) for m in found]}

    async def search_archive(
        self,
        query: Query,
        ctx: Context,
        k: K = None,
        after: Annotated[str | None, Field(description="Only turns after (ISO 8601)")] = None,
        before: Annotated[str | None, Field(description="Only turns before (ISO 8601)")] = None,
        context_turns: Annotated[
            int | None,
            Field(
                description="Also return this many turns before and after each hit, as its "
                "context (0-5; a reply makes sense only with the turn it answers)"
            ),
        ] = None,
        user_id: UserId = None,
        project_id: ProjectId = None,
    ) -> dict[str, Any]:
        """Search past conversation turns, word for word as they were recorded, when
        the memories do not hold a detail (what exactly was said, and when)."""
        user, scope = self._user(user_id), self._scope(project_id)
        found = await self._call(
            ctx,
            lambda c: c.archive_search(
                user,
                query,
                k=k,
                before=before,
                after=after,
                context_turns=context_turns,
                **scope,
            ),
        )
        return {"episodes": [e.model_dump(mode="json") for e in found]}

    async def list_memories(
        self,
        ctx: Context,
        scope: Annotated[Scope | None, Field(description="Only this scope")] = None,
        kind: Annotated[Kind | None, Field(description="Only this kind")] = None,
        limit: Annotated[int | None, Field(description="Page size (1-500)")] = None,
        cursor: Annotated[
            str | None, Field(description="The next_cursor of the previous page")
        ] = None,
        filter: Filter = None,
        user_id: UserId = None,
        project_id: ProjectId = None,
    ) -> dict[str, Any]:
        """List the user's memories, newest first, a page at a time."""
        user, owner = self._user(user_id), self._scope(project_id)
        page = await self._call(
            ctx,
            lambda c: c.list_memories(
                user, scope=scope, kind=kind, limit=limit, cursor=cursor, filter=filter, **owner
            ),
        )
        memories = [_brief(m.model_dump(mode="json")) for m in page.memories]
        return {"memories": memories, "next_cursor": page.next_cursor}


def _brief(memory: dict[str, Any]) -> dict[str, Any]:
    """A memory as an agent needs it: no bookkeeping timestamps but when observed."""
    drop = ("created_at", "updated_at", "deleted_at")
    return {k: v for k, v in memory.items() if k not in drop and v is not None}
