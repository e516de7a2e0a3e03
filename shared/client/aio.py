"""`AsyncMemoryClient`: the asyncio client, the same methods as `MemoryClient`.

The requests and the reading of the answers are `routes`' and `call`'s, shared
with the blocking client; this module only sends them and awaits. The methods'
docstrings are `MemoryClient`'s (copied at the end of the module).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import httpx

from shared.client import models as m
from shared.client import routes
from shared.client.call import Call, RetryPolicy, client_headers, next_poll
from shared.client.routes import Event
from shared.client.sync import MemoryClient

T = TypeVar("T")


class AsyncMemoryClient:
    """The agent-memory API over HTTP, for asyncio: `MemoryClient`'s methods, awaited.

    Same arguments, retry policy and exceptions as `MemoryClient`; `transport` is
    an `httpx.AsyncBaseTransport` (e.g. `httpx.ASGITransport(app)`). Use it as an
    async context manager or call `aclose()`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._timeout = timeout
        self._policy = RetryPolicy(retries)
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=client_headers(api_key),
            timeout=timeout,
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _send(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = await self._http.request(**call.request_args(self._timeout))
            except httpx.TransportError as exc:
                delay = self._policy.delay(call, attempt, error=exc)
                if delay is None:
                    raise call.unreachable(exc, attempt + 1) from exc
            else:
                delay = self._policy.delay(call, attempt, status=response.status_code)
                if delay is None:
                    return call.finish(response)
            await asyncio.sleep(delay)
            attempt += 1

    # -- sessions ------------------------------------------------------------------

    async def record_turn(
        self,
        session_id: str,
        user_id: str,
        user: str,
        assistant: str,
        *,
        project_id: str | None = None,
        prev_session_id: str | None = None,
        turn_id: str | None = None,
        created_at: datetime | str | None = None,
        tool_events: Sequence[Mapping[str, Any]] | None = None,
    ) -> m.RecordedTurn:
        return await self._send(
            routes.record_turn(
                session_id,
                user_id,
                user,
                assistant,
                project_id=project_id,
                prev_session_id=prev_session_id,
                turn_id=turn_id,
                created_at=created_at,
                tool_events=tool_events,
            )
        )

    async def session(self, session_id: str, user_id: str) -> m.SessionView:
        return await self._send(routes.session(session_id, user_id))

    async def flush_session(self, session_id: str, user_id: str) -> m.FlushedSession:
        return await self._send(routes.flush_session(session_id, user_id))

    async def delete_session(self, session_id: str, user_id: str) -> m.DeletedSession:
        return await self._send(routes.delete_session(session_id, user_id))

    # -- reads ---------------------------------------------------------------------

    async def context(
        self,
        user_id: str,
        session_id: str,
        query: str,
        *,
        project_id: str | None = None,
        prev_session_id: str | None = None,
        k: int | None = None,
        token_budget: int | None = None,
    ) -> m.Context:
        return await self._send(
            routes.context(
                user_id,
                session_id,
                query,
                project_id=project_id,
                prev_session_id=prev_session_id,
                k=k,
                token_budget=token_budget,
            )
        )

    async def search(
        self,
        user_id: str,
        query: str,
        *,
        project_id: str | None = None,
        k: int | None = None,
        kinds: Sequence[str] | None = None,
        decompose: bool = False,
    ) -> list[m.ScoredMemory]:
        return await self._send(
            routes.search(
                user_id, query, project_id=project_id, k=k, kinds=kinds, decompose=decompose
            )
        )

    async def archive_search(
        self,
        user_id: str,
        query: str,
        *,
        project_id: str | None = None,
        k: int | None = None,
        before: datetime | str | None = None,
        after: datetime | str | None = None,
        context_turns: int | None = None,
        read_period: bool | None = None,
        asked_at: datetime | str | None = None,
    ) -> list[m.Episode]:
        return await self._send(
            routes.archive_search(
                user_id,
                query,
                project_id=project_id,
                k=k,
                before=before,
                after=after,
                context_turns=context_turns,
                read_period=read_period,
                asked_at=asked_at,
            )
        )

    # -- memories ------------------------------------------------------------------

    async def list_memories(
        self,
        user_id: str,
        *,
        project_id: str | None = None,
        scope: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        topic: str | None = None,
    ) -> m.MemoryPage:
        return await self._send(
            routes.list_memories(
                user_id,
                project_id=project_id,
                scope=scope,
                kind=kind,
                limit=limit,
                cursor=cursor,
                topic=topic,
            )
        )

    async def iter_memories(
        self,
        user_id: str,
        *,
        project_id: str | None = None,
        scope: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
        topic: str | None = None,
    ) -> AsyncIterator[m.Memory]:
        filters = {"project_id": project_id, "scope": scope, "kind": kind, "topic": topic}
        cursor = None
        while True:
            page = await self.list_memories(user_id, limit=limit, cursor=cursor, **filters)
            for memory in page.memories:
                yield memory
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def get_memory(self, user_id: str, memory_id: str) -> m.MemoryDetail:
        return await self._send(routes.get_memory(user_id, memory_id))

    async def write_memory(
        self,
        user_id: str,
        text: str,
        *,
        scope: str = "global",
        kind: str = "fact",
        project_id: str | None = None,
        session_id: str | None = None,
        entity_name: str = "",
        consolidate: bool = True,
        expire_at: datetime | str | None = None,
        ttl_seconds: int | None = None,
    ) -> m.WriteResult:
        return await self._send(
            routes.write_memory(
                user_id,
                text,
                scope=scope,
                kind=kind,
                project_id=project_id,
                session_id=session_id,
                entity_name=entity_name,
                consolidate=consolidate,
                expire_at=expire_at,
                ttl_seconds=ttl_seconds,
            )
        )

    async def delete_memory(self, user_id: str, memory_id: str) -> m.DeletedMemory:
        return await self._send(routes.delete_memory(user_id, memory_id))

    async def rollback_memory(self, user_id: str, memory_id: str, revision: int) -> m.MemoryDetail:
        return await self._send(routes.rollback_memory(user_id, memory_id, revision))

    async def delete_memories(
        self, user_id: str, query: str, *, project_id: str | None = None
    ) -> list[m.Memory]:
        return await self._send(routes.delete_memories(user_id, query, project_id=project_id))

    async def generate(
        self,
        user_id: str,
        events: Iterable[Event],
        *,
        project_id: str | None = None,
        session_id: str | None = None,
        wait: bool = False,
    ) -> m.Operation:
        return await self._send(
            routes.generate(
                user_id, events, project_id=project_id, session_id=session_id, wait=wait
            )
        )

    async def operation(self, user_id: str, name: str) -> m.Operation:
        return await self._send(routes.operation(user_id, name))

    async def wait_operation(
        self, user_id: str, name: str, timeout: float = 60.0, interval: float = 0.2
    ) -> m.Operation:
        deadline = time.monotonic() + timeout
        while not (current := await self.operation(user_id, name)).done:
            await asyncio.sleep(next_poll(name, deadline, interval, timeout))
        return current

    # -- permissions ---------------------------------------------------------------

    async def evaluate_permission(
        self,
        user_id: str,
        session_id: str,
        tool_name: str,
        tool_args: Mapping[str, Any],
        *,
        project_id: str | None = None,
    ) -> m.PermissionVerdict:
        return await self._send(
            routes.evaluate_permission(
                user_id, session_id, tool_name, tool_args, project_id=project_id
            )
        )

    async def grant_once(
        self,
        user_id: str,
        session_id: str,
        tool_name: str,
        tool_args: Mapping[str, Any],
        *,
        ttl_seconds: int | None = None,
    ) -> m.Grant:
        return await self._send(
            routes.grant_once(user_id, session_id, tool_name, tool_args, ttl_seconds=ttl_seconds)
        )

    async def add_rule(
        self,
        user_id: str,
        tool_name: str,
        pattern: str,
        action: str,
        *,
        project_id: str = "global",
    ) -> m.Rule:
        return await self._send(
            routes.add_rule(user_id, tool_name, pattern, action, project_id=project_id)
        )

    async def rules(self, user_id: str, *, project_id: str | None = None) -> list[m.Rule]:
        return await self._send(routes.rules(user_id, project_id=project_id))

    async def delete_rule(self, rule_id: str, *, user_id: str) -> m.DeletedRule:
        return await self._send(routes.delete_rule(rule_id, user_id=user_id))

    # -- lifecycle and health ------------------------------------------------------

    async def delete_user(self, user_id: str) -> m.DeletionCounts:
        return await self._send(routes.delete_user(user_id))

    async def delete_project(self, user_id: str, project_id: str) -> m.DeletionCounts:
        return await self._send(routes.delete_project(user_id, project_id))

    async def request_compaction(
        self,
        user_id: str,
        *,
        project_id: str | None = None,
        retention_days: int | None = None,
        batch_limit: int | None = None,
    ) -> m.CompactionAccepted:
        return await self._send(
            routes.request_compaction(
                user_id,
                project_id=project_id,
                retention_days=retention_days,
                batch_limit=batch_limit,
            )
        )

    async def health(self) -> dict[str, Any]:
        return await self._send(routes.health())

    async def ready(self) -> dict[str, Any]:
        return await self._send(routes.ready())


def _copy_docs() -> None:
    """One text per method: the blocking client's docstring is the async one's."""
    for name, method in vars(AsyncMemoryClient).items():
        source = getattr(MemoryClient, name, None)
        if callable(method) and method.__doc__ is None and source is not None:
            method.__doc__ = source.__doc__


_copy_docs()
