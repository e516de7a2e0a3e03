"""Events: models mirroring `schemas/events/*.avsc`, and their message codec."""

from shared.events.codec import (
    SCHEMA_VERSION,
    Limits,
    OutgoingMessage,
    decode,
    encode,
)
from shared.events.models import (
    EVENT_TYPES,
    MEMORY_CHANGES,
    WINDOW_REASONS,
    CompactionRequested,
    ContentEvent,
    Event,
    ExtractionRequested,
    MemoriesGenerate,
    MemoryChanged,
    ToolEvent,
    TurnRecorded,
    derived_event_id,
    format_time,
    parse_time,
    utcnow,
)

__all__ = [
    "EVENT_TYPES",
    "MEMORY_CHANGES",
    "SCHEMA_VERSION",
    "WINDOW_REASONS",
    "CompactionRequested",
    "ContentEvent",
    "Event",
    "ExtractionRequested",
    "Limits",
    "MemoriesGenerate",
    "MemoryChanged",
    "OutgoingMessage",
    "ToolEvent",
    "TurnRecorded",
    "decode",
    "derived_event_id",
    "encode",
    "format_time",
    "parse_time",
    "utcnow",
]
