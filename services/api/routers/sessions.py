"""Session routes: record a turn, read a session's view, flush its extraction
window, delete a session.

A turn goes into the session buffer first (read-your-writes), then to Pub/Sub,
whose confirmation the answer waits for: the event is the durable record. The
tenant comes from the caller's key (`AppIdDep`), never from the body.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any

import structlog
import valkey
from fastapi import APIRouter, Depends, Path, Query, Response

from services.api.agents import KeyAgentDep, acting
from services.api.custom_methods import ResourceRoute
from services.api.deps import ApiDep, AppIdDep
from services.api.errors import (
    VALKEY_FULL_RETRY_AFTER_SECONDS,
    ApiError,
    encode_or_4xx,
    published_or_503,
    valkey_or_503,
)
from services.api.models import (
    SESSION_OF,
    DeleteSessionResponse,
    FlushSessionRequest,
    FlushSessionResponse,
    Identifier,
    RecordTurnRequest,
    RecordTurnResponse,
    SessionResponse,
    json_response,
)
from shared.config import Settings
from shared.events import (
    ExtractionRequested,
    Limits,
    OutgoingMessage,
    ToolEvent,
    TurnRecorded,
    derived_event_id,
    format_time,
    utcnow,
)
from shared.metrics import count_store_error
from shared.session_buffer import (
    AsyncSessionBuffer,
    BufferedTurn,
    SessionKey,
    SessionOfAnotherAgent,
    SessionView,
    Summary,
)

log = structlog.get_logger("agent_memory.api")
router = APIRouter(route_class=ResourceRoute)

SessionPath = Annotated[Identifier, Path()]
MAX_FUTURE = timedelta(days=1)  # how far ahead a turn's created_at may be (clock skew)


@router.post("/v1/sessions/{session_id}/turns", status_code=202)
async def record_turn(
    session_id: SessionPath,
    body: RecordTurnRequest,
    response: Response,
    app_id: AppIdDep,
    key_agent: KeyAgentDep,
    api: ApiDep,
) -> RecordTurnResponse:
    settings = api.settings
    agent = acting(key_agent, body.agent_id)
    event, message = _turn_event(app_id, session_id, agent, body, settings)
    if api.publisher.full():
        # Refused before the buffer takes it: a turn the client must send again.
        log.warning("publish queue full", event_id=event.event_id)
        raise ApiError(
            503,
            "overloaded",
            "too many requests wait for Pub/Sub; retry later with the same turn_id",
            details={"turn_id": event.turn_id, "event_id": event.event_id},
        )
    started = time.perf_counter()
    buffered = await _buffer_turn(api.buffer, event)  # refuses another agent's session
    buffered_at = time.perf_counter()
    # The publish may still land after our timeout; a retry with this turn_id is
    # the same event, so it can never make a second turn.
    await published_or_503(
        lambda: api.publisher.publish_message(message),
        settings.publish_timeout_seconds,
        "the turn could not be published; retry with the same turn_id",
        {"turn_id": event.turn_id, "event_id": event.event_id},
    )
    # How long the buffer append and the wait for Pub/Sub's confirmation took
    # (the W3C Server-Timing header; bench/buffer.py reads it).
    response.headers["server-timing"] = (
        f"buffer;dur={(buffered_at - started) * 1000:.3f}, "
        f"publish;dur={(time.perf_counter() - buffered_at) * 1000:.3f}"
    )
    return RecordTurnResponse(event_id=event.event_id, turn_id=event.turn_id, buffered=buffered)


@dataclass(frozen=True)
class Addressed:
    """The session a read or a delete names (its user and session by the path and
    query), and the agent the request acts as."""

    key: SessionKey
    agent: str


async def addressed(
    session_id: SessionPath,
    user_id: Annotated[Identifier, Query()],
    app_id: AppIdDep,
    key_agent: KeyAgentDep,
    agent_id: Annotated[Identifier | None, Query(description=SESSION_OF)] = None,
) -> Addressed:
    return Addressed(SessionKey(app_id, user_id, session_id), acting(key_agent, agent_id))


AddressedDep = Annotated[Addressed, Depends(addressed)]


@router.get("/v1/sessions/{session_id}", response_model=SessionResponse)
async def get_session(session: AddressedDep, api: ApiDep) -> Response:
    key, agent = session.key, session.agent
    session_id, user_id = key.session_id, key.user_id
    buffer = api.buffer

    async def read() -> tuple[SessionView, Summary | None]:
        view = await buffer.read(key, with_folds=True)
        _own_or_404(view, session_id, agent)
        carried = None
        if view.prev_session_id:
            previous = SessionKey(key.app, user_id, view.prev_session_id)
            carried = await buffer.read_summary(previous, agent)
        return view, carried

    view, carried = await valkey_or_503(read())
    # The fast path of services.api.models.json_response: the hottest read.
    return json_response(_session_body(session_id, user_id, view, carried))


@router.post("/v1/sessions/{session_id}:flush", status_code=202)
async def flush_session(
    session_id: SessionPath,
    body: FlushSessionRequest,
    app_id: AppIdDep,
    key_agent: KeyAgentDep,
    api: ApiDep,
) -> FlushSessionResponse:
    """Extract the session's waiting turns now (the end of a session): an extraction
    request, published like a turn (202 once Pub/Sub has it). It carries how many
    turns the session has recorded, so that the worker can tell the turns still on
    their way (recorded a moment ago) and let the last of them close the window."""
    key = SessionKey(app_id, body.user_id, session_id)
    turns = await _recorded(api.buffer, key, acting(key_agent, body.agent_id))
    event = ExtractionRequested(
        event_id=str(uuid.uuid4()),
        app=app_id,
        user_id=body.user_id,
        session_id=session_id,
        reason="flush",
        created_at=utcnow(),
        turns=turns,
    )
    message = encode_or_4xx(event, Limits.from_settings(api.settings))
    await published_or_503(
        lambda: api.publisher.publish_message(message),
        api.settings.publish_timeout_seconds,
        "the flush could not be published; retry",
        {"event_id": event.event_id},
    )
    log.info("session flushed", session=session_id, event_id=event.event_id)
    return FlushSessionResponse(session_id=session_id, event_id=event.event_id)


@router.delete("/v1/sessions/{session_id}")
async def delete_session(session: AddressedDep, api: ApiDep) -> DeleteSessionResponse:
    key, session_id = session.key, session.key.session_id
    _own_or_404(await valkey_or_503(api.buffer.read(key)), session_id, session.agent)
    deleted = await valkey_or_503(api.buffer.delete(key))
    log.info("session deleted", session=session_id, keys=deleted)
    return DeleteSessionResponse(session_id=session_id, deleted_keys=deleted)


async def _recorded(buffer: AsyncSessionBuffer, key: SessionKey, agent: str) -> int:
    """The turns the session has recorded, or 0 (unknown) when Valkey does not answer:
    the flush then extracts what is there. 404 if the session is another agent's."""
    try:
        view = await buffer.read(key)
    except valkey.ValkeyError as exc:
        count_store_error(exc)
        log.warning("flush without a turn count", session=key.session_id, error=repr(exc))
        return 0
    _own_or_404(view, key.session_id, agent)
    return view.turns_total


