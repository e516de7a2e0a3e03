"""`AgentMemoryService`: an ADK memory service backed by the agent-memory API.

The ADK `app_name` is not the tenant: the API key of the client decides the app,
so `app_name` is accepted and ignored. The project is, in this order: the
session state's `project_id` (sessions), the call's `custom_metadata["project_id"]`
(deltas and direct writes), the service's `project_id`, else none (global).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from google.adk.memory import BaseMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types

from shared.adk.callbacks import prev_session_of, project_of
from shared.adk.limits import API_DEFAULTS, TurnLimits, query_text
from shared.adk.turns import AdkTurn, content_text, record_turn, turns_from_events
from shared.client import AsyncMemoryClient
from shared.client.errors import NotFoundError

if TYPE_CHECKING:
    from google.adk.events import Event
    from google.adk.sessions import Session

MEMORY_AUTHOR = "user"  # what a memory is about, as ADK's own memory services say


class AgentMemoryService(BaseMemoryService):
    """Sessions and events become turns (`record_turn`), searches are the API's
    hybrid search over the user's long-term memories.

    `add_session_to_memory` may be called after every turn: each turn's id comes
    from the ADK event id of the user's message, so a turn already recorded (by
    this call earlier, or by `memory_callbacks`' after-agent callback) is one
    turn for the API, and turns this process recorded through the same client
    (by either) are not even sent again.
    A turn still waiting for the model's final answer is left for a later call.

    ADK calls `add_session_to_memory` when a session is over: after recording its
    turns it flushes the session, so what they say becomes long-term memories now
    rather than when the session's extraction window would close. A service that
    calls it after every turn passes `flush_sessions=False` (the window then
    closes by itself: after a few turns, or a quiet spell)."""

    def __init__(
        self,
        client: AsyncMemoryClient,
        *,
        project_id: str | None = None,
        search_limit: int | None = None,
        limits: TurnLimits = API_DEFAULTS,
        flush_sessions: bool = True,
    ) -> None:
        self.client = client
        self.project_id = project_id
        self.search_limit = search_limit
        self.limits = limits
        self.flush_sessions = flush_sessions

    async def add_session_to_memory(self, session: Session) -> None:
        turns = [t for t in turns_from_events(session.events) if t.complete]
        prev = prev_session_of(session.state)
        project = project_of(session.state, self.project_id)
        await self._record(session.user_id, session.id, turns, project, prev)
        if self.flush_sessions and turns:
            await self.client.flush_session(session.id, session.user_id)

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Record the turns of a delta of events, as they are (a trailing user
        message without its answer is recorded alone: pass whole turns)."""
        if not session_id:
            raise ValueError("add_events_to_memory needs the session_id: turns belong to one")
        metadata = custom_metadata or {}
        project = project_of(metadata, self.project_id)
        prev = prev_session_of(metadata)
        await self._record(user_id, session_id, turns_from_events(events), project, prev)

    async def _record(
        self,
        user_id: str,
        session_id: str,
        turns: Iterable[AdkTurn],
        project_id: str | None,
        prev_session_id: str | None,
    ) -> None:
        for found in turns:
            await record_turn(
                self.client, user_id, session_id, found, self.limits, project_id, prev_session_id
            )

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Write each entry's text as a memory, consolidated against the live ones.

        Each entry's `custom_metadata` (over the call's) may set `scope` (default:
        `project` when a project applies, else `global`), `kind` (default `fact`),
        `project_id`, `session_id`, `entity_name` and `consolidate`."""
        for entry in memories:
            text = content_text(entry.content)
            if not text:
                continue
            meta: dict[str, Any] = {**(custom_metadata or {}), **(entry.custom_metadata or {})}
            project = project_of(meta, self.project_id)
            scope = str(meta.get("scope") or ("project" if project else "global"))
            await self.client.write_memory(
                user_id,
                text,
                scope=scope,
                kind=str(meta.get("kind") or "fact"),
                project_id=None if scope == "global" else project,
                session_id=meta.get("session_id") or None,
                entity_name=str(meta.get("entity_name") or ""),
                consolidate=bool(meta.get("consolidate", True)),
            )

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        """The API's hybrid search over the user's live memories (the service's
        project and the global ones; global only without a project)."""
        found = await self.client.search(
            user_id, query_text(query), project_id=self.project_id, k=self.search_limit
        )
        return SearchMemoryResponse(
            memories=[
                MemoryEntry(
                    id=m.id,
                    content=types.Content(role="user", parts=[types.Part(text=m.text)]),
                    author=MEMORY_AUTHOR,
                    timestamp=m.updated_at.isoformat(),
                    custom_metadata={
                        "scope": m.scope,
                        "kind": m.kind,
                        "project_id": m.project_id,
                        "score": m.score,
                    },
                )
                for m in found
            ]
        )

    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None
    ) -> None:
        """Retire one memory (it leaves the live view with a DELETED revision); a
        memory that is not live (already deleted, or unknown) is a no-op."""
        if not memory_id:
            raise ValueError("delete_memory needs the memory_id (MemoryEntry.id)")
        with contextlib.suppress(NotFoundError):
            await self.client.delete_memory(user_id, memory_id)

    async def delete_user_memories(self, user_id: str) -> None:
        """Erase everything of `user_id` in the client's app: the API's GDPR deletion
        (`DELETE /v1/users/{user_id}`), which also removes the user's archive,
        permission rules and session buffers, not only the memories."""
        await self.client.delete_user(user_id)
