"""`AsyncMemoryClient`: the agent-memory API over HTTP, one method per route.

This module and aio_memories.py, aio_connection.py are the client's source:
`make client` writes the blocking `MemoryClient` (sync.py, sync_memories.py,
sync_connection.py) from them (tools/client_sync.py). Each method builds its
`Call` (the request, whether it may be repeated, how to read the answer) and
sends it through the connection, which applies the retry policy.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from shared.client import models as m
from shared.client.aio_entities import AsyncEntityRoutes
from shared.client.aio_memories import AsyncMemoryRoutes
from shared.client.aio_profiles import AsyncProfileRoutes
from shared.client.call import Call
from shared.client.request import listed, one, present, rfc3339, segment, tool_call


class AsyncMemoryClient(AsyncMemoryRoutes, AsyncEntityRoutes, AsyncProfileRoutes):
    """The agent-memory API over HTTP.

    `retries` is the number of extra attempts of a call that is safe to repeat
    (reads, deletes, record_turn with its turn_id) after a transport failure or a
    429/502/503/504, with jittered exponential backoff. `transport` replaces the
    network (tests pass the app itself, or a wrapper around the real one). Errors
    are raised as `shared.client.errors` exceptions carrying the API's message.
    Use it as a context manager, or call `aclose()`.
    """

    # -- sessions ------------------------------------------------------------------

    async def record_turn(
        self,
        session_id: str,
        user_id: str,
        user: str,
        assistant: str,
        *,
        project_id: str | None = None,
        agent_id: str | None = None,
        prev_session_id: str | None = None,
        turn_id: str | None = None,
        created_at: datetime | str | None = None,
        tool_events: Sequence[Mapping[str, Any]] | None = None,
    ) -> m.RecordTurnResponse:
        """Record a finished turn (tool events: `{name, arguments, output}`).

        Without a `turn_id` one is made here, so a retry is the same turn; pass
        your own (an event id) to make recording idempotent across processes."""
        # The turn_id is fixed before the first attempt: the same turn_id is always
        # the same event and one turn, which is what makes the retry safe.
        body = present(
            user_id=user_id,
            user=user,
            assistant=assistant,
            project_id=project_id,
            agent_id=agent_id,
            prev_session_id=prev_session_id,
            turn_id=turn_id or str(uuid.uuid4()),
            created_at=rfc3339(created_at),
            tool_events=[dict(t) for t in tool_events] if tool_events else None,
        )
        path = f"/v1/sessions/{segment(session_id)}/turns"
        parse = one(m.RecordTurnResponse)
        return await self._send(Call("POST", path, parse, json=body, retry_safe=True))

    async def session(
        self, session_id: str, user_id: str, *, agent_id: str | None = None
    ) -> m.SessionResponse:
        """The session's short-term memory: rolling summary and buffered turns. An
        agent's session is read as that agent (`agent_id`)."""
        path, params = _session_call(session_id, user_id, agent_id)
        parse = one(m.SessionResponse)
        return await self._send(Call("GET", path, parse, params=params, retry_safe=True))

    async def flush_session(
        self, session_id: str, user_id: str, *, agent_id: str | None = None
    ) -> m.FlushSessionResponse:
        """Extract the session's waiting turns now (at its end), not when its window closes."""
        # A second flush is harmless: it finds less, or nothing, to extract.
        path, body = _session_call(session_id, user_id, agent_id)
        parse = one(m.FlushSessionResponse)
        call = Call("POST", f"{path}:flush", parse, json=body, retry_safe=True)
        return await self._send(call)

    async def delete_session(
        self, session_id: str, user_id: str, *, agent_id: str | None = None
    ) -> m.DeleteSessionResponse:
        """Remove the session's short-term memory (its long-term memories stay)."""
        path, params = _session_call(session_id, user_id, agent_id)
        parse = one(m.DeleteSessionResponse)
        return await self._send(Call("DELETE", path, parse, params=params, retry_safe=True))

    # -- context -------------------------------------------------------------------

    async def context(
        self,
        user_id: str,
        session_id: str,
        query: str,
        *,
        project_id: str | None = None,
        agent_id: str | None = None,
        prev_session_id: str | None = None,
        k: int | None = None,
        token_budget: int | None = None,
        sections: Mapping[str, int] | None = None,
        asked_at: datetime | str | None = None,
        filter: dict[str, Any] | None = None,
    ) -> m.ContextResponse:
        """What to put in front of the model for `query`: `system_instruction`, with
        each of its items (rules, memories, long-term summaries, recalled turns) and
        where it comes from. `sections`: a cap in tokens per section (0: off), e.g.
        `{"recalled_turns": 800}`; `asked_at`: what "last month" in `query` means;
        `filter`: only the memories and rules this filter expression admits."""
        body = present(
            user_id=user_id,
            session_id=session_id,
            query=query,
            project_id=project_id,
            agent_id=agent_id,
            prev_session_id=prev_session_id,
            k=k,
            token_budget=token_budget,
            sections=dict(sections) if sections is not None else None,
            asked_at=rfc3339(asked_at),
            filter=filter,
        )
        parse = one(m.ContextResponse)
        return await self._send(Call("POST", "/v1/context", parse, json=body, retry_safe=True))

    # -- permissions ---------------------------------------------------------------

    async def evaluate_permission(
        self,
        user_id: str,
        session_id: str,
        tool_name: str,
        tool_args: Mapping[str, Any],
        *,
        project_id: str | None = None,
    ) -> m.EvaluateResponse:
        """May the agent run this tool call? Not retried: it consumes a grant."""
        # Not retried: an ALLOW from an allow-once grant consumes the grant, so a retry
        # after a lost answer would see PENDING for a call the human had allowed.
        body = tool_call(user_id, session_id, tool_name, tool_args, project_id=project_id)
        parse = one(m.EvaluateResponse)
        return await self._send(Call("POST", "/v1/permissions:evaluate", parse, json=body))

    async def grant_once(
        self,
        user_id: str,
        session_id: str,
        tool_name: str,
        tool_args: Mapping[str, Any],
        *,
        ttl_seconds: int | None = None,
    ) -> m.GrantResponse:
        """Allow this exact call once in this session (after a human confirmed)."""
        body = tool_call(user_id, session_id, tool_name, tool_args, ttl_seconds=ttl_seconds)
        parse = one(m.GrantResponse)
        return await self._send(Call("POST", "/v1/permissions/grants", parse, json=body))

    async def add_rule(
        self,
        user_id: str,
        tool_name: str,
        pattern: str,
        action: str,
        *,
        project_id: str = "global",
    ) -> m.RuleView:
        """ALLOW or BLOCK the commands matching the RE2 `pattern` (`"*"`: any tool)."""
        body = {
            "user_id": user_id,
            "project_id": project_id,
            "tool_name": tool_name,
            "pattern": pattern,
            "action": action,
        }
        return await self._send(Call("POST", "/v1/permissions/rules", one(m.RuleView), json=body))

    async def rules(self, user_id: str, *, project_id: str | None = None) -> list[m.RuleView]:
        """The user's rules, oldest first (`project_id="global"`: the global ones)."""
        params = present(user_id=user_id, project_id=project_id)
        parse = listed(m.RuleView, "rules")
        call = Call("GET", "/v1/permissions/rules", parse, params=params, retry_safe=True)
        return await self._send(call)

    async def delete_rule(self, rule_id: str, *, user_id: str) -> m.DeleteRuleResponse:
        """Delete the user's rule (NotFoundError if it is not that user's)."""
        # The API requires the rule's user: a rule id alone does not delete it.
        path, params = f"/v1/permissions/rules/{segment(rule_id)}", {"user_id": user_id}
        parse = one(m.DeleteRuleResponse)
        return await self._send(Call("DELETE", path, parse, params=params, retry_safe=True))

    # -- the app's settings --------------------------------------------------------

    async def agents_config(self) -> m.AgentsConfig:
        """What the app's agents learn for the user rather than for themselves: the
        kinds and topics of memory shared with every agent of the user."""
        parse = one(m.AgentsConfig)
        return await self._send(Call("GET", "/v1/config/agents", parse, retry_safe=True))

    async def set_agents_config(
        self, *, shared_kinds: Sequence[str] = (), shared_topics: Sequence[str] = ()
    ) -> m.AgentsConfig:
        """Replace what the app's agents share (an admin key); each topic a managed
        one or one of the app's custom topics. Nothing named: nothing is shared."""
        body = {"shared_kinds": list(shared_kinds), "shared_topics": list(shared_topics)}
        parse = one(m.AgentsConfig)
        return await self._send(Call("PUT", "/v1/config/agents", parse, json=body, retry_safe=True))

    async def extraction_config(self) -> m.ExtractionConfig:
        """What the app's extraction keeps (its managed and custom topics) and the
        metadata every memory it writes carries."""
        parse = one(m.ExtractionConfig)
        return await self._send(Call("GET", "/v1/config/extraction", parse, retry_safe=True))

    async def set_extraction_config(self, config: m.ExtractionConfig) -> m.ExtractionConfig:
        """Replace it (an admin key); it applies to what is extracted from then on."""
        body = config.model_dump(mode="json")
        parse = one(m.ExtractionConfig)
        call = Call("PUT", "/v1/config/extraction", parse, json=body, retry_safe=True)
        return await self._send(call)

    # -- lifecycle and health ------------------------------------------------------

    async def delete_user(self, user_id: str) -> m.DeletionCounts:
        """GDPR: everything of the user in this app (safe to repeat)."""
        path = f"/v1/users/{segment(user_id)}"
        return await self._send(Call("DELETE", path, one(m.DeletionCounts), retry_safe=True))

    async def delete_project(self, user_id: str, project_id: str) -> m.DeletionCounts:
        """Everything of one project of the user."""
        path = f"/v1/users/{segment(user_id)}/projects/{segment(project_id)}"
        return await self._send(Call("DELETE", path, one(m.DeletionCounts), retry_safe=True))

    async def request_compaction(
        self,
        user_id: str,
        *,
        project_id: str | None = None,
        retention_days: int | None = None,
        batch_limit: int | None = None,
    ) -> m.CompactionAccepted:
        """Fold old episodes into a summary (admin keys only). Not retried."""
        body = present(
            user_id=user_id,
            project_id=project_id,
            retention_days=retention_days,
            batch_limit=batch_limit,
        )
        parse = one(m.CompactionAccepted)
        return await self._send(Call("POST", "/v1/compactions", parse, json=body))

    async def health(self) -> dict[str, Any]:
        """`/healthz`: the process answers (raises otherwise)."""
        return await self._send(Call("GET", "/healthz", dict, retry_safe=True))

    async def ready(self) -> dict[str, Any]:
        """`/readyz`: `{status, down}`, also when it is 503 (something is down)."""
        # 503 is an answer here (`down` names what is down), not an error to raise.
        call = Call("GET", "/readyz", dict, retry_safe=True, accept=frozenset({503}))
        return await self._send(call)


def _session_call(
    session_id: str, user_id: str, agent_id: str | None
) -> tuple[str, dict[str, Any]]:
    """A session's path, and whose it is (its query parameters, or a flush's body)."""
    return f"/v1/sessions/{segment(session_id)}", present(user_id=user_id, agent_id=agent_id)
