# Generated from shared/client/aio_profiles.py by `make client` (tools/client_sync.py).
# Do not edit: change shared/client/aio_profiles.py and run `make client`.
"""`ProfileRoutes`: the client's methods of profiles: the app's profile schema,
and a user's profile, its changes, its history and its rollback.

Generated from aio_profiles.py, the asyncio client, by `make client`: edit that module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared.client import models as m
from shared.client.call import Call
from shared.client.request import one, segment
from shared.client.sync_connection import Connection


class ProfileRoutes(Connection):
    def profile_schema(self) -> m.ProfileConfig:
        """The app's profile schema (no field: the app keeps no profile)."""
        parse = one(m.ProfileConfig)
        return self._send(Call("GET", "/v1/config/profile", parse, retry_safe=True))

    def set_profile_schema(self, fields: Sequence[Mapping[str, Any]]) -> m.ProfileConfig:
        """Replace the app's profile schema (an admin key): each field a name, a type
        (string, enum with its values, number, boolean) and a description."""
        body = {"fields": [dict(f) for f in fields]}
        parse = one(m.ProfileConfig)
        return self._send(Call("PUT", "/v1/config/profile", parse, json=body, retry_safe=True))

    def profile(self, user_id: str) -> m.Profile:
        """The user's profile: each field of the schema that has a value."""
        path = f"/v1/users/{segment(user_id)}/profile"
        return self._send(Call("GET", path, one(m.Profile), retry_safe=True))

    def update_profile(self, user_id: str, values: Mapping[str, Any]) -> m.Profile:
        """Set the named fields (None clears one), all or none; the profile after."""
        path = f"/v1/users/{segment(user_id)}/profile"
        body = {"values": dict(values)}
        return self._send(Call("PATCH", path, one(m.Profile), json=body, retry_safe=True))

    def profile_revisions(self, user_id: str) -> m.ProfileHistory:
        """Every change of the user's profile, applied or not, oldest first."""
        path = f"/v1/users/{segment(user_id)}/profile/revisions"
        return self._send(Call("GET", path, one(m.ProfileHistory), retry_safe=True))

    def rollback_profile(self, user_id: str, field: str, revision: int) -> m.Profile:
        """Make revision `revision` of `field` current again (a cleared one clears
        it), as a new revision; the profile after. NotFoundError for a field the
        schema does not have or a revision the field does not have, ConflictError
        for a value already current or one that no longer fits the field."""
        # Not retried: after a lost answer, a second attempt finds the value current (409).
        path = f"/v1/users/{segment(user_id)}/profile:rollback"
        body = {"field": field, "revision": revision}
        return self._send(Call("POST", path, one(m.Profile), json=body))
