"""The topics and subscriptions, as data, and the one place names are made
(docs/design.md, "Topics and subscriptions").

Every resource name carries the configured prefix. Each subscription has its
own dead-letter topic and a pull subscription on it, both named by
`dead_letter_name`; no call site assembles a name by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.events import (
    EVENT_TYPES,
    CompactionRequested,
    Event,
    ExtractionRequested,
    MemoriesGenerate,
    TurnRecorded,
)


@dataclass(frozen=True)
class TopicSpec:
    name: str  # short name, without the prefix
    event: type[Event]  # what it carries

    @property
    def event_type(self) -> str:
        return self.event.EVENT_TYPE


@dataclass(frozen=True)
class SubscriptionSpec:
    name: str  # short name, without the prefix
    topic: str  # short topic name
    ordered: bool
    consumer: str  # the kind of worker that consumes it

    @property
    def event(self) -> type[Event]:
        """The event type it carries (its topic's)."""
        return next(t.event for t in TOPICS if t.name == self.topic)


# A topic per event type, named by the event. memory.changed.v1's is for other
# services (a push subscription is the webhook): none of ours reads it.
TOPICS: tuple[TopicSpec, ...] = tuple(TopicSpec(e.TOPIC, e) for e in EVENT_TYPES.values())

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


# The worker kinds, each the consumer of its subscriptions above: the CLI's
# `worker KIND`, `up --scale`, the Terraform's services and the runtime's tables
# all take kinds and subscription names from here.
WORKER_KINDS: tuple[str, ...] = tuple(dict.fromkeys(s.consumer for s in SUBSCRIPTIONS))


def subscriptions_of(kind: str) -> tuple[SubscriptionSpec, ...]:
    """The subscriptions a worker kind consumes."""
    found = tuple(s for s in SUBSCRIPTIONS if s.consumer == kind)
    if not found:
        raise KeyError(f"unknown worker kind {kind!r}; known: {', '.join(WORKER_KINDS)}")
    return found


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
