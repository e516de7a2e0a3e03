"""Request and response bodies of the read API."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

from shared.identifiers import identifier_problem


def check_identifier(value: str) -> str:
    problem = identifier_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class RecordTurnRequest(BaseModel):
    """A finished turn. `turn_id` is the client's idempotency key."""

    model_config = ConfigDict(extra="forbid")

    user_id: str
    project_id: str | None = None
    turn_id: str | None = None
    user: str
    assistant: str

    @field_validator("user_id")
    @classmethod
    def _user_id(cls, value: str) -> str:
        return check_identifier(value)

    @field_validator("project_id", "turn_id")
    @classmethod
    def _optional_ids(cls, value: str | None) -> str | None:
        return None if value is None else check_identifier(value)


class RecordTurnResponse(BaseModel):
    event_id: str
    turn_id: str


class TurnView(BaseModel):
    turn_id: str
    event_id: str
    created_at: str
    project_id: str | None
    user: str
    assistant: str
    tokens: int


class SessionResponse(BaseModel):
    session_id: str
    user_id: str
    turns: list[TurnView]
    turn_count: int
    tokens: int
