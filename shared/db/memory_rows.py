"""What the memories repository reads and writes, as values: a memory's row
(`MemoryRow`), one of its revisions, a memory to write (`NewMemory`) and a
listing's filter. The outbox and the callers use them without the SQL."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.entities.judging import Judgement
from shared.entities.names import Mention
from shared.memory.filters import Node
from shared.memory.ranking import TimeFilter

# The entity of a user's compacted summary of old episodes (one per scope and
# project, kind `event`), written only by the compaction worker.
COMPACTED_ENTITY = "compacted-episodes"


@dataclass(frozen=True)
class MemoryFields:
    """What a memory has, stored (`MemoryRow`) or to write (`NewMemory`): whose it
    is and where (app, user, project, session, scope), and what it says."""

    app: str
    user_id: str
    project_id: str
    session_id: str
    scope: str
    kind: str
    entity_name: str
    text: str


@dataclass(frozen=True)
class MemoryRow(MemoryFields):
    id: str
    observed_at: datetime
    created_at: datetime
    updated_at: datetime
    valid_to: datetime | None = None
    topic: str = ""
    expire_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # the caller's JSON object
    agent_id: str = ""  # '' the user's, shared with their agents (shared/memory/agents.py)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> MemoryRow:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})

    def identity(self) -> dict[str, Any]:
        """Which memory this is, as the API and operation results name it (an empty
        project or session is null there)."""
        return {
            "id": self.id,
            "scope": self.scope,
            "kind": self.kind,
            "project_id": self.project_id or None,
            "session_id": self.session_id or None,
            "entity_name": self.entity_name,
            "agent_id": self.agent_id or None,
        }


@dataclass(frozen=True)
class Revision:
    memory_id: str
    action: str
    old_text: str | None
    new_text: str | None
    event_id: str | None
    observed_at: datetime
    applied: bool
    created_at: datetime
    source: str = ""  # '' the pipeline; 'key:<id>' an edit through an API key
    state: dict[str, Any] | None = None  # kind, entity, topic, metadata after it


@dataclass(frozen=True)
class NewMemory(MemoryFields):
    embedding: Any
    observed_at: datetime
    expire_at: datetime | None = None  # when created: it expires then (None: never)
    updated_expire_at: datetime | None = None  # when it updates one: its new expiry (None: kept)
    topic: str = ""
    entities: tuple[Mention, ...] = ()  # the entities the model named in it (beside its text's)
    judgements: tuple[Judgement, ...] = ()  # the model's word on which known entity a name is
    metadata: dict[str, Any] = field(default_factory=dict)
    agent_id: str = ""


@dataclass(frozen=True)
class PageFilter:
    """Which live memories of a user a listing returns, and where it resumes
    (`after`: the creation time and id of the last memory of the previous page)."""

    app: str
    user_id: str
    project_id: str | None = None
    scope: str | None = None
    kind: str | None = None
    after: tuple[datetime, str] | None = None
    topic: str | None = None
    time: TimeFilter | None = None
    matching: Node | None = None  # a caller's filter (shared.memory.filters)
    agents: tuple[str, ...] = ("",)  # the owners it sees (shared.memory.agents.visible_to)


@dataclass(frozen=True)
class MemoryEdit:
    """A memory as a caller's edit leaves it: every field it may change (those the
    edit did not name keep the memory's), who made it and what the outbox calls it."""

    text: str
    kind: str
    entity_name: str
    topic: str
    metadata: dict[str, Any]
    expire_at: datetime | None
    observed_at: datetime
    source: str
    change: str = "UPDATED"
