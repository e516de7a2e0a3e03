"""Request and response bodies of the long-term memory routes: memories, the
archive, the context, operations, deletions and compactions."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, WithJsonSchema

from services.api.entity_models import EntityRef, FactView
from services.api.filter_models import FilterJson
from services.api.models import (
    BLANK,
    TEXT_SCHEMA,
    AgentOfTurn,
    AgentRead,
    Count,
    Identifier,
    OptionalId,
    RequestBody,
    Time,
    example,
    json_integer,
)
from services.api.time_models import TimeFields
from shared.memory import metadata

Kind = Literal["preference", "fact", "rule", "event"]
ScopeName = Literal["global", "project", "session"]


def _query(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    if not value.strip():
        raise ValueError("must not be empty")
    if len(value) > MAX_QUERY_LENGTH:
        raise ValueError(f"must be at most {MAX_QUERY_LENGTH} characters")
    return value


def _name(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    return value


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+14:00 is before year 1 in UTC
        raise ValueError("is out of range once converted to UTC") from None


# What the validators above enforce, declared in the OpenAPI document so that a
# client (or a fuzzer) knows before sending.
MAX_QUERY_LENGTH = 4000
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
QUERY_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_QUERY_LENGTH,
    "pattern": f"^[^\\u0000]*[^{BLANK}\\u0000][^\\u0000]*$",
    "description": "Not blank; no NUL characters.",
}
NAME_SCHEMA = {
    "type": "string",
    "maxLength": 200,
    "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$",
}

QueryText = Annotated[str, AfterValidator(_query), WithJsonSchema(QUERY_SCHEMA)]
EntityName = Annotated[
    str, Field(max_length=200), AfterValidator(_name), WithJsonSchema(NAME_SCHEMA)
]
AwareTime = Annotated[Time | None, AfterValidator(_aware)]
Metadata = Annotated[
    dict[str, Any], AfterValidator(metadata.checked), WithJsonSchema(metadata.SCHEMA)
]
TOPIC_PATTERN = "^[a-z][a-z0-9_]{0,39}$"


class _Request(RequestBody):
    user_id: Identifier


class SearchRequest(_Request, TimeFields):
    model_config = example(
        {
            "user_id": "u-42",
            "project_id": "atlas",
            "query": "which editor does the user prefer?",
            "k": 5,
        }
    )

    project_id: OptionalId = None
    agent_id: AgentRead = None
    query: QueryText
    k: Count = Field(default=10, ge=1, le=100)
    kinds: list[Kind] | None = None
    decompose: bool = False
    filter: FilterJson | None = None


class MemoryIdentity(BaseModel):
    """Which memory, and its text."""

    id: str
    scope: ScopeName
    kind: Kind
    project_id: str | None
    session_id: str | None
    entity_name: str
    text: str
    agent_id: str | None = None  # the agent it belongs to; null: the user's, every agent reads it


class MemoryView(MemoryIdentity):
    observed_at: str
    created_at: str
    updated_at: str
    deleted_at: str | None = None
    expire_at: str | None = None  # gone from every read from then on; null: never
    topic: str = ""  # the extraction topic it was kept under
    metadata: dict[str, Any] = {}  # the caller's own JSON object


class ScoredMemory(MemoryView):
    score: float
    rankers: list[str]  # which rankings found it: "vector", "text"


class SearchResponse(BaseModel):
    queries: list[str]  # the sub-queries searched (one unless decompose)
    memories: list[ScoredMemory]


class ArchiveSearchRequest(_Request):
    model_config = example({"user_id": "u-42", "query": "the pottery class", "k": 3})

    project_id: OptionalId = None
    agent_id: AgentRead = None
    query: QueryText
    k: Count = Field(default=3, ge=1, le=100)
    before: AwareTime = None
    after: AwareTime = None
    context_turns: Count = Field(
        default=0,
        ge=0,
        le=5,
        description="turns of each hit's session before and after it to return with it, as "
        "its `context` (a turn that is a hit, or in a better hit's context, is listed once)",
    )
    read_period: bool = Field(
        default=True,
        description="without `before` and `after`: search first within the period the query "
        "names ('in May 2023', 'last summer', 'two weeks ago'; rules in docs/api.md), then the "
        "rest of the archive if that period holds fewer than `k` turns",
    )
    asked_at: AwareTime = Field(
        default=None,
        description="the time relative periods ('last week') are read against; default now",
    )


class ContextTurnView(BaseModel):
    """A turn of a hit's session around it, returned as context, not as a hit."""

    id: str
    turn_id: str
    created_at: str
    text: str
    offset: int = Field(description="its place from the hit: -1 the turn before, 1 the one after")


