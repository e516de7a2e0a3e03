"""Typed answers of the API, mirroring services/api's response bodies.

Written apart from the server's models on purpose: the client is installed
without the server's dependencies. Every model accepts fields it does not know
(`extra="allow"`), so a newer server that answers with more still parses, and
enumerations (scope, kind, decision) are plain strings for the same reason.
Times are parsed into timezone-aware datetimes.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class Answer(BaseModel):
    """Base of every answer: tolerant of fields added by a newer server."""

    model_config = ConfigDict(extra="allow")


# -- sessions ----------------------------------------------------------------------


class RecordedTurn(Answer):
    event_id: str
    turn_id: str
    # False when the session store was down: the summary worker buffers it later.
    buffered: bool


class SessionSummary(Answer):
    text: str
    version: int  # 0: nothing folded yet
    tokens: int
    updated_at: datetime | None


class CarriedSummary(Answer):
    """The rolling summary of the session that this one continues."""

    session_id: str
    text: str
    version: int


class SessionTurn(Answer):
    turn_id: str
    event_id: str
    created_at: datetime
    project_id: str | None
    user: str
    assistant: str
    tokens: int


class Fold(Answer):
    version: int
    turn_ids: list[str]


class SessionView(Answer):
    session_id: str
    user_id: str
    prev_session_id: str | None
    summary: SessionSummary
    carried_summary: CarriedSummary | None
    turns: list[SessionTurn]
    turn_count: int
    tokens: int
    turns_total: int
    folded_turn_count: int
    folds: list[Fold]


class FlushedSession(Answer):
    session_id: str
    event_id: str


class DeletedSession(Answer):
    session_id: str
    deleted_keys: int


# -- memories ----------------------------------------------------------------------


class MemoryRecord(Answer):
    """What an operation reports of each memory it wrote."""

    id: str
    scope: str  # global | project | session
    kind: str  # preference | fact | rule | event
    project_id: str | None
    session_id: str | None
    entity_name: str
    text: str


class Memory(MemoryRecord):
    observed_at: datetime
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None
    expire_at: datetime | None = None  # out of every read from then on; None: never
    topic: str = ""  # the extraction topic it was kept under


class ScoredMemory(Memory):
    score: float
    rankers: list[str]  # which rankings found it: "vector", "text"


class Revision(Answer):
    revision: int  # its number from 1, in the order written: what rollback_memory names
    action: str
    old_text: str | None
    new_text: str | None
    event_id: str | None
    observed_at: datetime
    applied: bool  # False: an older observation, kept in history only
    created_at: datetime


class MemoryDetail(Memory):
    revisions: list[Revision]


class MemoryPage(Answer):
    memories: list[Memory]
    next_cursor: str | None  # pass back for the next page; None on the last


class SurroundingTurn(Answer):
    """A turn of a hit's session around it (`archive_search(context_turns=...)`)."""

    id: str
    turn_id: str
    created_at: datetime
    text: str
    offset: int  # its place from the hit: -1 the turn before, 1 the one after


class Episode(Answer):
    """A recorded turn in the episodic archive, as an archive search found it."""

    id: str
    turn_id: str
    session_id: str
    project_id: str | None
    created_at: datetime
    text: str
    score: float
    rankers: list[str]
    context: list[SurroundingTurn] = []  # with context_turns, in session order


class WriteResult(Answer):
    action: str  # CREATED | UPDATED | DELETED | NONE (a duplicate)
    memory: Memory | None


class DeletedMemory(Answer):
    memory_id: str
    deleted: bool


class ContextSummary(Answer):
    session_id: str
    text: str
    version: int


class ContextTurn(Answer):
    turn_id: str
    created_at: datetime
    user: str
    assistant: str


class Context(Answer):
    """What an agent puts in front of its model: `system_instruction` is ready to use."""

    rolling_summary: ContextSummary | None
    carried_summary: ContextSummary | None
    recent_turns: list[ContextTurn]
    pinned_rules: list[Memory]
    memories: list[ScoredMemory]
    system_instruction: str
    tokens: int
    omitted: dict[str, int]  # what did not fit in the token budget, by section
    degraded: list[str]  # "session" or "memories": the part that is missing


class GeneratedMemory(Answer):
    action: str
    memory: MemoryRecord


class Operation(Answer):
    name: str
    done: bool
    generated_memories: list[GeneratedMemory] | None = None  # set once done
    error: str | None = None


# -- permissions -------------------------------------------------------------------


class PermissionVerdict(Answer):
    decision: str  # ALLOW | BLOCK | PENDING
    tier: str  # exempt | allow_once | project | global | none
    rule_id: str | None
    reason: str

    @property
    def allowed(self) -> bool:
        """Only ALLOW runs the tool: PENDING waits for a human, BLOCK never runs."""
        return self.decision == "ALLOW"


class Grant(Answer):
    user_id: str
    session_id: str
    tool_name: str
    command: str
    expires_at: datetime


class Rule(Answer):
    id: str
    user_id: str
    project_id: str  # "global" for a rule of every project of the user
    tool_name: str  # "*": every tool
    pattern: str
    action: str  # ALLOW | BLOCK
    created_at: datetime


class DeletedRule(Answer):
    id: str
    deleted: bool


# -- lifecycle ---------------------------------------------------------------------


class DeletionCounts(Answer):
    """Rows (and Valkey keys) removed by deleting a project or a user."""

    user_id: str
    project_id: str | None = None
    deleted: dict[str, int]
    deleted_at: datetime | None = None  # a user's deletion: later events older than this drop


class CompactionAccepted(Answer):
    event_id: str
    user_id: str
    project_id: str | None
    retention_days: int
    batch_limit: int
