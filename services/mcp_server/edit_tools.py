"""The MCP tools that change one memory the agent names by its id: edit it, give
feedback on it.

A mixin of `services.mcp_server.tools.MemoryTools`, which gives it `_call` and
`_user`. No `from __future__ import annotations`: the SDK reads the signatures.
"""

from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

from services.mcp_server.arguments import Kind, UserId
from shared.client import AsyncMemoryClient

Rating = Literal["useful", "not_useful", "wrong"]


class EditTools:
    async def _call(self, ctx: Context, call: Callable[[AsyncMemoryClient], Any]) -> Any:
        raise NotImplementedError  # MemoryTools'

    def _user(self, given: str | None) -> str:
        raise NotImplementedError  # MemoryTools'

    def _agent(self) -> str | None:
        raise NotImplementedError  # MemoryTools'

    async def edit_memory(
        self,
        memory_id: Annotated[str, Field(description="The memory's id (from a search or list)")],
        ctx: Context,
        text: Annotated[str | None, Field(description="Its new text, one sentence")] = None,
        kind: Annotated[Kind | None, Field(description="Its new kind")] = None,
        entity_name: Annotated[str | None, Field(description="Who or what it is about")] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Its new metadata object (replaces it)")
        ] = None,
        user_id: UserId = None,
    ) -> dict[str, Any]:
        """Correct a memory in place (what is not given stays): the change is kept
        as a revision, which can be rolled back, unlike forgetting and remembering anew."""
        user, agent = self._user(user_id), self._agent()
        edited = await self._call(
            ctx,
            lambda c: c.edit_memory(
                user,
                memory_id,
                text=text,
                kind=kind,
                entity_name=entity_name,
                metadata=metadata,
                agent_id=agent,
            ),
        )
        fields = ("id", "scope", "kind", "entity_name", "text", "metadata", "updated_at")
        return {name: getattr(edited, name) for name in fields} | {
            "revisions": len(edited.revisions)
        }

    async def memory_feedback(
        self,
        memory_id: Annotated[str, Field(description="The memory's id (from a search or list)")],
        rating: Annotated[
            Rating,
            Field(
                description="useful or not_useful (ranks it higher or lower); wrong (retires "
                "it, and the conversation it came from does not bring it back)"
            ),
        ],
        ctx: Context,
        reason: Annotated[str | None, Field(description="Why, briefly")] = None,
        user_id: UserId = None,
    ) -> dict[str, Any]:
        """Say whether a memory helped: a memory that is wrong is retired at once
        (kept in its history, and a rollback brings it back); useful or not useful
        weighs it in later searches."""
        user = self._user(user_id)
        given = await self._call(
            ctx, lambda c: c.give_feedback(user, memory_id, rating, reason=reason)
        )
        return {
            "id": given.memory.id,
            "rating": given.feedback.rating,
            "retired": given.memory.deleted_at is not None,
            "tally": given.tally.model_dump(),
        }
