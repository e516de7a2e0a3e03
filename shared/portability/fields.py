"""The types an export's lines are made of: identifiers, texts, times in UTC and
embeddings checked as the database would check them (`records`, `entity_records`)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo

from shared.identifiers import identifier_problem, text_problem

_FLOAT32_MAX = 3.4028234663852886e38


def _identifier(value: str) -> str:
    problem = identifier_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _optional_identifier(value: str | None) -> str:
    """None and "" are both "none" (the database's "")."""
    return _identifier(value) if value else ""


def _text(value: str) -> str:
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _optional_text(value: str | None) -> str | None:
    return None if value is None else _text(value)


def _fits(value: list[float] | None, info: ValidationInfo) -> list[float] | None:
    """An embedding of the database's dimension (`dim` in the context), each number a
    finite 32-bit float (what pgvector stores)."""
    dim = (info.context or {}).get("dim")
    if value is None:
        return None
    if dim is not None and len(value) != dim:
        raise ValueError(
            f"has {len(value)} numbers; this database's embeddings have {dim} (AM_EMBEDDING_DIM)"
        )
    for i, number in enumerate(value):
        if not math.isfinite(number) or abs(number) > _FLOAT32_MAX:
            raise ValueError(f"its number {i} ({number}) is not a finite 32-bit float")
    return value


def _utc(value: datetime) -> datetime:
    """A time without an offset is UTC, as everywhere in the API."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _optional_utc(value: datetime | None) -> datetime | None:
    return None if value is None else _utc(value)


Identifier = Annotated[str, AfterValidator(_identifier)]
OptionalId = Annotated[str | None, AfterValidator(_optional_identifier)]
Text = Annotated[str, AfterValidator(_text)]
OptionalText = Annotated[str | None, AfterValidator(_optional_text)]
Time = Annotated[datetime, AfterValidator(_utc)]
OptionalTime = Annotated[datetime | None, AfterValidator(_optional_utc)]
Embedding = Annotated[list[float] | None, AfterValidator(_fits)]


class Line(BaseModel):
    # Strict: a number is not a time, a string not a number.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
