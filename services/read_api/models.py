"""Request and response bodies of the read API."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import Response
from pydantic import BaseModel, ConfigDict, field_validator

from shared.identifiers import identifier_problem


def json_response(body: Any) -> Response:
    """`body`, plain data laid out as the route's response model, serialised once
    (orjson): on the hottest routes building the models cost more than the rest of
    the route. Each such route has a test checking its body against its model."""
    return Response(orjson.dumps(body), media_type="application/json")


def check_identifier(value: str) -> str:
    problem = identifier_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class ToolEventIn(BaseModel):
    """A tool call of the turn. `arguments` and `output` may be any JSON; anything but
    a string is stored as its compact JSON text."""

    model_config = ConfigDict(extra="forbid")

    name: str
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


class RecordTurnRequest(BaseModel):
    """A finished turn. `turn_id` is the client's idempotency key; `created_at`
    defaults to now (a time without an offset is taken as UTC)."""

    model_config = ConfigDict(extra="forbid")

    user_id: str
    project_id: str | None = None
    prev_session_id: str | None = None
    turn_id: str | None = None
    created_at: datetime | None = None
    user: str
    assistant: str
    tool_events: list[ToolEventIn] = []

    @field_validator("user_id")
    @classmethod
    def _user_id(cls, value: str) -> str:
        return check_identifier(value)

    @field_validator("project_id", "prev_session_id", "turn_id")
    @classmethod
    def _optional_ids(cls, value: str | None) -> str | None:
        return None if value is None else check_identifier(value)

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


class DeleteSessionResponse(BaseModel):
    session_id: str
    deleted_keys: int
