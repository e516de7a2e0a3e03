"""What an app keeps: its extraction topics (`PUT /v1/config/extraction`).

The managed topics are Memory Bank's; an app keeps any of them and adds custom
topics, each with a description and few-shot examples. The extraction prompt
lists them and every memory names its topic; a memory of a topic the app does
not keep is never created, whatever the model answered (the planner drops it).
The `offline` provider knows no descriptions: it files each memory under a
managed topic by its kind (`topic_of`) and keeps only the app's.

The config may also carry metadata, the app's and each custom topic's: every
memory the extraction writes carries both (`metadata_of`, the topic's keys win).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MANAGED: dict[str, str] = {
    "personal_info": "facts about the user: who they are, where they live and work, the "
    "people and things in their life",
    "preferences": "what the user likes, chooses or prefers: tools, languages, styles, "
    "ways of working",
    "key_conversation_details": "key facts, decisions, outcomes and events of the "
    "conversation and of the user's projects",
    "explicit_instructions": "what the user explicitly asks to remember or to forget",
    "rules": "constraints and vetoes to follow always (must, never, always, limits)",
}
EXTRACTION_SETTING = "extraction"


@dataclass(frozen=True)
class Example:
    conversation: str
    memories: tuple[str, ...]


@dataclass(frozen=True)
class CustomTopic:
    name: str
    description: str
    examples: tuple[Example, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Topics:
    """The topics an app keeps; `configured` False: the default (every managed
    topic, and nothing is dropped for its topic)."""

    managed: tuple[str, ...] = tuple(MANAGED)
    custom: tuple[CustomTopic, ...] = ()
    configured: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)  # the app's, on every memory

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.managed, *(topic.name for topic in self.custom))

    def keeps(self, topic: str) -> bool:
        return not self.configured or topic in self.names

    def metadata_of(self, topic: str) -> dict[str, Any]:
        """The metadata a memory of `topic` is written with: the app's, and over it
        the custom topic's (the more specific level wins a key both name)."""
        own = next((t.metadata for t in self.custom if t.name == topic), {})
        return {**self.metadata, **own}


ALL_TOPICS = Topics()


def of_setting(value: dict[str, Any] | None) -> Topics:
    """The topics an app's stored setting names (validated when it was put)."""
    if value is None:
        return ALL_TOPICS
    custom = tuple(
        CustomTopic(
            t["name"],
            t["description"],
            tuple(Example(e["conversation"], tuple(e["memories"])) for e in t.get("examples", [])),
            t.get("metadata", {}),
        )
        for t in value.get("custom_topics", [])
    )
    managed = tuple(value.get("managed_topics", []))
    return Topics(managed, custom, configured=True, metadata=value.get("metadata", {}))


def topic_of(kind: str, scope: str) -> str:
    """The managed topic the `offline` provider files a memory under, by its kind."""
    if kind == "preference":
        return "preferences"
    if kind == "rule":
        return "rules"
    if kind == "fact" and scope == "global":
        return "personal_info"
    return "key_conversation_details"


def instruction(topics: Topics) -> list[str]:
    """The prompt's lines on what to keep: each topic with its description, and the
    custom topics' examples."""
    lines = ["Keep only memories of these topics (each memory names its topic):"]
    lines += [f"- {name}: {MANAGED[name]};" for name in topics.managed]
    for topic in topics.custom:
        lines.append(f"- {topic.name}: {topic.description};")
        for example in topic.examples:
            kept = "; ".join(example.memories) or "(nothing)"
            lines.append(f"  for example, from {example.conversation!r} keep: {kept}")
    return lines
