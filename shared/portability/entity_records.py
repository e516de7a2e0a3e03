"""The export's lines for a user's connected memory: entities with their aliases
and mentions, facts over valid time, and merges (undone ones too, so that an
imported merge can be undone as the original could).

They follow the memories and episodes they point at, so an import has written
those first. A merge's moved mentions are named by the row they are in (memory
or episode) and the entity that holds them now, not by the database's own
mention ids, which another database does not share.
"""

from __future__ import annotations

from typing import Literal
from uuid import UUID

from pydantic import model_validator

from shared.portability.fields import Line, OptionalId, OptionalTime, Text, Time

EntityKind = Literal["person", "organisation", "project", "place", "tool", "pet", "event", "other"]
AliasHow = Literal["name", "nickname", "first name", "full name", "similar", "merge", "model"]


class AliasRecord(Line):
    alias: Text
    normalised: Text
    how: AliasHow


class _RowRef(Line):
    """A memory or an archived turn (exactly one of the two)."""

    memory_id: UUID | None
    episode_id: UUID | None

    @model_validator(mode="after")
    def _one_row(self) -> _RowRef:
        if (self.memory_id is None) == (self.episode_id is None):
            raise ValueError("memory_id: exactly one of memory_id and episode_id is set")
        return self


class MentionRecord(_RowRef):
    surface: Text
    observed_at: Time
    kind: EntityKind | None = None  # what the mention called it (None: not known)


class MovedMention(_RowRef):
    entity_id: UUID  # the entity holding the mention when the export was made


class MovedRecord(Line):
    mentions: list[MovedMention]
    aliases: list[Text]
    subject_facts: list[UUID]
    object_facts: list[UUID]


class EntityRecord(Line):
    type: Literal["entity"]
    id: UUID
    project_id: OptionalId
    name: Text
    kind: EntityKind
    first_seen: Time
    last_seen: Time
    created_at: Time
    aliases: list[AliasRecord]
    mentions: list[MentionRecord]


class FactRecord(Line):
    type: Literal["fact"]
    id: UUID
    subject_id: UUID
    predicate: Text
    object_id: UUID | None
    value: Text
    single: bool
    valid_from: Time
    valid_to: OptionalTime
    memory_id: UUID | None
    event_id: UUID | None
    recorded_at: Time

    @model_validator(mode="after")
    def _ordered(self) -> FactRecord:
        if self.valid_to is not None and self.valid_to < self.valid_from:
            raise ValueError("valid_to: before valid_from")
        return self


class MergeRecord(Line):
    type: Literal["merge"]
    id: UUID
    merged_id: UUID
    into_id: UUID
    moved: MovedRecord
    merged_at: Time
    undone_at: OptionalTime
