"""Ambient memory for an ADK agent, per invocation.

`memory_callbacks(client)` gives two callbacks for an `LlmAgent`:

- `before_model_callback` fetches `/v1/context` for the invocation's user,
  session and project (once per invocation; the agent may call the model several
  times around tool calls) and appends its `system_instruction` to THAT request
  only. The agent, shared by every session of the process, is never changed: two
  concurrent sessions each get their own context.
- `after_agent_callback` records the finished turn (the invocation's user text,
  the model's text, its tool calls as tool events) through `record_turn`, with
  the turn id derived from the ADK event id of the user's message, so that
  `AgentMemoryService.add_session_to_memory` recording the same session later
  records nothing twice.

The project is the session state's `project_id` when set, else the `project_id`
given here, else none (global memories only). A session state `prev_session_id`
is passed on to the API (the previous session's summary carries over).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol, TypedDict, Unpack

import structlog
from google.adk.agents.callback_context import CallbackContext
from google.adk.models import LlmRequest
from google.genai import types

from shared.adk.limits import API_DEFAULTS, TurnLimits, query_text
from shared.adk.turns import USER_AUTHOR, content_text, record_turn, turns_from_events
from shared.client import AsyncMemoryClient

log = structlog.get_logger("agent_memory.adk")

PROJECT_STATE_KEY = "project_id"
PREV_SESSION_STATE_KEY = "prev_session_id"
# The context's query when the session holds no user text at all (rules, summary
# and recent turns do not depend on it).
FALLBACK_QUERY = "the conversation so far"
# Invocations whose context is kept between their model calls; an invocation that
# fails before its after-agent callback leaves its entry here until it is pushed out.
_CACHED_INVOCATIONS = 256


class State(Protocol):
    """A session's state as ADK hands it (`google.adk.sessions.state.State`, not a
    Mapping), or any mapping."""

    def get(self, key: str, /) -> Any: ...


def project_of(state: State, default: str | None) -> str | None:
    """The project of a session: its state's `project_id`, else `default`."""
    value = state.get(PROJECT_STATE_KEY)
    return str(value) if value else default


def prev_session_of(state: State) -> str | None:
    value = state.get(PREV_SESSION_STATE_KEY)
    return str(value) if value else None


def _query_of(ctx: CallbackContext) -> str:
    """What the context is ranked against: the user's message of this invocation,
    else their latest in the session (an invocation resumed by a tool's answer)."""
    text = content_text(ctx.user_content)
    for event in reversed(ctx.session.events):
        if text.strip():
            break
        if event.author == USER_AUTHOR:
            text = content_text(event.content)
    return query_text(text) if text.strip() else FALLBACK_QUERY


class AmbientMemory:
    """The callbacks of `memory_callbacks`, holding the per-invocation context."""

    def __init__(
        self,
        client: AsyncMemoryClient,
        project_id: str | None = None,
        *,
        k: int | None = None,
        token_budget: int | None = None,
        sections: Mapping[str, int] | None = None,
        limits: TurnLimits = API_DEFAULTS,
    ) -> None:
        self.client = client
        self.project_id = project_id
        self.k = k
        self.token_budget = token_budget
        self.sections = sections
        self.limits = limits
        self._instructions: OrderedDict[str, str] = OrderedDict()

    async def before_model(
        self, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> None:
        """Append the invocation's memory context to this model request."""
        invocation_id = callback_context.invocation_id
        instruction = self._instructions.get(invocation_id)
        if instruction is None:
            instruction = await self._fetch(callback_context)
            self._instructions[invocation_id] = instruction
            while len(self._instructions) > _CACHED_INVOCATIONS:
                self._instructions.popitem(last=False)
        if instruction:
            llm_request.append_instructions([instruction])
        return None

    async def _fetch(self, ctx: CallbackContext) -> str:
        session = ctx.session
        try:
            context = await self.client.context(
                session.user_id,
                session.id,
                _query_of(ctx),
                project_id=project_of(ctx.state, self.project_id),
                prev_session_id=prev_session_of(ctx.state),
                k=self.k,
                token_budget=self.token_budget,
                sections=self.sections,
            )
        except Exception as exc:
            # Memory is ambient: without it the agent still answers, as the API
            # itself answers a degraded context rather than none.
            log.warning("memory context unavailable", session=session.id, error=repr(exc))
            return ""
        return context.system_instruction

    async def after_agent(self, callback_context: CallbackContext) -> types.Content | None:
        """Record the invocation's turn (if the user wrote one)."""
        invocation_id = callback_context.invocation_id
        self._instructions.pop(invocation_id, None)
        session = callback_context.session
        events = [e for e in session.events if e.invocation_id == invocation_id]
        project = project_of(session.state, self.project_id)
        prev = prev_session_of(session.state)
        for found in turns_from_events(events):
            try:
                await record_turn(
                    self.client, session.user_id, session.id, found, self.limits, project, prev
                )
            except Exception as exc:
                # The answer is already given; the turn keeps its id, so a later
                # `add_session_to_memory` of this session records it then.
                log.error(
                    "turn not recorded",
                    session=session.id,
                    turn_id=found.turn_id,
                    error=repr(exc),
                )
        return None


class AmbientOptions(TypedDict, total=False):
    """`AmbientMemory`'s options, which `memory_callbacks` passes on."""

    k: int | None
    token_budget: int | None
    sections: Mapping[str, int] | None
    limits: TurnLimits


def memory_callbacks(
    client: AsyncMemoryClient, project_id: str | None = None, **options: Unpack[AmbientOptions]
) -> dict[str, Any]:
    """Callbacks to pass to an `LlmAgent`: `LlmAgent(..., **memory_callbacks(client))`.

    `before_model_callback` puts the memory context into each model request of an
    invocation (its rules, memories, session summary and recent turns, and the
    turns of earlier conversations that bear on it; `sections` caps each in
    tokens, as `/v1/context` takes them); `after_agent_callback` records the
    finished turn. Give them to the root agent (the one the Runner runs): a
    sub-agent's after-agent callback would record the turn before the root
    agent's final answer."""
    ambient = AmbientMemory(client, project_id, **options)
    return {
        "before_model_callback": ambient.before_model,
        "after_agent_callback": ambient.after_agent,
    }
