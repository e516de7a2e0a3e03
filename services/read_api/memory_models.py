"""Request and response bodies of the long-term memory routes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from services.read_api.models import check_identifier
from shared.memory.store import COMPACTED_ENTITY

Kind = Literal["preference", "fact", "rule", "event"]
ScopeName = Literal["global", "project", "session"]


def _optional_id(value: str | None) -> str | None:
    return None if value is None else check_identifier(value)


def _query(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    if len(value) > 4000:
        raise ValueError("must be at most 4000 characters")
    return value


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Identifier = Annotated[str, AfterValidator(check_identifier)]
OptionalId = Annotated[str | None, AfterValidator(_optional_id)]
QueryText = Annotated[str, AfterValidator(_query)]
AwareTime = Annotated[datetime | None, AfterValidator(_aware)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: Identifier


class SearchRequest(_Request):
    project_id: OptionalId = None
    query: QueryText
    k: int = Field(default=10, ge=1, le=100)
    kinds: list[Kind] | None = None
    decompose: bool = False


class MemoryView(BaseModel):
    id: str
    scope: ScopeName
    kind: Kind
    project_id: str | None
    session_id: str | None
    entity_name: str
    text: str
    observed_at: str
    created_at: str
    updated_at: str
    deleted_at: str | None = None


class ScoredMemory(MemoryView):
    score: float
    rankers: list[str]  # which rankings found it: "vector", "text"


class SearchResponse(BaseModel):
    queries: list[str]  # the sub-queries searched (one unless decompose)
    memories: list[ScoredMemory]


class ArchiveSearchRequest(_Request):
    project_id: OptionalId = None
    query: QueryText
    k: int = Field(default=3, ge=1, le=100)
    before: AwareTime = None
    after: AwareTime = None


class EpisodeView(BaseModel):
    id: str
    turn_id: str
    session_id: str
    project_id: str | None
    created_at: str
    text: str
    score: float
    rankers: list[str]


class ArchiveSearchResponse(BaseModel):
    episodes: list[EpisodeView]


class WriteMemoryRequest(_Request):
    text: QueryText
    scope: ScopeName
    kind: Kind
    project_id: OptionalId = None
    session_id: OptionalId = None
    entity_name: str = Field(default="", max_length=200)
    consolidate: bool = True

    @field_validator("entity_name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value.strip().casefold() == COMPACTED_ENTITY:
            raise ValueError(f"{COMPACTED_ENTITY!r} is reserved for the compaction worker")
        return value

    @model_validator(mode="after")
    def _scope_fits(self) -> WriteMemoryRequest:
        if self.scope == "project" and not self.project_id:
            raise ValueError("project_id: a project memory needs its project_id")
        if self.scope == "session" and not self.session_id:
            raise ValueError("session_id: a session memory needs its session_id")
        if self.scope == "global" and self.project_id:
            raise ValueError("project_id: a global memory belongs to no project")
        return self


class WriteMemoryResponse(BaseModel):
    action: Literal["CREATED", "UPDATED", "DELETED", "NONE", "HISTORY"]
    memory: MemoryView | None


class RevisionView(BaseModel):
    action: str
    old_text: str | None
    new_text: str | None
    event_id: str | None
    observed_at: str
    applied: bool  # false: an older observation, kept in history only
    created_at: str


class MemoryDetail(MemoryView):
    revisions: list[RevisionView]


class MemoryPage(BaseModel):
    memories: list[MemoryView]
    next_cursor: str | None


class DeleteMemoryResponse(BaseModel):
    memory_id: str
    deleted: bool


class ContextRequest(_Request):
    session_id: Identifier
    project_id: OptionalId = None
    prev_session_id: OptionalId = None
    query: QueryText
    k: int = Field(default=8, ge=1, le=100)
    token_budget: int | None = Field(default=None, ge=100, le=100_000)


class ContextTurn(BaseModel):
    turn_id: str
    created_at: str
    user: str
    assistant: str


class ContextSummary(BaseModel):
    session_id: str
    text: str
    version: int


class ContextResponse(BaseModel):
    rolling_summary: ContextSummary | None
    carried_summary: ContextSummary | None
    recent_turns: list[ContextTurn]
    pinned_rules: list[MemoryView]
    memories: list[ScoredMemory]
    system_instruction: str
    tokens: int
    omitted: dict[str, int]  # what did not fit in the token budget, by section
    degraded: list[str]  # "session" (Valkey), "memories" (Postgres or embeddings)


class ContentEventIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "model", "assistant"]
    text: str = Field(min_length=1, max_length=32_000)


class GenerateScope(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project_id: str | None = None
    session_id: str | None = None


class GenerateRequest(_Request):
    scope: GenerateScope = GenerateScope()
    events: list[ContentEventIn] = Field(min_length=1, max_length=200)
    wait: bool = False


class Operation(BaseModel):
    name: str
    done: bool
    generated_memories: list[dict] | None = None
    error: str | None = None
