"""Event messages: frozen dataclasses, each mirroring one schema in `schemas/events/`.

Events are named in the past tense; `MemoriesGenerate` keeps the Memory Bank
operation's name. Absent optional values are empty strings, as in the schemas.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

# Deterministic event ids: a retried API call with the same turn_id gets the
# same event_id, so every consumer's ledger treats it as the same event.
_EVENT_NAMESPACE = uuid.UUID("5d1c2f6e-8a4b-4e55-9a60-2f7b9c1d0e11")


def derived_event_id(*parts: str) -> str:
    """A stable event id for the given identifying parts."""
    return str(uuid.uuid5(_EVENT_NAMESPACE, "\x1f".join(parts)))


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


@dataclass(frozen=True)
class ToolEvent:
    name: str
    arguments: str
    output: str


@dataclass(frozen=True)
class TurnRecorded:
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

    @property
    def ordering_key(self) -> str:
        """Turns of one session share an ordering key (their delivery order is a hint only)."""
        return f"{self.app}/{self.user_id}/{self.session_id}"

    def to_record(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "app": self.app,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "project_id": self.project_id,
            "prev_session_id": self.prev_session_id,
            "turn_id": self.turn_id,
            "created_at": format_time(self.created_at),
            "user": self.user,
            "assistant": self.assistant,
            "tool_events": [
                {"name": t.name, "arguments": t.arguments, "output": t.output}
                for t in self.tool_events
            ],
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TurnRecorded:
        return cls(
            event_id=record["event_id"],
            app=record["app"],
            user_id=record["user_id"],
            session_id=record["session_id"],
            project_id=record["project_id"],
            prev_session_id=record["prev_session_id"],
            turn_id=record["turn_id"],
            created_at=parse_time(record["created_at"]),
            user=record["user"],
            assistant=record["assistant"],
            tool_events=tuple(ToolEvent(**t) for t in record["tool_events"]),
        )


@dataclass(frozen=True)
class ContentEvent:
    role: str
    text: str


@dataclass(frozen=True)
class MemoriesGenerate:
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

    @property
    def ordering_key(self) -> str:
        return ""

    def to_record(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "app": self.app,
            "user_id": self.user_id,
            "project_id": self.project_id,
            "session_id": self.session_id,
            "operation": self.operation,
            "created_at": format_time(self.created_at),
            "events": [{"role": e.role, "text": e.text} for e in self.events],
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> MemoriesGenerate:
        return cls(
            event_id=record["event_id"],
            app=record["app"],
            user_id=record["user_id"],
            project_id=record["project_id"],
            session_id=record["session_id"],
            operation=record["operation"],
            created_at=parse_time(record["created_at"]),
            events=tuple(ContentEvent(**e) for e in record["events"]),
        )


@dataclass(frozen=True)
class CompactionRequested:
    """Fold a user's old episodes into a summary (`compaction.requested.v1`)."""

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

    def to_record(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "app": self.app,
            "user_id": self.user_id,
            "project_id": self.project_id,
            "retention_days": self.retention_days,
            "batch_limit": self.batch_limit,
            "created_at": format_time(self.created_at),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> CompactionRequested:
        return cls(
            event_id=record["event_id"],
            app=record["app"],
            user_id=record["user_id"],
            project_id=record["project_id"],
            retention_days=record["retention_days"],
            batch_limit=record["batch_limit"],
            created_at=parse_time(record["created_at"]),
        )


Event = TurnRecorded | MemoriesGenerate | CompactionRequested

EVENT_TYPES: dict[str, type[Event]] = {
    cls.EVENT_TYPE: cls for cls in (TurnRecorded, MemoriesGenerate, CompactionRequested)
}
