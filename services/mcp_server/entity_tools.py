"""The MCP tool that reads the user's entities: all of them, or one by name, as
the server's agent (the entities its own rows and the user's name).

A mixin of `services.mcp_server.tools.MemoryTools`, which gives it `_call`,
`_user`, `_project` and `_agent`. No `from __future__ import annotations`: the SDK reads
the signatures.
"""

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from services.mcp_server.arguments import ProjectId, UserId
from shared.client import AsyncMemoryClient
from shared.entities.names import normalise


class EntityTools:
    async def _call(self, ctx: Context, call: Callable[[AsyncMemoryClient], Any]) -> Any:
        raise NotImplementedError  # MemoryTools'

    def _user(self, given: str | None) -> str:
        raise NotImplementedError  # MemoryTools'

    def _project(self, given: str | None) -> str | None:
        raise NotImplementedError  # MemoryTools'

    def _agent(self) -> str | None:
        raise NotImplementedError  # MemoryTools'

    async def entities(
        self,
        ctx: Context,
        name: Annotated[
            str | None, Field(description="An entity's name or alias: that entity in full")
        ] = None,
        as_of: Annotated[
            str | None, Field(description="What was true at this moment (RFC 3339, with zone)")
        ] = None,
        user_id: UserId = None,
        project_id: ProjectId = None,
    ) -> dict[str, Any]:
        """The people, projects, places and things the user talks about. Without a
        name: all of them, with kinds, aliases and how often each is mentioned. With
        one: that entity's facts over time (valid_from, valid_to), the memories and
        the turns that mention it."""
        user, project, agent = self._user(user_id), self._project(project_id), self._agent()
        page = await self._call(
            ctx,
            lambda c: c.list_entities(
                user, project_id=project, agent_id=agent, as_of=as_of, limit=500
            ),
        )
        listed = [e.model_dump(mode="json") for e in page.entities]
        if name is None:
            return {"entities": listed}
        wanted = normalise(name)
        match = next((e for e in listed if wanted in {normalise(a) for a in e["aliases"]}), None)
        if match is None:
            raise ToolError(f"no entity named {name!r}")
        detail = await self._call(
            ctx,
            lambda c: c.get_entity(
                user, match["id"], project_id=project, agent_id=agent, as_of=as_of
            ),
        )
        return detail.model_dump(mode="json")
