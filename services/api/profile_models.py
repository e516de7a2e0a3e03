"""Bodies of the profile routes: an app's profile schema (`/v1/config/profile`) and
a user's profile (`/v1/users/{user_id}/profile`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from services.api.models import Count, RequestBody, example
from shared.profiles.schema import (
    FIELD_PATTERN,
    MAX_ENUM_VALUES,
    MAX_FIELDS,
    JsonValue,
    ProfileField,
    ProfileSchema,
)
from shared.union_errors import OneOf

FieldName = Annotated[str, Field(pattern=FIELD_PATTERN)]
Description = Annotated[str, Field(max_length=500, pattern="^[^\\u0000]*$")]
EnumValue = Annotated[
    str, Field(min_length=1, max_length=100, pattern="^[^\\u0000]*\\S[^\\u0000]*$")
]


class _Field(RequestBody):
    name: FieldName
    description: Description = ""


class StringField(_Field):
    type: Literal["string"]


class NumberField(_Field):
    type: Literal["number"]


class BooleanField(_Field):
    type: Literal["boolean"]


class EnumField(_Field):
    type: Literal["enum"]
    values: list[EnumValue] = Field(
        min_length=1, max_length=MAX_ENUM_VALUES, json_schema_extra={"uniqueItems": True}
    )

    @model_validator(mode="after")
    def _distinct(self) -> EnumField:
        # A value is matched whatever its case (ProfileField.read): of two that differ
        # only in case, the second could never be chosen.
        if len(set(self.values)) != len(self.values):
            raise ValueError("values: each value once")
        seen: dict[str, str] = {}
        for value in self.values:
            other = seen.setdefault(value.lower(), value)
            if other != value:
                raise ValueError(
                    f"values: {other!r} and {value!r} differ only in case "
                    "(a value is matched whatever its case)"
                )
        return self


FieldConfig = Annotated[
    StringField | EnumField | NumberField | BooleanField,
    Field(discriminator="type"),
    OneOf("must be an object: a field's name, type and description"),
]


class ProfileConfig(RequestBody):
    """The fields of the app's users' profiles. A string holds at most 200
    characters; an enum one of its values; a number any finite number. Changing
    the schema keeps the values of the fields it still names; no field: no profile."""

    model_config = example(
        {
            "fields": [
                {"name": "name", "type": "string", "description": "what to call them"},
                {"name": "timezone", "type": "string"},
                {
                    "name": "preferred_language",
                    "type": "enum",
                    "values": ["English", "French", "German"],
                },
                {"name": "role", "type": "string"},
            ]
        }
    )

    fields: list[FieldConfig] = Field(default=[], max_length=MAX_FIELDS)

    @model_validator(mode="after")
    def _distinct(self) -> ProfileConfig:
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError("fields: each name once")
        return self

    def schema_of(self) -> ProfileSchema:
        return ProfileSchema(
            tuple(
                ProfileField(
                    f.name,
                    f.type,
                    f.description,
                    tuple(f.values) if isinstance(f, EnumField) else (),
                )
                for f in self.fields
            )
        )


class ProfilePatch(RequestBody):
    """New values of the user's fields, each of its field's type; null clears one.
    The fields not named keep theirs."""

    model_config = example({"values": {"timezone": "Europe/Paris", "role": None}})

    values: dict[FieldName, JsonValue] = Field(
        min_length=1,
        max_length=MAX_FIELDS,
        # A name that is no field's name is no field's: the key's pattern is the rule.
        json_schema_extra={"additionalProperties": False},
    )


class ProfileFieldValue(BaseModel):
    name: str
    value: str | float | bool
    observed_at: str = Field(description="when the value was observed (RFC 3339)")
    updated_at: str
    source: str = Field(description="'' the extraction, 'key:<id>' a write through the API")


class Profile(BaseModel):
    """The user's profile: the value of each field of the app's schema that has one."""

    user_id: str
    values: dict[str, str | float | bool] = Field(description="each field's value by name")
    fields: list[ProfileFieldValue] = Field(description="each value and where it comes from")


class ProfileRollback(RequestBody):
    """Which revision of which field to make current again."""

    # No example: one needs a user with a profile history (the documented examples are run).

    field: FieldName
    revision: Count = Field(
        ge=1,
        description="The revision whose value becomes current: its `revision` in the history "
        "(numbered per field).",
    )


class ProfileRevision(BaseModel):
    field: str
    revision: int = Field(
        description="its number among its field's revisions, from 1, in the order written "
        "(what a rollback names)"
    )
    action: Literal["SET", "CLEARED", "HISTORY"] = Field(
        description="HISTORY: an observation older than the value, kept but not applied"
    )
    value: str | float | bool | None
    previous: str | float | bool | None
    observed_at: str
    applied: bool
    source: str
    source_event_id: str
    created_at: str


class ProfileHistory(BaseModel):
    user_id: str
    revisions: list[ProfileRevision] = Field(description="oldest first")
