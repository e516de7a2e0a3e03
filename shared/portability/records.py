"""The export's line format, and reading one line back.

A file (or a response body) is JSON Lines, one JSON object per line:

1. the header: `{format, version, app, user_id, exported_at, embedding_dim}`;
2. one `{"type": "memory", ...}` per memory, live or closed, with its revisions;
3. one `{"type": "episode", ...}` per archived turn;
4. one `{"type": "profile", ...}` per field of the user's profile that has a value
   or a history, with its revisions;
5. the end: `{"type": "end", memories, episodes, profiles}`, the counts written. A file
   without it was cut short (an export that failed half-way).

Every field the export writes is required when read back (null where the
database allows none), and no other field is accepted, so that an edited or
truncated line is refused with its reason rather than imported differently.
Times are RFC 3339; an empty project or session is null; embeddings are lists of
numbers, as pgvector prints them (the shortest text that reads back as the same
32-bit float, so a round trip is exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from shared.identifiers import identifier_problem, text_problem
from shared.memory.metadata import checked
from shared.profiles.schema import FIELD_PATTERN, MAX_STRING

FORMAT = "agent-memory/user-export"
VERSION = 1
MEDIA_TYPE = "application/x-ndjson"
# A line longer than this is refused unread: an export's lines are a few kB (a
# memory with a 768-dimension embedding about 10 kB, an episode at most its texts).
MAX_LINE_BYTES = 8 * 1024 * 1024
# Each bad line's reason names at most this many of its problems.
_PROBLEMS_PER_LINE = 3
_FLOAT32_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class BadLine:
    number: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.number}: {self.reason}"


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


class _Line(BaseModel):
    # Strict: a number is not a time, a string not a number.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Header(_Line):
    format: str
    version: int
    app: Identifier
    user_id: Identifier
    exported_at: Time
    embedding_dim: int = Field(ge=1)


class RevisionRecord(_Line):
    action: Literal["CREATED", "UPDATED", "DELETED"]
    old_text: OptionalText
    new_text: OptionalText
    event_id: UUID | None
    observed_at: Time
    applied: bool
    created_at: Time
    expire_at: OptionalTime
    # Absent from exports made before edits kept them.
    source: Annotated[str, Field(max_length=200)] = ""
    state: dict[str, Any] | None = None


class MemoryRecord(_Line):
    type: Literal["memory"]
    id: UUID
    scope: Literal["global", "project", "session"]
    kind: Literal["preference", "fact", "rule", "event"]
    project_id: OptionalId
    session_id: OptionalId
    entity_name: Text
    text: Text
    topic: Text
    expire_at: OptionalTime
    observed_at: Time
    created_at: Time
    updated_at: Time
    valid_from: Time
    valid_to: OptionalTime
    source_event_id: UUID | None
    embedding: Embedding
    revisions: list[RevisionRecord]
    # Absent from exports made before memories carried metadata.
    metadata: Annotated[dict[str, Any], AfterValidator(checked)] = {}

    @model_validator(mode="after")
    def _scoped(self) -> MemoryRecord:
        # The table's checks: a project memory names its project, a session memory
        # its session, and no other memory names either.
        for scope, name, value in (
            ("project", "project_id", self.project_id),
            ("session", "session_id", self.session_id),
        ):
            if self.scope == scope and not value:
                raise ValueError(f"{name}: a {scope} memory needs one")
            if self.scope != scope and value:
                raise ValueError(f"{name}: must be null for a {self.scope} memory")
        return self


class EpisodeRecord(_Line):
    type: Literal["episode"]
    id: UUID
    project_id: OptionalId
    session_id: Identifier
    turn_id: Identifier
    event_id: UUID
    user_text: Text
    assistant_text: Text
    tool_events: list[dict[str, Any]]
    text: Text
    context: OptionalText
    created_at: Time
    archived_at: Time
    embedding: Embedding


ProfileValue = Annotated[str, Field(max_length=MAX_STRING, pattern="^[^\\u0000]*$")] | float | bool
Source = Annotated[str, Field(max_length=200)]


class ProfileRevisionRecord(_Line):
    action: Literal["SET", "CLEARED", "HISTORY"]
    value: ProfileValue | None
    previous: ProfileValue | None
    observed_at: Time
    applied: bool
    source: Source
    source_event_id: Source
    created_at: Time


class ProfileRecord(_Line):
    """A profile field: its value (null: none now) and its history."""

    type: Literal["profile"]
    field: Annotated[str, Field(pattern=FIELD_PATTERN)]
    value: ProfileValue | None
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


class EndRecord(_Line):
    type: Literal["end"]
    memories: int = Field(ge=0)
    episodes: int = Field(ge=0)
    # Absent from exports made before profiles.
    profiles: int = Field(default=0, ge=0)


Record = MemoryRecord | EpisodeRecord | ProfileRecord | EndRecord
_HEADER = TypeAdapter(Header)
_RECORD: TypeAdapter[Record] = TypeAdapter(
    Annotated[MemoryRecord | EpisodeRecord | ProfileRecord | EndRecord, Field(discriminator="type")]
)


def header_line(app: str, user_id: str, exported_at: datetime, embedding_dim: int) -> bytes:
    header = {
        "format": FORMAT,
        "version": VERSION,
        "app": app,
        "user_id": user_id,
        "exported_at": exported_at,
        "embedding_dim": embedding_dim,
    }
    return orjson.dumps(header) + b"\n"


def end_line(memories: int, episodes: int, profiles: int) -> bytes:
    end = {"type": "end", "memories": memories, "episodes": episodes, "profiles": profiles}
    return orjson.dumps(end) + b"\n"


def parse_header(number: int, raw: bytes, embedding_dim: int) -> Header | BadLine:
    """The header line, or why it is not one this code can import into a database
    whose embeddings have `embedding_dim` dimensions."""
    try:
        header = _HEADER.validate_json(_utf8(raw))
    except ValueError as exc:
        return BadLine(number, f"not an export's header line: {_header_problem(raw, exc)}")
    if header.format != FORMAT:
        return BadLine(number, f"not an agent-memory user export (format {header.format!r})")
    if header.version != VERSION:
        return BadLine(number, f"version {header.version} is not one this code reads ({VERSION})")
    if header.embedding_dim != embedding_dim:
        return BadLine(
            number,
            f"the export's embeddings have {header.embedding_dim} dimensions; this "
            f"database's have {embedding_dim} (AM_EMBEDDING_DIM)",
        )
    return header


def parse_record(number: int, raw: bytes, embedding_dim: int) -> Record | BadLine:
    """A memory, episode, profile or end line, or why it cannot be imported."""
    try:
        return _RECORD.validate_json(_utf8(raw), context={"dim": embedding_dim})
    except ValidationError as exc:
        return BadLine(number, _reason(exc, tagged=True))
    except ValueError as exc:
        return BadLine(number, str(exc))


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start + 1})") from None


def _header_problem(raw: bytes, error: ValueError) -> str:
    if not isinstance(error, ValidationError):
        return str(error)
    try:
        kind = orjson.loads(raw).get("type")
    except (orjson.JSONDecodeError, AttributeError):
        kind = None
    if isinstance(kind, str):  # the header was left out
        return f"this is a {kind} line; an export begins with its header"
    return _reason(error, tagged=False)


def _reason(error: ValidationError, tagged: bool) -> str:
    """A line's problems in the API's words: `field.path: what is wrong`."""
    problems = []
    for item in error.errors()[:_PROBLEMS_PER_LINE]:
        loc = item["loc"][1:] if tagged and item["loc"] else item["loc"]
        problems.append(_problem(item, _path(loc)))
    more = error.error_count() - _PROBLEMS_PER_LINE
    return "; ".join(problems) + (f"; and {more} more" if more > 0 else "")


def _path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _problem(item: Any, path: str) -> str:
    kind, message = item["type"], str(item["msg"]).removeprefix("Value error, ")
    ctx = item.get("ctx") or {}
    if kind == "json_invalid":
        # One line: its position is the column alone.
        where = str(ctx.get("error", message)).replace(" at line 1 column", " at column")
        return f"not JSON ({where})"
    if kind == "union_tag_invalid":
        return f"unknown type {ctx.get('tag')!r} (memory, episode or end)"
    if kind == "union_tag_not_found":
        return "no type (memory, episode or end)"
    if kind in ("dict_type", "model_type") and not path:
        return "not a JSON object"
    if kind == "missing":
        message = "is missing"
    elif kind == "extra_forbidden":
        message = "is not a known field"
    elif kind == "literal_error":
        message = f"{item.get('input')!r} is not one of {ctx.get('expected')}"
    elif kind == "value_error" and not path and ": " in message:
        return message  # a rule over several fields names the one that is wrong
    return f"{path}: {message}" if path else message
