"""The export's line format, and reading one line back.

A file (or a response body) is JSON Lines, one JSON object per line:

1. the header: `{format, version, app, user_id, exported_at, embedding_dim,
   entities}`;
2. one `{"type": "memory", ...}` per memory, live or closed, with its revisions
   and its feedback;
3. one `{"type": "episode", ...}` per archived turn;
4. one `{"type": "profile", ...}` per field of the user's profile that has a value
   or a history, with its revisions (`profile_records`);
5. one `{"type": "entity", ...}` per entity, with its aliases and mentions, then
   one `{"type": "fact", ...}` per fact and one `{"type": "merge", ...}` per merge
   (`entity_records`);
6. the end: `{"type": "end", memories, episodes, profiles, entities, facts,
   merges}`, the counts written. A file without it was cut short (an export that
   failed half-way).

A header without `entities: true` (an export made before exports carried them)
has no entity lines: importing it derives the entities from the memories and
turns, as their writes did.

Every field the export writes is required when read back (null where the
database allows none), and no other field is accepted, so that an edited or
truncated line is refused with its reason rather than imported differently.
Times are RFC 3339; an empty project or session is null; embeddings are lists of
numbers, as pgvector prints them (the shortest text that reads back as the same
32-bit float, so a round trip is exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import orjson
from pydantic import AfterValidator, Field, TypeAdapter, ValidationError, model_validator

from shared.db.feedback import MAX_REASON
from shared.memory.metadata import checked
from shared.portability.entity_records import EntityRecord, FactRecord, MergeRecord
from shared.portability.fields import (
    Embedding,
    Identifier,
    Line,
    OptionalId,
    OptionalText,
    OptionalTime,
    Text,
    Time,
)
from shared.portability.profile_records import ProfileRecord

FORMAT = "agent-memory/user-export"
VERSION = 1
MEDIA_TYPE = "application/x-ndjson"
# A line longer than this is refused unread: an export's lines are a few kB (a
# memory with a 768-dimension embedding about 10 kB, an episode at most its texts).
MAX_LINE_BYTES = 8 * 1024 * 1024
# Each bad line's reason names at most this many of its problems.
_PROBLEMS_PER_LINE = 3


@dataclass(frozen=True)
class BadLine:
    number: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.number}: {self.reason}"


class Header(Line):
    format: str
    version: int
    app: Identifier
    user_id: Identifier
    exported_at: Time
    embedding_dim: int = Field(ge=1)
    # Whether entity, fact and merge lines follow (absent: an older export).
    entities: bool = False


class RevisionRecord(Line):
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


class FeedbackRecord(Line):
    rating: Literal["useful", "not_useful", "wrong"]
    reason: Annotated[Text, Field(max_length=MAX_REASON)]
    source: Annotated[str, Field(max_length=200)]
    source_events: list[UUID]
    restored_at: OptionalTime
    created_at: Time


class MemoryRecord(Line):
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
    # Absent from exports made before memories took feedback.
    feedback: list[FeedbackRecord] = []
    # The agent it belongs to; null (or absent, from exports made before agents): the user's.
    agent_id: OptionalId = None

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


class EpisodeRecord(Line):
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
    agent_id: OptionalId = None  # the agent that said it; null (or absent): none


class EndRecord(Line):
    type: Literal["end"]
    memories: int = Field(ge=0)
    episodes: int = Field(ge=0)
    # Absent from exports made before they carried profiles and entities.
    profiles: int = Field(0, ge=0)
    entities: int = Field(0, ge=0)
    facts: int = Field(0, ge=0)
    merges: int = Field(0, ge=0)


# What an import writes, and every line after the header.
Data = MemoryRecord | EpisodeRecord | ProfileRecord | EntityRecord | FactRecord | MergeRecord
Record = Data | EndRecord
_TYPES = "memory, episode, profile, entity, fact, merge or end"
_HEADER = TypeAdapter(Header)
_RECORD: TypeAdapter[Record] = TypeAdapter(
    Annotated[
        MemoryRecord
        | EpisodeRecord
        | ProfileRecord
        | EntityRecord
        | FactRecord
        | MergeRecord
        | EndRecord,
        Field(discriminator="type"),
    ]
)


def header_line(app: str, user_id: str, exported_at: datetime, embedding_dim: int) -> bytes:
    header = {
        "format": FORMAT,
        "version": VERSION,
        "app": app,
        "user_id": user_id,
        "exported_at": exported_at,
        "embedding_dim": embedding_dim,
        "entities": True,
    }
    return orjson.dumps(header) + b"\n"


END_COUNTS = ("memories", "episodes", "profiles", "entities", "facts", "merges")


def end_line(*counts: int) -> bytes:
    """The end line with the number of lines of each kind, in `END_COUNTS`' order."""
    return orjson.dumps({"type": "end", **dict(zip(END_COUNTS, counts, strict=True))}) + b"\n"


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
    """A data or end line, or why it cannot be imported."""
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
        return f"unknown type {ctx.get('tag')!r} ({_TYPES})"
    if kind == "union_tag_not_found":
        return f"no type ({_TYPES})"
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