class ArchivedTurn(BaseModel):
    # What every view of an episode (a turn in the archive) shows first.
    id: str
    turn_id: str
    session_id: str
    project_id: str | None
    created_at: str
    text: str


class EpisodeView(ArchivedTurn):
    score: float
    rankers: list[str]
    context: list[ContextTurnView] = Field(
        default=[], description="with `context_turns`: the turns around it, in session order"
    )


class PeriodView(BaseModel):
    """The period the query named, as the search read it: `start` <= time < `end`."""

    phrase: str
    start: str
    end: str


class ArchiveSearchResponse(BaseModel):
    episodes: list[EpisodeView]
    period: PeriodView | None = Field(
        default=None, description="the period the query named, searched first; null if none"
    )


def _only_its_scope_names(scope: str, field: str) -> dict:
    """JSON Schema: `field` is required for `scope` and absent (or null) otherwise."""
    return {
        "if": {"properties": {"scope": {"const": scope}}},
        "then": {"required": [field], "properties": {field: {"type": "string"}}},
        "else": {"properties": {field: {"type": "null"}}},
    }


class RevisionView(BaseModel):
    revision: int  # its number, from 1, in the order written (what a rollback names)
    action: str
    old_text: str | None
    new_text: str | None
    event_id: str | None
    observed_at: str
    applied: bool  # false: an older observation, kept in history only
    created_at: str
    source: str = Field(
        default="", description="who wrote it: '' the pipeline, 'key:<id>' an edit by that API key"
    )
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="the memory's metadata after it; null: a revision that kept none "
        "(a retirement)",
    )


class MemoryDetail(MemoryView):
    revisions: list[RevisionView]
    entities: list[EntityRef] = Field(default=[], description="the entities it mentions")
    facts: list[FactView] = Field(
        default=[], description="the facts it states, in valid time (the ended ones too)"
    )


class MemoryPage(BaseModel):
    memories: list[MemoryView]
    next_cursor: str | None


class DeleteMemoryResponse(BaseModel):
    memory_id: str
    deleted: bool


class ContentEventIn(RequestBody):
    role: Literal["user", "model", "assistant"]
    text: Annotated[
        str,
        Field(min_length=1, max_length=32_000),
        WithJsonSchema({**TEXT_SCHEMA, "minLength": 1, "maxLength": 32_000}),
    ]


class GenerateScope(RequestBody):
    project_id: OptionalId = None
    session_id: OptionalId = None
    agent_id: AgentOfTurn = None


class GenerateRequest(_Request):
    model_config = example(
        {
            "user_id": "u-42",
            "scope": {"project_id": "atlas"},
            "events": [{"role": "user", "text": "I moved to Lisbon last month."}],
        }
    )

    scope: GenerateScope = GenerateScope()
    events: list[ContentEventIn] = Field(min_length=1, max_length=200)
    wait: bool = False


class GeneratedMemory(BaseModel):
    action: Literal["CREATED", "UPDATED", "DELETED"]
    memory: MemoryIdentity  # the memory it created, updated or deleted


class Operation(BaseModel):
    name: str
    done: bool
    generated_memories: list[GeneratedMemory] | None = None
    error: str | None = None


class DeleteByQueryRequest(_Request):
    project_id: OptionalId = None
    agent_id: AgentRead = None
    query: QueryText
    filter: FilterJson | None = None


class DeleteByQueryResponse(BaseModel):
    deleted: list[MemoryView]


class DeletionCounts(BaseModel):
    user_id: str
    project_id: str | None = None
    deleted: dict[str, int]
    deleted_at: str | None = None


class CompactionRequest(_Request):
    project_id: OptionalId = None
    retention_days: Annotated[int, Field(ge=1, le=36500), BeforeValidator(json_integer)] | None = (
        None
    )
    batch_limit: Annotated[int, Field(ge=1, le=1000), BeforeValidator(json_integer)] | None = None


class CompactionAccepted(BaseModel):
    event_id: str
    user_id: str
    project_id: str | None
    retention_days: int
    batch_limit: int
