"""`MemoryClient`: the blocking client, one method per API route.

The requests and the reading of the answers are `routes`' and `call`'s; this
module only sends them (with the retry policy) and waits.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from shared.client import models as m
from shared.client import routes
from shared.client.call import next_poll
from shared.client.routes import Event
from shared.client.transport import BlockingSession

T = TypeVar("T")


class MemoryClient(BlockingSession):
    """The agent-memory API over HTTP.

    `retries` is the number of extra attempts of a call that is safe to repeat
    (reads, deletes, record_turn with its turn_id) after a transport failure or a
    429/502/503/504, with jittered exponential backoff. `transport` replaces the
    network (an `httpx.ASGITransport`, or a wrapper in tests). Errors are raised
    as `shared.client.errors` exceptions carrying the API's message.
    """

    # -- sessions ------------------------------------------------------------------

    def record_turn(
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
        """Record a finished turn (tool events: `{name, arguments, output}`).

        Without a `turn_id` one is made here, so a retry is the same turn; pass
        your own (an event id) to make recording idempotent across processes."""
        return self._send(
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

    def session(self, session_id: str, user_id: str) -> m.SessionView:
        """The session's short-term memory: rolling summary and buffered turns."""
        return self._send(routes.session(session_id, user_id))

    def flush_session(self, session_id: str, user_id: str) -> m.FlushedSession:
        """Extract the session's waiting turns now (at its end), not when its window closes."""
        return self._send(routes.flush_session(session_id, user_id))

    def delete_session(self, session_id: str, user_id: str) -> m.DeletedSession:
        """Remove the session's short-term memory (its long-term memories stay)."""
        return self._send(routes.delete_session(session_id, user_id))

    # -- reads ---------------------------------------------------------------------

    def context(
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
        """What to put in front of the model for `query`: `system_instruction`."""
        return self._send(
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

    def search(
        self,
        user_id: str,
        query: str,
        *,
        project_id: str | None = None,
        k: int | None = None,
        kinds: Sequence[str] | None = None,
        decompose: bool = False,
    ) -> list[m.ScoredMemory]:
        """Hybrid search of the live memories in scope, best first."""
        return self._send(
            routes.search(
                user_id, query, project_id=project_id, k=k, kinds=kinds, decompose=decompose
            )
        )

    def archive_search(
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
        """Search the episodic archive (every recorded turn), best first; with
        `context_turns` (0-5), each hit with the turns of its session around it. A
        period the query names ("in May 2023", "last week" as of `asked_at`, default
        now) is searched first unless `read_period` is False or `before`/`after` are
        given."""
        return self._send(
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

    def list_memories(
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
        """One page of live memories in creation order; see `iter_memories`."""
        return self._send(
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

    def iter_memories(
        self,
        user_id: str,
        *,
        project_id: str | None = None,
        scope: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
        topic: str | None = None,
    ) -> Iterator[m.Memory]:
        """Every live memory, page after page (`limit` per page)."""
        filters = {"project_id": project_id, "scope": scope, "kind": kind, "topic": topic}
        cursor = None
        while True:
            page = self.list_memories(user_id, limit=limit, cursor=cursor, **filters)
            yield from page.memories
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get_memory(self, user_id: str, memory_id: str) -> m.MemoryDetail:
        """The memory (also a deleted one) with its revisions."""
        return self._send(routes.get_memory(user_id, memory_id))

    def write_memory(
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
        """Write a memory directly, consolidated like an extracted one. It expires at
        `expire_at` or `ttl_seconds` from now (else as the app's TTLs say). Not retried."""
        return self._send(
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

    def delete_memory(self, user_id: str, memory_id: str) -> m.DeletedMemory:
        """Retire a live memory (NotFoundError if it is not live)."""
        return self._send(routes.delete_memory(user_id, memory_id))

    def rollback_memory(self, user_id: str, memory_id: str, revision: int) -> m.MemoryDetail:
        """Make revision `revision`'s text current again, as a new revision; the
        memory with its revisions. NotFoundError for an unknown memory, ConflictError
        for a deleted one or a text already current, InvalidRequestError for a revision
        it does not have."""
        return self._send(routes.rollback_memory(user_id, memory_id, revision))

    def delete_memories(
        self, user_id: str, query: str, *, project_id: str | None = None
    ) -> list[m.Memory]:
        """Retire the memories whose text holds every word of `query`: the
        project's with `project_id`, else the global ones. Not retried."""
        return self._send(routes.delete_memories(user_id, query, project_id=project_id))

    def generate(
        self,
        user_id: str,
        events: Iterable[Event],
        *,
        project_id: str | None = None,
        session_id: str | None = None,
        wait: bool = False,
    ) -> m.Operation:
        """Extract memories from `events` (`{role, text}` or `(role, text)`, role
        `user` or `model`) in the background; see `wait_operation`. Not retried."""
        return self._send(
            routes.generate(
                user_id, events, project_id=project_id, session_id=session_id, wait=wait
            )
        )

    def operation(self, user_id: str, name: str) -> m.Operation:
        return self._send(routes.operation(user_id, name))

    def wait_operation(
        self, user_id: str, name: str, timeout: float = 60.0, interval: float = 0.2
    ) -> m.Operation:
        """Poll the operation until done; OperationTimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        while not (current := self.operation(user_id, name)).done:
            time.sleep(next_poll(name, deadline, interval, timeout))
        return current

    # -- permissions ---------------------------------------------------------------

    def evaluate_permission(
        self,
        user_id: str,
        session_id: str,
        tool_name: str,
        tool_args: Mapping[str, Any],
        *,
        project_id: str | None = None,
    ) -> m.PermissionVerdict:
        """May the agent run this tool call? Not retried: it consumes a grant."""
        return self._send(
            routes.evaluate_permission(
                user_id, session_id, tool_name, tool_args, project_id=project_id
            )
        )

    def grant_once(
        self,
        user_id: str,
        session_id: str,
        tool_name: str,
        tool_args: Mapping[str, Any],
        *,
        ttl_seconds: int | None = None,
    ) -> m.Grant:
        """Allow this exact call once in this session (after a human confirmed)."""
        return self._send(
            routes.grant_once(user_id, session_id, tool_name, tool_args, ttl_seconds=ttl_seconds)
        )

    def add_rule(
        self,
        user_id: str,
        tool_name: str,
        pattern: str,
        action: str,
        *,
        project_id: str = "global",
    ) -> m.Rule:
        """ALLOW or BLOCK the commands matching the RE2 `pattern` (`"*"`: any tool)."""
        return self._send(
            routes.add_rule(user_id, tool_name, pattern, action, project_id=project_id)
        )

    def rules(self, user_id: str, *, project_id: str | None = None) -> list[m.Rule]:
        """The user's rules, oldest first (`project_id="global"`: the global ones)."""
        return self._send(routes.rules(user_id, project_id=project_id))

    def delete_rule(self, rule_id: str, *, user_id: str) -> m.DeletedRule:
        """Delete the user's rule (NotFoundError if it is not that user's)."""
        return self._send(routes.delete_rule(rule_id, user_id=user_id))

    # -- lifecycle and health ------------------------------------------------------

    def delete_user(self, user_id: str) -> m.DeletionCounts:
        """GDPR: everything of the user in this app (safe to repeat)."""
        return self._send(routes.delete_user(user_id))

    def delete_project(self, user_id: str, project_id: str) -> m.DeletionCounts:
        """Everything of one project of the user."""
        return self._send(routes.delete_project(user_id, project_id))

    def request_compaction(
        self,
        user_id: str,
        *,
        project_id: str | None = None,
        retention_days: int | None = None,
        batch_limit: int | None = None,
    ) -> m.CompactionAccepted:
        """Fold old episodes into a summary (admin keys only). Not retried."""
        call = routes.request_compaction(
            user_id, project_id=project_id, retention_days=retention_days, batch_limit=batch_limit
        )
        return self._send(call)

    def health(self) -> dict[str, Any]:
        """`/healthz`: the process answers (raises otherwise)."""
        return self._send(routes.health())

    def ready(self) -> dict[str, Any]:
        """`/readyz`: `{status, down}`, also when it is 503 (something is down)."""
        return self._send(routes.ready())
