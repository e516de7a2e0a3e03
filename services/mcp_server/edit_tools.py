"""The MCP tools of one memory the agent names by its id: edit it, read its
revisions, roll it back to one, give feedback on it.

A mixin of `services.mcp_server.tools.MemoryTools`, which gives it `_call` and
`_user`. No `from __future__ import annotations`: the SDK reads the signatures.
"""

from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

from services.mcp_server.arguments import ExpireAt, Kind, MemoryId, Metadata, TtlSeconds, UserId
from shared.client import AsyncMemoryClient
from shared.client.models import MemoryDetail

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
        memory_id: MemoryId,
        ctx: Context,
        text: Annotated[str | None, Field(description="Its new text, one sentence")] = None,
        kind: Annotated[Kind | None, Field(description="Its new kind")] = None,
        entity_name: Annotated[str | None, Field(description="Who or what it is about")] = None,
        topic: Annotated[
            str | None, Field(description='Its topic (lowercase, e.g. "preferences"; "" none)')
        ] = None,
        metadata: Metadata = None,
        expire_at: ExpireAt = None,
        ttl_seconds: TtlSeconds = None,
        never_expire: Annotated[
            bool, Field(description="Clear its expiry: it is kept until deleted")
        ] = False,
        user_id: UserId = None,
    ) -> dict[str, Any]:
        """Correct a memory in place (what is not given stays; metadata given replaces
        it): the change is kept as a revision, which rollback_memory can undo, unlike
        forgetting and remembering anew."""
        user, agent = self._user(user_id), self._agent()
        edited = await self._call(
            ctx,
            lambda c: c.edit_memory(
                user,
                memory_id,
                text=text,
                kind=kind,
                entity_name=entity_name,
                topic=topic,
                metadata=metadata,
                expire_at=expire_at,
                ttl_seconds=ttl_seconds,
                never_expire=never_expire,
                agent_id=agent,
            ),
        )
        return _changed(edited)

    async def memory_history(
        self, memory_id: MemoryId, ctx: Context, user_id: UserId = None
    ) -> dict[str, Any]:
        """A memory as it is now (also a deleted or retired one, with deleted_at) and
        its revisions, oldest first: each with its number (what rollback_memory
        names), its action (CREATED, UPDATED, DELETED...), its text before and
        after, who made it ('' the extraction, 'key:<id>' an edit) and when."""
        user, agent = self._user(user_id), self._agent()
        detail = await self._call(ctx, lambda c: c.get_memory(user, memory_id, agent_id=agent))
        keep = {"revision", "action", "old_text", "new_text", "applied", "source", "created_at"}
        memory = detail.model_dump(mode="json", include=set(_FIELDS) | {"deleted_at"})
        revisions = [r.model_dump(mode="json", include=keep) for r in detail.revisions]
        return memory | {"revisions": revisions}

    async def rollback_memory(
        self,
        memory_id: MemoryId,
        revision: Annotated[
            int,
            Field(ge=1, description="The revision whose text becomes current (memory_history)"),
        ],
        ctx: Context,
        user_id: UserId = None,
    ) -> dict[str, Any]:
        """Make an earlier text of a memory current again (one the user says was
        right), as a new revision; a memory that feedback `wrong` retired is live
        again. Answers the memory after."""
        user, agent = self._user(user_id), self._agent()
        rolled = await self._call(
            ctx, lambda c: c.rollback_memory(user, memory_id, revision, agent_id=agent)
        )
        return _changed(rolled)

    async def memory_feedback(
        self,
        memory_id: MemoryId,
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
        user, agent = self._user(user_id), self._agent()
        given = await self._call(
            ctx, lambda c: c.give_feedback(user, memory_id, rating, reason=reason, agent_id=agent)
        )
        return {
            "id": given.memory.id,
            "rating": given.feedback.rating,
            "retired": given.memory.deleted_at is not None,
            "tally": given.tally.model_dump(),
        }


_FIELDS = ("id", "scope", "kind", "entity_name", "topic", "text", "metadata", "expire_at")


def _changed(memory: MemoryDetail) -> dict[str, Any]:
    """A memory a tool changed, as the agent needs it: its fields, when, and how
    many revisions it has now."""
    fields = memory.model_dump(mode="json", include=set(_FIELDS) | {"updated_at"})
    return fields | {"revisions": len(memory.revisions)}
