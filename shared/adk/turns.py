"""ADK events → the API's turns.

A turn opens with an event the user wrote (author `user`, with text) and holds
the model's text that follows it, up to the next user message. Function calls
and their responses become the turn's tool events (name, arguments, output);
they never reach the turn's texts. Thoughts and partial (streamed) events are
left out.

A turn's id is derived from the id of the ADK event that opened it, so however
often a session is added (by `AgentMemoryService` or the after-agent callback),
each turn is the same turn for the API, which records a `turn_id` once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from weakref import WeakKeyDictionary

from google.adk.events import Event
from google.genai import types

from shared.adk.limits import TurnLimits, cut_text, fit_tool_events

TURN_ID_PREFIX = "adk-"
USER_AUTHOR = "user"


def turn_id_for(event_id: str) -> str:
    """The API turn id of the turn the ADK event `event_id` opened."""
    return f"{TURN_ID_PREFIX}{event_id}"


@dataclass
class AdkTurn:
    turn_id: str
    created_at: datetime
    user: str = ""
    assistant_parts: list[str] = field(default_factory=list)
    tool_events: list[dict[str, Any]] = field(default_factory=list)
    # True once the model gave its final answer or the user wrote again.
    complete: bool = False

    @property
    def assistant(self) -> str:
        return "\n\n".join(self.assistant_parts)

    def fitted(self, limits: TurnLimits) -> AdkTurn:
        """This turn within the API's size rules (texts cut, tool events shared out)."""
        return replace(
            self,
            user=cut_text(self.user, limits.max_message_bytes),
            assistant_parts=[cut_text(self.assistant, limits.max_message_bytes)],
            tool_events=fit_tool_events(self.tool_events, limits.max_tool_events_bytes),
        )


def content_text(content: types.Content | None) -> str:
    """The text parts of `content` (no thoughts), joined by newlines."""
    if content is None or not content.parts:
        return ""
    return "\n".join(p.text for p in content.parts if p.text and not p.thought)


def _opens_turn(event: Event) -> bool:
    return event.author == USER_AUTHOR and bool(content_text(event.content))


def turns_from_events(events: Iterable[Event]) -> list[AdkTurn]:
    """The turns of `events`, in order. Model events before the first user message
    (a delta that starts mid-turn) make a turn of their own, without user text."""
    turns: list[AdkTurn] = []
    current: AdkTurn | None = None
    pending: dict[str, dict[str, Any]] = {}  # function call id -> its tool event
    for event in events:
        if event.partial:
            continue
        if _opens_turn(event):
            if current is not None:
                current.complete = True
            current = AdkTurn(turn_id_for(event.id), _time(event), user=content_text(event.content))
            turns.append(current)
            pending = {}
            continue
        if current is None:
            current = AdkTurn(turn_id_for(event.id), _time(event))
            turns.append(current)
        _add_tools(current, event, pending)
        if event.author != USER_AUTHOR:
            text = content_text(event.content)
            if text:
                current.assistant_parts.append(text)
            current.complete = event.is_final_response() and not event.get_function_calls()
    return turns


def _add_tools(turn: AdkTurn, event: Event, pending: dict[str, dict[str, Any]]) -> None:
    for call in event.get_function_calls():
        tool_event: dict[str, Any] = {
            "name": call.name or "",
            "arguments": dict(call.args or {}),
            "output": None,
        }
        turn.tool_events.append(tool_event)
        if call.id:
            pending[call.id] = tool_event
    for response in event.get_function_responses():
        answered = pending.pop(response.id or "", None)
        if answered is None:
            # A response whose call this delta does not hold: keep it all the same.
            answered = {"name": response.name or "", "arguments": {}, "output": None}
            turn.tool_events.append(answered)
        answered["output"] = response.response


def _time(event: Event) -> datetime:
    return datetime.fromtimestamp(event.timestamp, UTC)


# Turns this process recorded, per client: the after-agent callback and
# `AgentMemoryService` share it, so a turn one of them sent is not sent again by
# the other (the API would take it as a duplicate, but only after the round trip).
_REMEMBERED_TURNS = 10_000
_recorded: WeakKeyDictionary[Any, OrderedDict[tuple[str, str, str], None]] = WeakKeyDictionary()


async def record_turn(
    client: Any,
    user_id: str,
    session_id: str,
    found: AdkTurn,
    limits: TurnLimits,
    project_id: str | None,
    prev_session_id: str | None,
) -> None:
    """Record `found` through `client` (an `AsyncMemoryClient`) unless it is empty or
    this process recorded it already; raises what the client raises."""
    seen = _recorded.setdefault(client, OrderedDict())
    key = (user_id, session_id, found.turn_id)
    if key in seen or not (found.user or found.assistant):
        return
    turn = found.fitted(limits)
    await client.record_turn(
        session_id,
        user_id,
        turn.user,
        turn.assistant,
        project_id=project_id,
        prev_session_id=prev_session_id,
        turn_id=turn.turn_id,
        created_at=turn.created_at,
        tool_events=turn.tool_events or None,
    )
    seen[key] = None
    while len(seen) > _REMEMBERED_TURNS:
        seen.popitem(last=False)
