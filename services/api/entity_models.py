"""Response bodies of the entity routes: a user's entities, and one with its
facts over time, its memories and the turns that mention it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, WithJsonSchema

from services.api.models import Identifier, OptionalId, RequestBody

# RFC 3339 text, declared as such so that a client parses it into a datetime.
Moment = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
MaybeMoment = Annotated[
    str | None,
    WithJsonSchema({"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]}),
]

EntityKind = Literal["person", "organisation", "project", "place", "tool", "pet", "event", "other"]


class EntityRef(BaseModel):
    """An entity by name, as a memory that mentions it shows it."""

    id: str
    name: str
    kind: EntityKind
    project_id: str | None = Field(description="the project it belongs to; null: the user's own")


class EntityView(EntityRef):
    aliases: list[str] = Field(description="every name it was mentioned by")
    memories: int = Field(description="memories that mention it")
    turns: int = Field(description="archived turns that mention it")
    first_seen: Moment
    last_seen: Moment


class EntityPage(BaseModel):
    entities: list[EntityView]
    next_cursor: str | None


class AliasView(BaseModel):
    alias: str
    how: Literal["name", "nickname", "first name", "full name", "similar", "merge", "model"] = (
        Field(description="why the name was taken for this entity (`model`: the model judged it)")
    )


class FactView(BaseModel):
    """subject, predicate, object (an entity) or value, true from `valid_from` until
    `valid_to` (null: still true), in event time."""

    id: str
    subject_id: str
    subject: str
    predicate: str
    object_id: str | None
    object: str | None
    value: str
    valid_from: Moment
    valid_to: MaybeMoment
    memory_id: str | None = Field(description="the memory that states it")


class EntityMemoryView(BaseModel):
    id: str
    kind: str
    text: str
    observed_at: str
    live: bool


class EntityTurnView(BaseModel):
    id: str
    session_id: str
    turn_id: str
    created_at: str
    text: str


class EntityDetail(EntityView):
    alias_sources: list[AliasView]
    facts: list[FactView]
    memories_mentioning: list[EntityMemoryView]
    turns_mentioning: list[EntityTurnView] = Field(description="the latest 50 turns")


class MergeRequest(RequestBody):
    user_id: Identifier
    project_id: OptionalId = None
    into: str = Field(description="the entity it is the same thing as")


class UnmergeRequest(RequestBody):
    user_id: Identifier
    project_id: OptionalId = None


class MergeResponse(BaseModel):
    merge_id: str
    entity_id: str = Field(description="the entity merged (or, undone, unmerged)")
