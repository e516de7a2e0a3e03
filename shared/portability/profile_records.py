"""The export's line for one field of a user's profile: its value (null: none now)
and its history of revisions, as `shared.db.profiles` keeps them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from shared.portability.fields import Line, OptionalTime, Time
from shared.profiles.schema import FIELD_PATTERN, JsonValue

Source = Annotated[str, Field(max_length=200)]


class ProfileRevisionRecord(Line):
    action: Literal["SET", "CLEARED", "HISTORY"]
    value: JsonValue
    previous: JsonValue
    observed_at: Time
    applied: bool
    source: Source
    source_event_id: Source
    created_at: Time


class ProfileRecord(Line):
    """A profile field: its value (null: none now) and its history."""

    type: Literal["profile"]
    field: Annotated[str, Field(pattern=FIELD_PATTERN)]
    value: JsonValue
    observed_at: OptionalTime
    updated_at: OptionalTime
    source: Source
    source_event_id: Source
    revisions: list[ProfileRevisionRecord]

    @model_validator(mode="after")
    def _timed(self) -> ProfileRecord:
        if self.value is not None and (self.observed_at is None or self.updated_at is None):
            raise ValueError("observed_at: a value needs the times it was observed and updated")
        return self