def _own_or_404(view: SessionView, session_id: str, agent: str) -> None:
    """Another agent's session is not there for this one (nor for the user's own
    requests), as another user's is not."""
    if not view.serves(agent):
        message = f"session_id: {SessionOfAnotherAgent(session_id, agent)}"
        raise ApiError(404, "not_found", message, field="session_id")


def _session_body(
    session_id: str, user_id: str, view: SessionView, carried: Summary | None
) -> dict[str, Any]:
    """The session view as `SessionResponse` lays it out, as plain data (a test
    checks the result against the model)."""
    summary = view.summary
    return {
        "session_id": session_id,
        "user_id": user_id,
        "prev_session_id": view.prev_session_id or None,
        "summary": {
            "text": summary.text,
            "version": summary.version,
            "tokens": summary.tokens,
            "updated_at": format_time(summary.updated_at) if summary.updated_at else None,
        },
        "carried_summary": {
            "session_id": view.prev_session_id,
            "text": carried.text,
            "version": carried.version,
        }
        if carried and carried.version
        else None,
        "turns": [
            {
                "turn_id": t.turn_id,
                "event_id": t.event_id,
                "created_at": format_time(t.created_at),
                "project_id": t.project_id or None,
                "user": t.user,
                "assistant": t.assistant,
                "tokens": t.tokens,
            }
            for t in view.turns
        ],
        "turn_count": len(view.turns),
        "tokens": view.tokens,
        "turns_total": view.turns_total,
        "folded_turn_count": view.folded_total,
        "folds": [{"version": v, "turn_ids": ids} for v, ids in view.folds.items()],
    }


