"""`AsyncMemoryRoutes`: the client's methods of long-term memory: search, the
archive, reading and writing memories, and extraction as an operation.

sync_memories.py is generated from this module (`make client`); `AsyncMemoryClient`
(aio.py) adds the routes of sessions, permissions and the lifecycle.
"""

from __future__ import annotations

import json
import time
from asyncio import sleep
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import Any, Unpack

from shared.client import models as m
from shared.client.aio_connection import AsyncConnection
from shared.client.call import Call, next_poll
from shared.client.request import (
    Event,
    MemoryFilters,
    SearchOptions,
    events_body,
    listed,
    one,
    present,
    rfc3339,
    search_body,
    segment,
)

# How much longer than the client's timeout `memories:generate` with wait may take:
# the server holds the answer up to AM_OPERATION_WAIT_SECONDS (30 s by default).
GENERATE_WAIT_ALLOWANCE = 60.0


class AsyncMemoryRoutes(AsyncConnection):
    # -- search --------------------------------------------------------------------

    async def search(
        self,
        user_id: str,
        query: str,
        *,
        kinds: Sequence[str] | None = None,
        decompose: bool = False,
        as_of: datetime | str | None = None,
        observed_after: datetime | str | None = None,
        observed_before: datetime | str | None = None,
        filter: dict[str, Any] | None = None,
        **options: Unpack[SearchOptions],
    ) -> list[m.ScoredMemory]:
        """Hybrid search of the live memories in scope (the `options`: a project, an
        agent, at most `k` hits) that `filter`, a filter expression, admits, best
        first (with `as_of`, of those live at that moment, as they were)."""
        kinds = list(kinds) if kinds is not None else None
        body = search_body(
            user_id,
            query,
            decompose=decompose,
            kinds=kinds,
            as_of=rfc3339(as_of),
            observed_after=rfc3339(observed_after),
            observed_before=rfc3339(observed_before),
            filter=filter,
            **options,
        )
        parse = listed(m.ScoredMemory, "memories")
        call = Call("POST", "/v1/memories:search", parse, json=body, retry_safe=True)
        return await self._send(call)

    async def archive_search(
        self,
        user_id: str,
        query: str,
        *,
        before: datetime | str | None = None,
        after: datetime | str | None = None,
        context_turns: int | None = None,
        read_period: bool | None = None,
        asked_at: datetime | str | None = None,
        **options: Unpack[SearchOptions],
    ) -> list[m.EpisodeView]:
        """Search the episodic archive (every recorded turn) in scope (the `options`:
        a project, an agent, at most `k` hits), best first; with
        `context_turns` (0-5), each hit with the turns of its session around it. A
        period the query names ("in May 2023", "last week" as of `asked_at`, default
        now) is searched first unless `read_period` is False or `before`/`after` are
        given."""
        body = search_body(
            user_id,
            query,
            before=rfc3339(before),
            after=rfc3339(after),
            context_turns=context_turns,
            read_period=read_period,
            asked_at=rfc3339(asked_at),
            **options,
        )
        parse = listed(m.EpisodeView, "episodes")
        call = Call("POST", "/v1/archive:search", parse, json=body, retry_safe=True)
        return await self._send(call)

    # -- memories ------------------------------------------------------------------

    async def list_memories(
        self,
        user_id: str,
        *,
        cursor: str | None = None,
        as_of: datetime | str | None = None,
        **filters: Unpack[MemoryFilters],
    ) -> m.MemoryPage:
        """One page of live memories in creation order (those the `filters` admit: a
        project, agent, scope, kind or topic, and `filter`, a filter expression; with
        `as_of`, those live at that moment, as they were); see `iter_memories`."""
        expression = filters.pop("filter", None)
        params = present(
            user_id=user_id,
            cursor=cursor,
            as_of=rfc3339(as_of),
            filter=json.dumps(expression) if expression is not None else None,
            **filters,
        )
        parse = one(m.MemoryPage)
        return await self._send(Call("GET", "/v1/memories", parse, params=params, retry_safe=True))

    async def iter_memories(
        self, user_id: str, **filters: Unpack[MemoryFilters]
    ) -> AsyncIterator[m.MemoryView]:
        """Every live memory the `filters` admit, page after page (`limit` per page)."""
        cursor = None
        while True:
            page = await self.list_memories(user_id, cursor=cursor, **filters)
            for memory in page.memories:
                yield memory
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def get_memory(
        self, user_id: str, memory_id: str, *, agent_id: str | None = None
    ) -> m.MemoryDetail:
        """The memory (also a deleted one) with its revisions; with `agent_id`, one of
        that agent's or the user's (NotFoundError for another agent's)."""
        path = f"/v1/memories/{segment(memory_id)}"
        params = present(user_id=user_id, agent_id=agent_id)
        parse = one(m.MemoryDetail)
        return await self._send(Call("GET", path, parse, params=params, retry_safe=True))

    async def write_memory(
        self,
        user_id: str,
        text: str,
        *,
        scope: str = "global",
        kind: str = "fact",
        project_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        entity_name: str = "",
        consolidate: bool = True,
        expire_at: datetime | str | None = None,
        ttl_seconds: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> m.WriteMemoryResponse:
        """Write a memory directly, consolidated like an extracted one, with the
        caller's `metadata`. It expires at `expire_at` or `ttl_seconds` from now (else
        as the app's TTLs say). Not retried."""
        body = present(
            metadata=metadata,
            user_id=user_id,
            text=text,
            scope=scope,
            kind=kind,
            project_id=project_id,
            agent_id=agent_id,
            session_id=session_id,
            entity_name=entity_name,
            consolidate=consolidate,
            expire_at=rfc3339(expire_at),
            ttl_seconds=ttl_seconds,
        )
        return await self._send(Call("POST", "/v1/memories", one(m.WriteMemoryResponse), json=body))

    async def delete_memory(
        self, user_id: str, memory_id: str, *, agent_id: str | None = None
    ) -> m.DeleteMemoryResponse:
        """Retire a live memory (NotFoundError if it is not live, or not one the agent
        `agent_id` reads)."""
        path = f"/v1/memories/{segment(memory_id)}"
        params = present(user_id=user_id, agent_id=agent_id)
        parse = one(m.DeleteMemoryResponse)
        return await self._send(Call("DELETE", path, parse, params=params, retry_safe=True))

    async def edit_memory(
        self,
        user_id: str,
        memory_id: str,
        *,
        text: str | None = None,
        kind: str | None = None,
        entity_name: str | None = None,
        topic: str | None = None,
        metadata: dict[str, Any] | None = None,
        expire_at: datetime | str | None = None,
        ttl_seconds: int | None = None,
        never_expire: bool = False,
        agent_id: str | None = None,
    ) -> m.MemoryDetail:
        """Change the fields given (the others stay) as one revision whose source is
        this client's key; `never_expire` clears the expiry. The memory with its
        revisions. NotFoundError for an unknown memory, ConflictError for a deleted
        one or an entity another live memory has; ValueError for `never_expire` with
        an expiry (the API would take the expiry, a null `expire_at` being none)."""
        if never_expire and (expire_at is not None or ttl_seconds is not None):
            raise ValueError("never_expire: not with expire_at or ttl_seconds")
        body = present(
            user_id=user_id,
            agent_id=agent_id,
            text=text,
            kind=kind,
            entity_name=entity_name,
            topic=topic,
            metadata=metadata,
            expire_at=rfc3339(expire_at),
            ttl_seconds=ttl_seconds,
        )
        if never_expire:
            body["expire_at"] = None
        path = f"/v1/memories/{segment(memory_id)}"
        # Retried: the same edit again changes nothing; but `ttl_seconds` counts from
        # each attempt, so a second one would move the expiry again.
        again = ttl_seconds is None
        return await self._send(
            Call("PATCH", path, one(m.MemoryDetail), json=body, retry_safe=again)
        )

    async def rollback_memory(
        self, user_id: str, memory_id: str, revision: int, *, agent_id: str | None = None
    ) -> m.MemoryDetail:
        """Make revision `revision`'s text current again, as a new revision; the
        memory with its revisions (one that `wrong` feedback retired is live again).
        NotFoundError for an unknown memory, ConflictError for one deleted otherwise
        or a text already current, InvalidRequestError for a revision it does not have."""
        # Not retried: after a lost answer, a second attempt finds the text current (409).
        path = f"/v1/memories/{segment(memory_id)}:rollback"
        body = present(user_id=user_id, revision=revision, agent_id=agent_id)
        return await self._send(Call("POST", path, one(m.MemoryDetail), json=body))

    async def give_feedback(
        self,
        user_id: str,
        memory_id: str,
        rating: str,
        *,
        reason: str | None = None,
        agent_id: str | None = None,
    ) -> m.FeedbackResponse:
        """Feedback on a live memory: `useful` or `not_useful` (they weigh it in
        searches; the caller's latest counts) or `wrong` (it is retired; a rollback
        brings it back), with an optional reason. The feedback recorded, each
        rating's count and the memory after it. NotFoundError for an unknown memory,
        ConflictError for a deleted one; with `agent_id` (or a key limited to an agent),
        one of that agent's or the user's, else NotFoundError."""
        # Not retried: every feedback is recorded, and a second `wrong` finds it retired.
        path = f"/v1/memories/{segment(memory_id)}:feedback"
        body = present(user_id=user_id, rating=rating, reason=reason, agent_id=agent_id)
        return await self._send(Call("POST", path, one(m.FeedbackResponse), json=body))

    async def delete_memories(
        self,
        user_id: str,
        query: str,
        *,
        project_id: str | None = None,
        agent_id: str | None = None,
        filter: dict[str, Any] | None = None,
    ) -> list[m.MemoryView]:
        """Retire the memories whose text holds every word of `query` (and that
        `filter` admits): the project's with `project_id`, else the global ones.
        Not retried."""
        # Not retried: a second attempt after a lost answer would find nothing left to
        # delete and answer an empty list, hiding what the first one deleted.
        body = search_body(user_id, query, project_id=project_id, agent_id=agent_id, filter=filter)
        parse = listed(m.MemoryView, "deleted")
        return await self._send(Call("POST", "/v1/memories:delete", parse, json=body))

    async def generate(
        self,
        user_id: str,
        events: Iterable[Event],
        *,
        project_id: str | None = None,
        session_id: str | None = None,
        agent_id: str | None = None,
        wait: bool = False,
    ) -> m.Operation:
        """Extract memories from `events` (`{role, text}` or `(role, text)`, role
        `user` or `model`) in the background; see `wait_operation`. Not retried."""
        body = {
            "user_id": user_id,
            "scope": present(project_id=project_id, session_id=session_id, agent_id=agent_id),
            "events": events_body(events),
            "wait": wait,
        }
        allowance = GENERATE_WAIT_ALLOWANCE if wait else 0.0
        parse = one(m.Operation)
        call = Call("POST", "/v1/memories:generate", parse, json=body, read_allowance=allowance)
        return await self._send(call)

    async def operation(
        self, user_id: str, name: str, *, agent_id: str | None = None
    ) -> m.Operation:
        """The operation `name` (with or without its "operations/" prefix); one that
        an agent started is read as that agent (`agent_id`, or the key's agent)."""
        path = f"/v1/operations/{segment(name.removeprefix('operations/'))}"
        params = present(user_id=user_id, agent_id=agent_id)
        return await self._send(Call("GET", path, one(m.Operation), params=params, retry_safe=True))

    async def wait_operation(
        self,
        user_id: str,
        name: str,
        timeout: float = 60.0,
        interval: float = 0.2,
        *,
        agent_id: str | None = None,
    ) -> m.Operation:
        """Poll the operation until done; OperationTimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        while not (current := await self.operation(user_id, name, agent_id=agent_id)).done:
            await sleep(next_poll(name, deadline, interval, timeout))
        return current
