"""Request and response bodies of the API."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
from fastapi import Response
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    WithJsonSchema,
    field_validator,
)

from shared.identifiers import MAX_IDENTIFIER_LENGTH, identifier_problem


def json_response(body: Any) -> Response:
    """`body`, plain data laid out as the route's response model, serialised once
    (orjson). The API's one fast path, kept for its hottest routes (the session
    view, a permission evaluation, a memory search, the context), where building
    the models costs more than the rest of the route (the benchmarks in bench/
    measure them). Each such route still declares its model as `response_model`,
    for the OpenAPI document, and has a test checking its body against the model."""
    return Response(orjson.dumps(body), media_type="application/json")


def check_identifier(value: str) -> str:
    problem = identifier_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _optional_id(value: str | None) -> str | None:
    return None if value is None else check_identifier(value)


# The identifier rule (shared.identifiers), declared in the OpenAPI document.
IDENTIFIER_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_IDENTIFIER_LENGTH,
    "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$",
}

Identifier = Annotated[str, AfterValidator(check_identifier), WithJsonSchema(IDENTIFIER_SCHEMA)]
OptionalId = Annotated[
    str | None,
    AfterValidator(_optional_id),
    WithJsonSchema({"anyOf": [IDENTIFIER_SCHEMA, {"type": "null"}]}),
]


# An `agent_id` field (shared.memory.agents), by what the request does with it.
_KEY = " A key limited to an agent acts as that agent and may name no other (403)."
READ_AS = (
    "The agent reading: it sees its own memories and the user's (those of no agent); "
    "none: the user's only." + _KEY
)
WRITE_AS = (
    "The agent the memory belongs to, which alone reads it; none: the user's, which "
    "every agent of the user reads." + _KEY
)
TURN_OF = (
    "The agent taking part: what is extracted from the turn is that agent's, unless "
    "the app shares its kind or topic (`/v1/config/agents`); its archived turn is "
    "recalled for that agent only." + _KEY
)

SESSION_OF = (
    "The agent whose session it is: a session is the agent's that recorded its first "
    "turn (none: the user's own), and only that agent reads, flushes or deletes it "
    "(404 for any other)." + _KEY
)

AgentRead = Annotated[OptionalId, Field(description=READ_AS)]
AgentOfSession = Annotated[OptionalId, Field(description=SESSION_OF)]
AgentWrite = Annotated[OptionalId, Field(description=WRITE_AS)]
AgentOfTurn = Annotated[OptionalId, Field(description=TURN_OF)]


class RequestBody(BaseModel):
    """A JSON request body. Each field takes only the JSON type its schema names
    (strict: `"3600"` is not an integer, `0` or `"true"` not a boolean), and a
    field the body does not declare is refused, so what the OpenAPI document calls
    invalid is a 422."""

    model_config = ConfigDict(extra="forbid", strict=True)


def example(body: dict[str, Any]) -> ConfigDict:
    """A model's configuration with one example of it (the OpenAPI document's
    `examples`), merged with its bases' (such as `RequestBody`'s)."""
    return ConfigDict(json_schema_extra={"examples": [body]})


def _time_text(value: object) -> object:
    # JSON carries a time as RFC 3339 text; a number would otherwise pass as epoch seconds.
    if not isinstance(value, str | datetime):
        raise ValueError("must be an RFC 3339 date-time string")
    return value


# Not strict: JSON has no time type, so a time is parsed from its text.
Time = Annotated[datetime, BeforeValidator(_time_text), Strict(False)]


def json_integer(value: object) -> object:
    # JSON Schema's integer is a number without a fraction: 5.0 is one (strict
    # validation alone would refuse it), "5" and true are not.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Count = Annotated[int, BeforeValidator(json_integer)]


_DECIMAL = re.compile("-?[0-9]+")


def query_integer(value: object) -> object:
    # A query parameter is text: an integer is its decimal digits, not "5.0", " 5" or
    # "5_0", which pydantic's lax parse would take.
    if isinstance(value, str) and not _DECIMAL.fullmatch(value):
        raise ValueError("must be an integer")
    return value


# What `str.strip` removes: Python's whitespace, spelled out for JSON Schema
# patterns, as their `\s` is not quite the same set.
BLANK = (
    "\\t\\n\\u000b\\f\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680"
    "\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)

# Free text of a turn: any characters but NUL, up to a size in UTF-8 bytes.
TEXT_SCHEMA = {
    "type": "string",
    "pattern": "^[^\\u0000]*$",
    "description": "No NUL characters; at most AM_MAX_MESSAGE_BYTES (32 KiB) in UTF-8.",
}


class ToolEventIn(RequestBody):
    """A tool call of the turn. `arguments` and `output` may be any JSON; anything but
    a string is stored as its compact JSON text."""

    name: Annotated[str, WithJsonSchema({**TEXT_SCHEMA, "description": "No NUL characters."})]
    arguments: Any = None
    output: Any = ""

    def as_texts(self) -> tuple[str, str, str]:
        return self.name, _json_text(self.arguments), _json_text(self.output)


def _json_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


class RecordTurnRequest(RequestBody):
    """A finished turn. `turn_id` is the client's idempotency key; `created_at`
    defaults to now (a time without an offset is taken as UTC)."""

    model_config = ConfigDict(
        # A turn needs a user or an assistant message that is not blank.
        json_schema_extra={
            "examples": [
                {
                    "user_id": "u-42",
                    "turn_id": "t-1",
                    "user": "Use tabs, please.",
                    "assistant": "Noted: tabs from now on.",
                }
            ],
            "anyOf": [
                {"properties": {"user": {"pattern": f"[^{BLANK}]"}}},
                {"properties": {"assistant": {"pattern": f"[^{BLANK}]"}}},
            ],
        },
    )

    user_id: Identifier
    project_id: OptionalId = None
    agent_id: AgentOfTurn = None
    prev_session_id: OptionalId = None
    turn_id: OptionalId = None
    created_at: Time | None = None
    user: Annotated[str, WithJsonSchema(TEXT_SCHEMA)]
    assistant: Annotated[str, WithJsonSchema(TEXT_SCHEMA)]
    tool_events: list[ToolEventIn] = []

    @field_validator("created_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError("is out of range once converted to UTC") from None


class RecordTurnResponse(BaseModel):
    event_id: str
    turn_id: str
    # True when the turn is in the session buffer now (the next read sees it);
    # False when Valkey was unreachable: the summary worker buffers it later.
    buffered: bool


class TurnView(BaseModel):
    turn_id: str
    event_id: str
    created_at: str
    project_id: str | None
    user: str
    assistant: str
    tokens: int


class SummaryView(BaseModel):
    text: str
    version: int  # 0: nothing folded yet
    tokens: int
    updated_at: str | None


class CarriedSummary(BaseModel):
    """The rolling summary of the session this one continues (`prev_session_id`)."""

    session_id: str
    text: str
    version: int


class FoldView(BaseModel):
    version: int
    turn_ids: list[str]


class SessionResponse(BaseModel):
    session_id: str
    user_id: str
    prev_session_id: str | None
    summary: SummaryView
    carried_summary: CarriedSummary | None
    turns: list[TurnView]
    turn_count: int  # turns in the buffer
    tokens: int  # their tokens
    turns_total: int  # every turn recorded in the session, folded ones included
    folded_turn_count: int
    folds: list[FoldView]  # which turns went into which summary version


class FlushSessionRequest(RequestBody):
    """Extract the session's turns now, without waiting for its window to close."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"user_id": "u-42"}]})

    user_id: Identifier
    agent_id: AgentOfSession = None


class FlushSessionResponse(BaseModel):
    session_id: str
    # The extraction request's id: the session's turns recorded before this answer
    # are extracted by it (turns still on their way, as soon as they arrive).
    event_id: str


class DeleteSessionResponse(BaseModel):
    session_id: str
    deleted_keys: int
