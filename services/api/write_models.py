"""The bodies of the memory writes: a direct write (`POST /v1/memories`) and a
rollback (`POST /v1/memories/{id}:rollback`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from services.api.memory_models import (
    TOPIC_PATTERN,
    AwareTime,
    EntityName,
    Kind,
    MemoryView,
    Metadata,
    OptionalId,
    QueryText,
    ScopeName,
    _only_its_scope_names,
    _Request,
)
from services.api.models import (
    AgentRead,
    AgentWrite,
    Count,
    Identifier,
    RequestBody,
    json_integer,
)
from shared.db.memory_rows import COMPACTED_ENTITY
from shared.events import utcnow
from shared.memory.expiry import MAX_SECONDS, MIN_SECONDS

TtlSeconds = Annotated[int, Field(ge=MIN_SECONDS, le=MAX_SECONDS), BeforeValidator(json_integer)]
NOT_BOTH_EXPIRIES: dict[str, Any] = {
    "not": {
        "required": ["expire_at", "ttl_seconds"],
        "properties": {"expire_at": {"type": "string"}, "ttl_seconds": {"type": "integer"}},
    }
}


def _entity_not_reserved(cls: type, value: str | None) -> str | None:
    if value is not None and value.strip().casefold() == COMPACTED_ENTITY:
        raise ValueError(f"{COMPACTED_ENTITY!r} is reserved for the compaction worker")
    return value


def _expiry_of(expire_at: datetime | None, ttl_seconds: int | None) -> datetime | None:
    """When it expires, given `expire_at` or `ttl_seconds` (refused: both, or a past time)."""
    if expire_at is not None and ttl_seconds is not None:
        raise ValueError("ttl_seconds: give expire_at or ttl_seconds, not both")
    if expire_at is not None and expire_at <= utcnow():
        raise ValueError("expire_at: must be in the future")
    if ttl_seconds is not None:
        return utcnow() + timedelta(seconds=ttl_seconds)
    return expire_at


class WriteMemoryRequest(_Request):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "user_id": "u-42",
                    "text": "Prefers Neovim.",
                    "kind": "preference",
                    "scope": "global",
                }
            ],
            "allOf": [
                _only_its_scope_names("project", "project_id"),
                _only_its_scope_names("session", "session_id"),
                # expire_at or ttl_seconds, not both (null is not given).
                NOT_BOTH_EXPIRIES,
            ],
        }
    )

    text: QueryText
    scope: ScopeName
    kind: Kind
    project_id: OptionalId = None
    session_id: OptionalId = None
    agent_id: AgentWrite = None
    entity_name: EntityName = ""
    consolidate: bool = True
    # When it expires: a time, or seconds from now; neither: as the app's TTLs say.
    expire_at: AwareTime = None
    ttl_seconds: TtlSeconds | None = None
    metadata: Metadata = {}

    _not_reserved = field_validator("entity_name")(_entity_not_reserved)

    @model_validator(mode="after")
    def _scope_fits(self) -> WriteMemoryRequest:
        if self.scope == "project" and not self.project_id:
            raise ValueError("project_id: a project memory needs its project_id")
        if self.scope == "session" and not self.session_id:
            raise ValueError("session_id: a session memory needs its session_id")
        # As the table's constraints have it: only a project memory names a project,
        # only a session memory a session.
        if self.scope != "project" and self.project_id:
            raise ValueError(f"project_id: a {self.scope} memory belongs to no project")
        if self.scope != "session" and self.session_id:
            raise ValueError(f"session_id: a {self.scope} memory belongs to no session")
        _expiry_of(self.expire_at, self.ttl_seconds)
        return self

    def expiry(self) -> datetime | None:
        """When it expires, if the body says (else the app's TTLs decide)."""
        return _expiry_of(self.expire_at, self.ttl_seconds)


class EditMemoryRequest(RequestBody):
    """A PATCH: the fields it names change, the others stay. `expire_at: null` makes
    the memory never expire; a field's absence (or, but for `expire_at`, its null)
    leaves it as it is."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [NOT_BOTH_EXPIRIES],
            "anyOf": [
                {"required": [name]}
                for name in ("text", "kind", "entity_name", "topic", "metadata", "expire_at")
                + ("ttl_seconds",)
            ],
        }
    )

    user_id: Identifier
    agent_id: AgentRead = None
    text: QueryText | None = None
    kind: Kind | None = None
    entity_name: EntityName | None = None
    topic: Annotated[str, Field(pattern=f"{TOPIC_PATTERN}|^$")] | None = None
    metadata: Metadata | None = None
    expire_at: AwareTime = None
    ttl_seconds: TtlSeconds | None = None

    _not_reserved = field_validator("entity_name")(_entity_not_reserved)

    @model_validator(mode="after")
    def _names_a_change(self) -> EditMemoryRequest:
        if not self.model_fields_set - {"user_id", "agent_id"}:
            raise ValueError("body: names no field to change")
        _expiry_of(self.expire_at, self.ttl_seconds)
        return self

    def changes(self) -> dict[str, Any]:
        """What the edit changes: field name to its new value."""
        named = self.model_fields_set
        changes: dict[str, Any] = {
            name: getattr(self, name)
            for name in ("text", "kind", "entity_name", "topic", "metadata")
            if name in named and getattr(self, name) is not None
        }
        if "expire_at" in named or "ttl_seconds" in named and self.ttl_seconds is not None:
            changes["expire_at"] = _expiry_of(self.expire_at, self.ttl_seconds)
        return changes


class WriteMemoryResponse(BaseModel):
    action: Literal["CREATED", "UPDATED", "DELETED", "NONE", "HISTORY"]
    memory: MemoryView | None


class RollbackRequest(RequestBody):
    # No example: one needs a memory with revisions (the documented examples are run).

    user_id: Identifier
    agent_id: AgentRead = None
    revision: Count = Field(
        ge=1, description="The revision whose text becomes current: its number in `revisions`."
    )
