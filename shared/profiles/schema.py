"""An app's profile schema (`PUT /v1/config/profile`): a few typed fields, and how
a value is checked against its field.

A field is a string (at most MAX_STRING characters), an enum (one of its
values), a number (finite) or a boolean. The API takes a value as its JSON type
(`checked`); the extraction reads one from text (`read`): "42" is a number,
"yes" a boolean, an enum's value whatever its case. A value that fits neither
way is refused with the reason; the schema stores none of it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, Strict

from shared.union_errors import OneOf

PROFILE_SETTING = "profile"
MAX_FIELDS = 20
MAX_STRING = 200
MAX_ENUM_VALUES = 50
FIELD_PATTERN = "^[a-z][a-z0-9_]{0,39}$"
TYPES = ("string", "enum", "number", "boolean")

Value = str | float | bool

# A value, or null (none), as the API and an export take it: a JSON string, number
# or boolean (strict: a string too long is refused as one, not read as a number);
# which of them a field takes is `ProfileField.checked`'s to say.
JsonValue = Annotated[
    Annotated[str, Field(max_length=MAX_STRING, pattern="^[^\\u0000]*$")]
    | Annotated[float, Strict()]
    | Annotated[bool, Strict()]
    | None,
    OneOf("must be a string, a number, true or false, or null"),
]

_TRUE = {"true", "yes", "y", "on"}
_FALSE = {"false", "no", "n", "off"}
_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")


@dataclass(frozen=True)
class ProfileField:
    name: str
    type: str  # one of TYPES
    description: str = ""
    values: tuple[str, ...] = ()  # an enum's values

    def checked(self, value: Any) -> Value:
        """`value` as the API takes it (its JSON type); ValueError with the reason."""
        if self.type == "boolean":
            if not isinstance(value, bool):
                raise ValueError("must be true or false")
            return value
        if self.type == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError("must be a number")
            if not math.isfinite(value):
                raise ValueError("must be a finite number")
            return value
        if not isinstance(value, str):
            raise ValueError("must be a string")
        return self._text(value)

    def read(self, text: str) -> Value:
        """`text` (an extraction's answer) as this field's value; ValueError."""
        text = " ".join(text.split()).strip(" .")
        if self.type == "boolean":
            if text.lower() in _TRUE | _FALSE:
                return text.lower() in _TRUE
            raise ValueError(f"{text[:40]!r} is not a boolean")
        if self.type == "number":
            if not _NUMBER.match(text.replace(",", "")):
                raise ValueError(f"{text[:40]!r} is not a number")
            number = float(text.replace(",", ""))
            return int(number) if number.is_integer() and abs(number) < 2**53 else number
        return self._text(text)

    def _text(self, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must not be empty")
        if "\x00" in value:
            raise ValueError("must not contain NUL")
        if self.type == "enum":
            for allowed in self.values:
                if allowed.lower() == value.lower():
                    return allowed
            raise ValueError(f"{value[:40]!r} is not one of {', '.join(self.values)}")
        if len(value) > MAX_STRING:
            raise ValueError(f"is {len(value)} characters, over {MAX_STRING}")
        return value


@dataclass(frozen=True)
class ProfileSchema:
    fields: tuple[ProfileField, ...] = ()

    def field(self, name: str) -> ProfileField | None:
        return next((f for f in self.fields if f.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


NO_PROFILE = ProfileSchema()


def of_setting(value: dict[str, Any] | None) -> ProfileSchema:
    """The schema an app's stored setting holds (validated when it was put)."""
    if not value:
        return NO_PROFILE
    return ProfileSchema(
        tuple(
            ProfileField(f["name"], f["type"], f.get("description", ""), tuple(f.get("values", [])))
            for f in value.get("fields", [])
        )
    )


def shown(value: Value) -> str:
    """A value as text (the context's line, a change event's text)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