def _turn_event(
    app_id: str, session_id: str, agent_id: str, body: RecordTurnRequest, settings: Settings
) -> tuple[TurnRecorded, OutgoingMessage]:
    """The turn's event and its encoded message, or a 422 naming the first field
    that is wrong (the encoder applies the schema, the text and the size rules: the
    same ones the workers apply when they decode)."""
    if not body.user.strip() and not body.assistant.strip():
        raise ApiError(
            422,
            "invalid_request",
            "user: empty, and so is assistant; a turn needs at least one of them",
            field="user",
        )
    now = utcnow()
    created_at = body.created_at or now
    if created_at - now > MAX_FUTURE:
        raise ApiError(
            422,
            "invalid_request",
            f"created_at: {format_time(created_at)} is more than a day in the future",
            field="created_at",
        )
    turn_id = body.turn_id or str(uuid.uuid4())
    event = TurnRecorded(
        # The same turn_id always yields the same event_id, so a client's retry is
        # one event for every consumer.
        event_id=derived_event_id(app_id, body.user_id, session_id, turn_id),
        app=app_id,
        user_id=body.user_id,
        session_id=session_id,
        project_id=body.project_id or "",
        prev_session_id=body.prev_session_id or "",
        turn_id=turn_id,
        created_at=created_at,
        user=body.user,
        assistant=body.assistant,
        tool_events=_tool_events(body),
        agent_id=agent_id,
    )
    return event, encode_or_4xx(event, Limits.from_settings(settings))


def _tool_events(body: RecordTurnRequest) -> tuple[ToolEvent, ...]:
    try:
        return tuple(ToolEvent(*t.as_texts()) for t in body.tool_events)
    except (RecursionError, ValueError, TypeError):
        message = "tool_events: arguments or output cannot be stored as JSON text (too deep?)"
        raise ApiError(422, "invalid_request", message, field="tool_events") from None


async def _buffer_turn(buffer: AsyncSessionBuffer, event: TurnRecorded) -> bool:
    """Append the turn to the session buffer (read-your-writes). False if Valkey is
    unreachable: the event is the durable record and the summary worker buffers it.
    A Valkey at its memory limit (noeviction) is a 503: the summary worker could not
    buffer the turn either, so accepting it would only grow a backlog that waits
    for an operator; nothing is published."""
    key = SessionKey(event.app, event.user_id, event.session_id)
    turn = BufferedTurn.from_event(event)
    try:
        appended = await buffer.append(key, turn, event.prev_session_id, own_only=True)
    except valkey.exceptions.OutOfMemoryError as exc:
        count_store_error(exc)
        log.warning("turn refused: valkey full", event_id=event.event_id, error=str(exc))
        raise ApiError(
            503,
            "valkey_full",
            "the session store is at its memory limit; retry later with the same turn_id",
            details={"turn_id": event.turn_id, "event_id": event.event_id},
            retry_after=VALKEY_FULL_RETRY_AFTER_SECONDS,
        ) from None
    except valkey.ValkeyError as exc:
        count_store_error(exc)
        log.warning("turn not buffered", event_id=event.event_id, error=repr(exc))
        return False
    if appended.other_agent:
        # Nothing is published: two agents never share a session.
        raise ApiError(
            409,
            "conflict",
            f"agent_id: {SessionOfAnotherAgent(event.session_id, event.agent_id)}; "
            "an agent records turns in sessions of its own",
            field="agent_id",
        )
    if appended.dropped:
        # Nothing is published: the pipeline would drop it too.
        raise ApiError(
            410,
            "user_deleted",
            "created_at: the user was deleted after this turn was created; it is not recorded",
            field="created_at",
        )
    return True
