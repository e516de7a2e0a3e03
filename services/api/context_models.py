"""Request and response bodies of `POST /v1/context`: the turn's context, its
sections, where each item comes from, and the caller's caps per section."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, model_validator

from services.api.filter_models import FilterJson
from services.api.memory_models import (
    ArchivedTurn,
    AwareTime,
    MemoryView,
    PeriodView,
    QueryText,
    ScoredMemory,
    _Request,
)
from services.api.models import (
    AgentRead,
    Count,
    Identifier,
    OptionalId,
    RequestBody,
    example,
    json_integer,
)
from services.api.time_models import TimeFields

Cap = Annotated[int, Field(ge=0, le=100_000), BeforeValidator(json_integer)]


class SectionCaps(RequestBody):
    """At most this many tokens per section (its headings included); 0 turns it off.
    A section not named has only the budget as its bound."""

    rules: Cap | None = None
    summary: Cap | None = None
    recent_turns: Cap | None = None
    profile: Cap | None = None
    memories: Cap | None = None
    long_term_summaries: Cap | None = None
    recalled_turns: Cap | None = None

    def given(self) -> dict[str, int]:
        return {name: cap for name, cap in self.model_dump().items() if cap is not None}


class ContextRequest(_Request, TimeFields):
    model_config = example(
        {
            "user_id": "u-42",
            "session_id": "s-7",
            "project_id": "atlas",
            "query": "set up the build",
            "token_budget": 2000,
            "sections": {"recalled_turns": 800},
        }
    )

    session_id: Identifier
    project_id: OptionalId = None
    agent_id: AgentRead = None
    prev_session_id: OptionalId = None
    query: QueryText
    k: Count = Field(default=8, ge=1, le=100, description="memories weighed at most")
    token_budget: (
        Annotated[int, Field(ge=100, le=100_000), BeforeValidator(json_integer)] | None
    ) = None
    sections: SectionCaps | None = Field(
        default=None,
        description="caps per section in tokens (0: off), each at most the budget: rules, "
        "summary, recent_turns, profile, memories, long_term_summaries, recalled_turns",
    )
    asked_at: AwareTime = Field(
        default=None,
        description="the time the periods the query names ('last month') are read against; "
        "default now",
    )
    filter: FilterJson | None = Field(
        default=None, description="only the memories and rules this filter admits"
    )

    @model_validator(mode="after")
    def _caps_within_budget(self) -> ContextRequest:
        if self.sections is not None and self.token_budget is not None:
            over_budget(self.sections, self.token_budget)
        return self


def over_budget(caps: SectionCaps, budget: int) -> None:
    """A cap over the budget is a mistake of the caller's: ValueError naming it."""
    for name, cap in caps.given().items():
        if cap > budget:
            raise ValueError(f"sections.{name}: is {cap}, over the token budget of {budget}")


class ContextTurn(BaseModel):
    turn_id: str
    created_at: str
    user: str
    assistant: str


class ContextSummary(BaseModel):
    session_id: str
    text: str
    version: int


class SourceTurnView(BaseModel):
    """An archived turn a memory was extracted from."""

    turn_id: str
    session_id: str
    created_at: str


REVISION = Field(
    description="the revision that made its current text (numbered from 1, as a rollback names it)"
)
SOURCES: Any = Field(
    default=[], description="the archived turns it was extracted from, oldest first"
)


class CitedRule(MemoryView):
    """A memory as the context cites it: which revision, from which turns."""

    revision: int = REVISION
    sources: list[SourceTurnView] = SOURCES


class CitedMemory(ScoredMemory):
    revision: int = REVISION
    sources: list[SourceTurnView] = SOURCES


class LongTermSummary(CitedRule):
    score: float | None = Field(
        description="its fused score when the search found it; null when the period the "
        "query names brought it"
    )


class RecalledTurnView(ArchivedTurn):
    """An archived turn of an earlier conversation: a hit of the archive search, or
    a turn next to one (`neighbour_of`)."""

    score: float | None = Field(description="its fused score; null for a neighbouring turn")
    rankers: list[str]
    neighbour_of: str | None = Field(
        default=None, description="the turn id of the hit it is next to; null for a hit"
    )


class ContextResponse(BaseModel):
    rolling_summary: ContextSummary | None
    carried_summary: ContextSummary | None
    recent_turns: list[ContextTurn]
    pinned_rules: list[CitedRule]
    profile: dict[str, str | float | bool] = Field(
        default={}, description="the user's profile fields the instruction carries, by name"
    )
    memories: list[CitedMemory]
    long_term_summaries: list[LongTermSummary] = []
    recalled_turns: list[RecalledTurnView] = Field(
        default=[], description="in the instruction's order: sessions by their first turn shown"
    )
    period: PeriodView | None = Field(
        default=None, description="the period the query names, searched first; null if none"
    )
    system_instruction: str
    tokens: int
    tokens_by_section: dict[str, int] = Field(
        default={}, description="the instruction's tokens per section, headings included"
    )
    omitted: dict[str, int]  # what did not fit in the token budget, by section
    # "session" (Valkey), "profile", "memories", "recalled_turns" (Postgres, embeddings)
    degraded: list[str]
