"""The topics and subscriptions, as data, and the one place names are made
(docs/design.md, "Topics and subscriptions").

Every resource name carries the configured prefix. Each subscription has its
own dead-letter topic and a pull subscription on it, both named by
`dead_letter_name`; no call site assembles a name by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.events import (
    CompactionRequested,
    ExtractionRequested,
    MemoriesGenerate,
    MemoryChanged,
    TurnRecorded,
)


@dataclass(frozen=True)
class TopicSpec:
    name: str  # short name, without the prefix
    event_type: str


@dataclass(frozen=True)
class SubscriptionSpec:
    name: str  # short name, without the prefix
    topic: str  # short topic name
    ordered: bool
    consumer: str  # the worker that consumes it


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(TurnRecorded.TOPIC, TurnRecorded.EVENT_TYPE),
    TopicSpec(MemoriesGenerate.TOPIC, MemoriesGenerate.EVENT_TYPE),
    TopicSpec(CompactionRequested.TOPIC, CompactionRequested.EVENT_TYPE),
    TopicSpec(ExtractionRequested.TOPIC, ExtractionRequested.EVENT_TYPE),
    # For other services (a push subscription is the webhook): none of ours reads it.
    TopicSpec(MemoryChanged.TOPIC, MemoryChanged.EVENT_TYPE),
)

SUBSCRIPTIONS: tuple[SubscriptionSpec, ...] = (
    SubscriptionSpec("turns-summary", TurnRecorded.TOPIC, ordered=True, consumer="summary"),
    SubscriptionSpec("turns-extraction", TurnRecorded.TOPIC, ordered=True, consumer="extraction"),
    SubscriptionSpec(
        "memory-generate-extraction", MemoriesGenerate.TOPIC, ordered=False, consumer="extraction"
    ),
    SubscriptionSpec(
        "compaction-requests", CompactionRequested.TOPIC, ordered=False, consumer="compaction"
    ),
    SubscriptionSpec(
        "extraction-requests", ExtractionRequested.TOPIC, ordered=True, consumer="extraction"
    ),
)


def full_name(prefix: str, short: str) -> str:
    """The resource id of a topic or subscription: the prefix and the short name."""
    return f"{prefix}{short}"


def dead_letter_name(subscription: str) -> str:
    """The short name of a subscription's dead-letter topic and of the pull subscription on it."""
    return f"{subscription}-dlq"


def schema_name(prefix: str, event_type: str) -> str:
    """The Pub/Sub schema id for an event type (`turn.recorded.v1` → `…turn-recorded-v1`)."""
    return f"{prefix}{event_type.replace('.', '-')}"


def subscription_spec(name: str, prefix: str) -> SubscriptionSpec:
    """Find a subscription by its short name, its full id, or its dead-letter name."""
    candidates = {name, name.removeprefix(prefix)}
    for candidate in list(candidates):
        if candidate.endswith("-dlq"):
            candidates.add(candidate.removesuffix("-dlq"))
    for spec in SUBSCRIPTIONS:
        if spec.name in candidates:
            return spec
    known = ", ".join(s.name for s in SUBSCRIPTIONS)
    raise KeyError(f"unknown subscription {name!r}; known: {known}")
