"""Event messages: frozen dataclasses, each mirroring one schema in `schemas/events/`.

Events are named in the past tense; `MemoriesGenerate` keeps the Memory Bank
operation's name. Absent optional values are empty strings, as in the schemas.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, ClassVar, get_args, get_origin, get_type_hints

# Deterministic event ids: a retried API call with the same turn_id gets the
# same event_id, so every consumer's ledger treats it as the same event.
_EVENT_NAMESPACE = uuid.UUID("5d1c2f6e-8a4b-4e55-9a60-2f7b9c1d0e11")


def derived_event_id(*parts: str) -> str:
    """A stable event id for the given identifying parts."""
    return str(uuid.uuid5(_EVENT_NAMESPACE, "\x1f".join(parts)))


MAX_ORDERING_KEY_BYTES = 1024  # Pub/Sub's limit


def ordering_key(*parts: str) -> str:
    """The parts joined by `/`; hashed when longer than Pub/Sub allows (identifiers of
    256 multi-byte characters each can exceed it). Equal parts give equal keys."""
    key = "/".join(parts)
    if len(key.encode("utf-8")) <= MAX_ORDERING_KEY_BYTES:
        return key
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def utcnow() -> datetime:
    return datetime.now(UTC)


def format_time(value: datetime) -> str:
    """RFC 3339 with microseconds and a `Z`, the form every event carries."""
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(value: str) -> datetime:
    """Parse an RFC 3339 time that carries a UTC offset."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("has no UTC offset")
    return parsed.astimezone(UTC)


class _Record:
    """Conversion between an event dataclass and its schema's record (JSON object):
    times as RFC 3339 strings, nested tuples of records as lists of objects."""

    def to_record(self) -> dict[str, Any]:
        # A _Record is always mixed into a dataclass (mypy cannot know it is one).
        return {f.name: _to_json(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Any:
        # A class is hashable (the cache's key); mypy takes the instances' __hash__.
        converters = _converters(cls)  # type: ignore[arg-type]
        # A field a producer left out is one the schema gives a default (the
        # dataclass's too): one added later, such as a turn's agent_id.
        return cls(
            **{name: convert(record[name]) for name, convert in converters if name in record}
        )


@cache
def _converters(cls: type) -> list[tuple[str, Any]]:
    """(field name, function from its JSON value) for each field, built once per class."""
    hints = get_type_hints(cls)
    return [(f.name, _from_json_for(hints[f.name])) for f in fields(cls)]


def _from_json_for(hint: Any) -> Any:
    if hint is datetime:
        return parse_time
    if get_origin(hint) is tuple:
        (item, _ellipsis) = get_args(hint)
        return lambda value: tuple(item(**v) for v in value)
    return _same


def _same(value: Any) -> Any:
    return value


def _to_json(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    if is_dataclass(value):
        return {f.name: _to_json(getattr(value, f.name)) for f in fields(value)}
    return value


@dataclass(frozen=True)
class ToolEvent:
    name: str
    arguments: str
    output: str


@dataclass(frozen=True)
class TurnRecorded(_Record):
    """A finished turn of a session (`turn.recorded.v1`)."""

    EVENT_TYPE: ClassVar[str] = "turn.recorded.v1"
    TOPIC: ClassVar[str] = "turns"

    event_id: str
    app: str
    user_id: str
    session_id: str
    turn_id: str
    created_at: datetime
    user: str
    assistant: str
    project_id: str = ""
    prev_session_id: str = ""
    tool_events: tuple[ToolEvent, ...] = field(default_factory=tuple)
    agent_id: str = ""  # the agent that took part ('' none): its memories are the agent's

    @property
    def ordering_key(self) -> str:
        """Turns of one session share an ordering key (their delivery order is a hint only)."""
        return ordering_key(self.app, self.user_id, self.session_id)


@dataclass(frozen=True)
class ContentEvent:
    role: str
    text: str


@dataclass(frozen=True)
class MemoriesGenerate(_Record):
    """Generate memories from direct contents (`memories.generate.v1`)."""

    EVENT_TYPE: ClassVar[str] = "memories.generate.v1"
    TOPIC: ClassVar[str] = "memory-generate"

    event_id: str
    app: str
    user_id: str
    operation: str
    created_at: datetime
    events: tuple[ContentEvent, ...]
    project_id: str = ""
    session_id: str = ""
    agent_id: str = ""  # the agent the contents are of ('' none), as a turn's

    @property
    def ordering_key(self) -> str:
        return ""


@dataclass(frozen=True)
class CompactionRequested(_Record):
    """Fold a user's old episodes into a summary (`compaction.requested.v1`). With
    an empty `user_id` it is a sweep: one request per user of the app with old
    episodes (what a scheduler publishes, with a fixed body)."""

    EVENT_TYPE: ClassVar[str] = "compaction.requested.v1"
    TOPIC: ClassVar[str] = "compaction-requests"

    event_id: str
    app: str
    user_id: str
    retention_days: int
    batch_limit: int
    created_at: datetime
    project_id: str = ""

    @property
    def ordering_key(self) -> str:
        return ""


# Why an extraction window closes (ExtractionRequested.reason).
WINDOW_REASONS = ("full", "idle", "next_session", "flush", "late")


@dataclass(frozen=True)
class ExtractionRequested(_Record):
    """Extract what waits in one session's extraction window (`extraction.requested.v1`):
    published by the extraction worker when a window closes, and by the API when a
    client flushes the session. Its `reason` is one of `WINDOW_REASONS`."""

    EVENT_TYPE: ClassVar[str] = "extraction.requested.v1"
    TOPIC: ClassVar[str] = "extraction-requests"

    event_id: str
    app: str
    user_id: str
    session_id: str
    reason: str
    created_at: datetime
    turns: int = 0  # a flush: the turns the session had recorded (0: unknown)

    @property
    def ordering_key(self) -> str:
        """The session's, as its turns: one session's windows are extracted in turn."""
        return ordering_key(self.app, self.user_id, self.session_id)


# What happened to a memory (MemoryChanged.change).
MEMORY_CHANGES = ("CREATED", "UPDATED", "DELETED", "EXPIRED", "ROLLED_BACK")


@dataclass(frozen=True)
class MemoryChanged(_Record):
    """A memory changed (`memory.changed.v1`), for other services to react to. Written
    to an outbox in the change's own transaction and published once it committed,
    in the order of the user's changes (shared.bus.changes). A deleted, expired or
    erased memory's event carries no text."""

    EVENT_TYPE: ClassVar[str] = "memory.changed.v1"
    TOPIC: ClassVar[str] = "memory-changes"

    event_id: str
    app: str
    user_id: str
    memory_id: str
    change: str
    scope: str
    kind: str
    project_id: str
    session_id: str
    entity_name: str
    topic: str
    text: str
    previous_text: str
    source_event_id: str  # the event that caused it; empty for a write through the API
    expire_at: str  # RFC 3339, or empty: it does not expire
    changed_at: datetime
    agent_id: str = ""  # the agent the memory belongs to; empty: the user's, every agent's

    @property
    def ordering_key(self) -> str:
        """The user's: one user's changes arrive in the order they were made."""
        return ordering_key(self.app, self.user_id)


Event = TurnRecorded | MemoriesGenerate | CompactionRequested | ExtractionRequested | MemoryChanged

EVENT_TYPES: dict[str, type[Event]] = {
    cls.EVENT_TYPE: cls
    for cls in (
        TurnRecorded,
        MemoriesGenerate,
        CompactionRequested,
        ExtractionRequested,
        MemoryChanged,
    )
}
