"""Encode events as Pub/Sub messages and decode received messages back into events.

Decoding applies the schema and then the rules a schema cannot express
(identifiers, sizes, the schema version, attributes agreeing with the body).
Anything that fails raises `InvalidEvent`, which dead-letters the message.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from shared.errors import EventTooLarge, InvalidEvent, UnknownEventType
from shared.events.models import (
    EVENT_TYPES,
    CompactionRequested,
    Event,
    ExtractionRequested,
    MemoriesGenerate,
    MemoryChanged,
    TurnRecorded,
    parse_time,
)
from shared.events.schemas import schema_problem
from shared.identifiers import identifier_problem, text_problem

SCHEMA_VERSION = "1"


class SizeSettings(Protocol):
    """The settings `Limits` come from (`shared.config.Settings`; named by their
    fields, so that the events need not import the configuration)."""

    max_message_bytes: int
    max_tool_events_bytes: int
    max_event_bytes: int


@dataclass(frozen=True)
class Limits:
    """Size rules applied to event texts, the same ones the API applies; and, when
    an event is encoded for publishing, to its whole body."""

    max_message_bytes: int = 32 * 1024
    max_tool_events_bytes: int = 256 * 1024
    max_event_bytes: int | None = None

    @classmethod
    def from_settings(cls, settings: SizeSettings) -> Limits:
        return cls(
            settings.max_message_bytes, settings.max_tool_events_bytes, settings.max_event_bytes
        )


@dataclass(frozen=True)
class OutgoingMessage:
    topic: str  # the topic's short name, without the prefix
    data: bytes
    attributes: dict[str, str]
    ordering_key: str


def _record_problem(event_type: str, record: dict[str, Any], limits: Limits) -> str | None:
    return schema_problem(event_type, record) or _rules_problem(event_type, record, limits)


def encode(event: Event, limits: Limits | None = None) -> OutgoingMessage:
    """Validate `event` against its schema and rules and build its message."""
    record = event.to_record()
    problem = _record_problem(event.EVENT_TYPE, record, limits or Limits())
    if problem:
        raise InvalidEvent(f"{event.EVENT_TYPE}: {problem}")
    data = _json(record)
    limit = (limits or Limits()).max_event_bytes
    if limit is not None and len(data) > limit:
        largest = max(record, key=lambda name: len(_json(record[name])))
        raise EventTooLarge(
            f"{largest}: the event would be {len(data)} bytes, over the limit of {limit} "
            f"bytes (AM_MAX_EVENT_BYTES)",
            largest,
        )
    attributes = {
        "event_id": event.event_id,
        "event_type": event.EVENT_TYPE,
        "schema_version": SCHEMA_VERSION,
        "app": event.app,
    }
    return OutgoingMessage(event.TOPIC, data, attributes, event.ordering_key)


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode(data: bytes, attributes: Mapping[str, str], limits: Limits | None = None) -> Event:
    """Turn a received message into its event, or raise `InvalidEvent` with the reason."""
    event_type = attributes.get("event_type", "")
    cls = EVENT_TYPES.get(event_type)
    if cls is None:
        raise UnknownEventType(f"unknown event_type attribute {event_type!r}")
    version = attributes.get("schema_version", "")
    if version != SCHEMA_VERSION:
        raise InvalidEvent(f"unsupported schema_version {version!r} for {event_type}")
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidEvent(f"body is not JSON: {exc}") from None
    try:
        problem = _record_problem(event_type, record, limits or Limits())
    except Exception as exc:  # validation must never fail as "transient"
        raise InvalidEvent(f"body cannot be validated: {type(exc).__name__}: {exc}") from None
    if problem:
        raise InvalidEvent(problem)
    for name in ("event_id", "app"):
        if attributes.get(name) != record[name]:
            raise InvalidEvent(f"attribute {name} does not match the body's {name}")
    return cls.from_record(record)


def _rules_problem(event_type: str, record: dict[str, Any], limits: Limits) -> str | None:
    try:
        uuid.UUID(record["event_id"])
    except ValueError:
        return "event_id: must be a UUID"
    required, optional = _IDENTIFIERS[event_type]
    for name in required:
        problem = identifier_problem(record[name])
        if problem:
            return f"{name}: {problem}"
    for name in optional:
        if record.get(name, "") != "":
            problem = identifier_problem(record[name])
            if problem:
                return f"{name}: {problem}"
    when = "changed_at" if event_type == MemoryChanged.EVENT_TYPE else "created_at"
    try:
        parse_time(record[when])
    except ValueError as exc:
        return f"{when}: not an RFC 3339 time with an offset ({exc})"
    if event_type == TurnRecorded.EVENT_TYPE:
        return _turn_problem(record, limits)
    if event_type == MemoriesGenerate.EVENT_TYPE:
        for i, item in enumerate(record["events"]):
            problem = text_problem(item["text"], limits.max_message_bytes)
            if problem:
                return f"events[{i}].text: {problem}"
    if event_type == ExtractionRequested.EVENT_TYPE and record["turns"] < 0:
        return "turns: must be at least 0"
    if event_type == CompactionRequested.EVENT_TYPE:
        if record["retention_days"] < 1:
            return "retention_days: must be at least 1"
        if not 1 <= record["batch_limit"] <= 1000:
            return "batch_limit: must be between 1 and 1000"
    return None


def _turn_problem(record: dict[str, Any], limits: Limits) -> str | None:
    for name in ("user", "assistant"):
        problem = text_problem(record[name], limits.max_message_bytes)
        if problem:
            return f"{name}: {problem}"
    for i, tool in enumerate(record["tool_events"]):
        for name in ("name", "arguments", "output"):
            problem = text_problem(tool[name])
            if problem:
                return f"tool_events[{i}].{name}: {problem}"
    size = sum(
        len(t["name"].encode()) + len(t["arguments"].encode()) + len(t["output"].encode())
        for t in record["tool_events"]
    )
    if size > limits.max_tool_events_bytes:
        return f"tool_events: {size} bytes, over the limit of {limits.max_tool_events_bytes} bytes"
    return None


_IDENTIFIERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    TurnRecorded.EVENT_TYPE: (
        ("app", "user_id", "session_id", "turn_id"),
        ("project_id", "prev_session_id", "agent_id"),
    ),
    MemoriesGenerate.EVENT_TYPE: (
        ("app", "user_id", "operation"),
        ("project_id", "session_id", "agent_id"),
    ),
    # An empty user_id is a sweep of the app (services/compaction_worker).
    CompactionRequested.EVENT_TYPE: (("app",), ("user_id", "project_id")),
    ExtractionRequested.EVENT_TYPE: (("app", "user_id", "session_id"), ()),
    MemoryChanged.EVENT_TYPE: (("app", "user_id"), ("project_id", "session_id")),
}
