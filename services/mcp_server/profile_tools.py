"""The MCP tools of a user's profile: read it, set or clear its fields, read its
history and roll a field back.

A mixin of `services.mcp_server.tools.MemoryTools`, which gives it `_call` and
`_user`. No `from __future__ import annotations`: the SDK reads the signatures.
"""

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from shared.client import AsyncMemoryClient
from shared.profiles.schema import JsonValue

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
            dict[str, JsonValue],
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

    async def profile_history(
        self,
        ctx: Context,
        field: Annotated[
            str | None, Field(description="Only this field's revisions (default: every field's)")
        ] = None,
        user_id: UserId = None,
    ) -> dict[str, Any]:
        """The changes of the user's profile, oldest first (`revisions`): each with
        its field, its number among that field's revisions (what `rollback_profile`
        names), its action (SET, CLEARED, or HISTORY: an older observation, not
        applied), its value, who made it ('' the extraction, 'key:<id>' a write)
        and when."""
        user = self._user(user_id)
        history = await self._call(ctx, lambda c: c.profile_revisions(user))
        keep = ("field", "revision", "action", "value", "source", "created_at")
        revisions = [r for r in history.revisions if field is None or r.field == field]
        return {"revisions": [r.model_dump(include=set(keep)) for r in revisions]}

    async def rollback_profile(
        self,
        field: Annotated[str, Field(description="The profile field to roll back")],
        revision: Annotated[
            int, Field(ge=1, description="The field's revision whose value becomes current")
        ],
        ctx: Context,
        user_id: UserId = None,
    ) -> dict[str, Any]:
        """Make an earlier value of a profile field current again (one the user says
        was right), as a new revision; a cleared revision clears the field. Answers
        the profile after."""
        user = self._user(user_id)
        profile = await self._call(ctx, lambda c: c.rollback_profile(user, field, revision))
        return dict(profile.values)
