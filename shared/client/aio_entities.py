"""`AsyncEntityRoutes`: the client's methods of entities: a user's entities, and
one with its facts over time, its memories and the turns that mention it.

sync_entities.py is generated from this module (`make client`).
"""

from __future__ import annotations

from datetime import datetime

from shared.client import models as m
from shared.client.aio_connection import AsyncConnection
from shared.client.call import Call
from shared.client.request import one, present, rfc3339, segment


class AsyncEntityRoutes(AsyncConnection):
    async def list_entities(
        self,
        user_id: str,
        *,
        project_id: str | None = None,
        agent_id: str | None = None,
        kind: str | None = None,
        as_of: datetime | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> m.EntityPage:
        """One page of the user's entities in name order (with a project, that
        project's and the user's own; with an agent, those its rows and the user's
        name); `as_of` counts what was seen by then."""
        params = present(
            user_id=user_id,
            project_id=project_id,
            agent_id=agent_id,
            kind=kind,
            as_of=rfc3339(as_of),
            limit=limit,
            cursor=cursor,
        )
        parse = one(m.EntityPage)
        return await self._send(Call("GET", "/v1/entities", parse, params=params, retry_safe=True))

    async def get_entity(
        self,
        user_id: str,
        entity_id: str,
        *,
        project_id: str | None = None,
        agent_id: str | None = None,
        as_of: datetime | str | None = None,
    ) -> m.EntityDetail:
        """One entity: its aliases, its facts over time (with `as_of`, those true then),
        the memories and the latest turns that mention it (with an agent, of those
        it sees: its own and the user's)."""
        params = present(
            user_id=user_id, project_id=project_id, agent_id=agent_id, as_of=rfc3339(as_of)
        )
        path = f"/v1/entities/{segment(entity_id)}"
        parse = one(m.EntityDetail)
        return await self._send(Call("GET", path, parse, params=params, retry_safe=True))
