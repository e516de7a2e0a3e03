"""An app's settings its admin key sets through the API (`/v1/config/…`)."""

from __future__ import annotations

from typing import Annotated, Literal, cast

from pydantic import BeforeValidator, Field, model_validator

from services.api.memory_models import Kind, Metadata, ScopeName
from services.api.models import RequestBody, example, json_integer
from shared.db.outbox import PROFILE_TOPIC
from shared.llm.topics import MANAGED
from shared.memory.expiry import MAX_SECONDS, MIN_SECONDS
from shared.memory.metadata import checked as checked_metadata

# Seconds, or null: not set at this level (the next one decides).
# The bounds go first, so that the document declares them.
TtlSeconds = (
    Annotated[int, Field(ge=MIN_SECONDS, le=MAX_SECONDS), BeforeValidator(json_integer)] | None
)


class TtlLevels(RequestBody):
    """A TTL for every memory, and one per action that overrides it."""

    default: TtlSeconds = None
    create: TtlSeconds = None  # written through POST /v1/memories
    generate_created: TtlSeconds = None  # made by the extraction
    generate_updated: TtlSeconds = None  # changed by the extraction: expiry moves to now + this


class TtlConfig(TtlLevels):
    """The app's TTLs: these levels for every scope, `scopes` to override them per
    scope, and how long revisions are kept. Nothing set: nothing expires."""

    model_config = example({"default": None, "scopes": {"session": {"default": 604800}}})

    revisions: TtlSeconds = None
    scopes: dict[ScopeName, TtlLevels] = {}


ManagedTopic = Literal[
    "personal_info", "preferences", "key_conversation_details", "explicit_instructions", "rules"
]
TopicText = Annotated[str, Field(min_length=1, max_length=500, pattern="^[^\\u0000]*$")]


class TopicExample(RequestBody):
    """A few-shot example: a piece of conversation and the memories to keep from it
    (none: it shows what is not kept)."""

    conversation: Annotated[str, Field(min_length=1, max_length=2000, pattern="^[^\\u0000]*$")]
    memories: list[TopicText] = Field(default=[], max_length=5)


class CustomTopicConfig(RequestBody):
    name: Annotated[
        str,
        Field(
            pattern="^[a-z][a-z0-9_]{0,39}$",
            # "profile" is the topic of a profile field's changes (shared.db.outbox).
            json_schema_extra={"not": {"enum": [*MANAGED, PROFILE_TOPIC]}},
        ),
    ]
    description: TopicText
    examples: list[TopicExample] = Field(default=[], max_length=5)
    # Set over the app's on its memories (ExtractionConfig.metadata).
    metadata: Metadata = {}


class ExtractionConfig(RequestBody):
    """What the extraction keeps: the managed topics chosen and custom topics, and
    the metadata every memory it writes carries: the app's `metadata`, with its
    custom topic's over it (the topic's keys win). An update by the extraction sets
    these keys over the memory's own and keeps the others. Not set: every managed
    topic, no custom one, no metadata. A change applies to what is extracted from
    then on."""

    model_config = example(
        {
            "managed_topics": ["preferences", "rules"],
            "custom_topics": [
                {
                    "name": "travel",
                    "description": "where the user travels and how",
                    "examples": [
                        {
                            "conversation": "User: I fly to Lisbon every spring.",
                            "memories": ["User flies to Lisbon every spring."],
                        }
                    ],
                    "metadata": {"team": "trips"},
                }
            ],
            "metadata": {"source": "extracted"},
        }
    )

    managed_topics: list[ManagedTopic] = Field(
        # MANAGED is keyed by the managed topics.
        default=cast("list[ManagedTopic]", list(MANAGED)),
        max_length=len(MANAGED),
        json_schema_extra={"uniqueItems": True},
    )
    custom_topics: list[CustomTopicConfig] = Field(default=[], max_length=10)
    metadata: Metadata = {}

    @model_validator(mode="after")
    def _distinct(self) -> ExtractionConfig:
        if len(set(self.managed_topics)) != len(self.managed_topics):
            raise ValueError("managed_topics: each topic once")
        names = [t.name for t in self.custom_topics]
        if len(set(names)) != len(names):
            raise ValueError("custom_topics: each name once")
        clash = sorted(set(names) & set(MANAGED))
        if clash:
            raise ValueError(f"custom_topics: {clash[0]!r} is a managed topic's name")
        if PROFILE_TOPIC in names:
            raise ValueError(f"custom_topics: {PROFILE_TOPIC!r} is the profiles' topic")
        # What a topic's memories carry is the app's metadata with the topic's over it:
        # within a memory's bounds as a whole, not only each part.
        for i, topic in enumerate(self.custom_topics):
            try:
                checked_metadata({**self.metadata, **topic.metadata})
            except ValueError as exc:
                raise ValueError(f"custom_topics.{i}.metadata: with the app's, {exc}") from None
        return self


class AgentsConfig(RequestBody):
    """What an agent learns for the user rather than for itself: a memory extracted
    from an agent's turns of one of these kinds or topics is the user's, read by
    every agent of the user. Not set: nothing is shared, each agent keeps what it
    learns. A change applies to what is extracted from then on."""

    model_config = example({"shared_kinds": ["preference"], "shared_topics": ["personal_info"]})

    shared_kinds: list[Kind] = Field(
        default=[], max_length=4, json_schema_extra={"uniqueItems": True}
    )
    shared_topics: list[Annotated[str, Field(pattern="^[a-z][a-z0-9_]{0,39}$")]] = Field(
        default=[],
        max_length=50,
        json_schema_extra={"uniqueItems": True},
        description="Each a managed topic or one of the app's custom topics "
        "(`PUT /v1/config/extraction`).",
    )

    @model_validator(mode="after")
    def _distinct(self) -> AgentsConfig:
        if len(set(self.shared_kinds)) != len(self.shared_kinds):
            raise ValueError("shared_kinds: each kind once")
        if len(set(self.shared_topics)) != len(self.shared_topics):
            raise ValueError("shared_topics: each topic once")
        return self
