"""The MCP tools of a user's profile: read it, and set or clear its fields.

A mixin of `services.mcp_server.tools.MemoryTools`, which gives it `_call` and
`_user`. No `from __future__ import annotations`: the SDK reads the signatures.
"""

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from shared.client import AsyncMemoryClient

UserId = Annotated[
    str | None,
    Field(description="The user the profile belongs to (default: the server's configured user)"),
]


class ProfileTools:
    async def _call(self, ctx: Context, call: Callable[[AsyncMemoryClient], Any]) -> Any:
        raise NotImplementedError  # MemoryTools'

    def _user(self, given: str | None) -> str:
        raise NotImplementedError  # MemoryTools'

    async def get_profile(self, ctx: Context, user_id: UserId = None) -> dict[str, Any]:
        """The user's profile: the fields the app keeps about them (name, time zone,
        language, role...) that are known, by name."""
        user = self._user(user_id)
        profile = await self._call(ctx, lambda c: c.profile(user))
        return dict(profile.values)

    async def update_profile(
        self,
        values: Annotated[
            dict[str, str | float | bool | None],
            Field(description='Fields to set, by name (null clears one), e.g. {"timezone": "CET"}'),
        ],
        ctx: Context,
        user_id: UserId = None,
    ) -> dict[str, Any]:
        """Set fields of the user's profile the user stated or corrected; each must be
        a field of the app's profile schema, of its type. Answers the profile after."""
        user = self._user(user_id)
        profile = await self._call(ctx, lambda c: c.update_profile(user, values))
        return dict(profile.values)
