"""The bodies of the memory writes: a direct write (`POST /v1/memories`) and a
rollback (`POST /v1/memories/{id}:rollback`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from services.api.memory_models import (
    AwareTime,
    EntityName,
    Kind,
    MemoryView,
    OptionalId,
    QueryText,
    ScopeName,
    _only_its_scope_names,
    _Request,
)
from services.api.models import Count, Identifier, RequestBody, json_integer
from shared.db.memory_rows import COMPACTED_ENTITY
from shared.events import utcnow
from shared.memory.expiry import MAX_SECONDS, MIN_SECONDS


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
                {
                    "not": {
                        "required": ["expire_at", "ttl_seconds"],
                        "properties": {
                            "expire_at": {"type": "string"},
                            "ttl_seconds": {"type": "integer"},
                        },
                    }
                },
            ],
        }
    )

    text: QueryText
    scope: ScopeName
    kind: Kind
    project_id: OptionalId = None
    session_id: OptionalId = None
    entity_name: EntityName = ""
    consolidate: bool = True
    # When it expires: a time, or seconds from now; neither: as the app's TTLs say.
    expire_at: AwareTime = None
    ttl_seconds: (
        Annotated[int, Field(ge=MIN_SECONDS, le=MAX_SECONDS), BeforeValidator(json_integer)] | None
    ) = None

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
        # As the table's constraints have it: only a project memory names a project,
        # only a session memory a session.
        if self.scope != "project" and self.project_id:
            raise ValueError(f"project_id: a {self.scope} memory belongs to no project")
        if self.scope != "session" and self.session_id:
            raise ValueError(f"session_id: a {self.scope} memory belongs to no session")
        if self.expire_at is not None and self.ttl_seconds is not None:
            raise ValueError("ttl_seconds: give expire_at or ttl_seconds, not both")
        if self.expire_at is not None and self.expire_at <= utcnow():
            raise ValueError("expire_at: must be in the future")
        return self

    def expiry(self) -> datetime | None:
        """When it expires, if the body says (else the app's TTLs decide)."""
        if self.ttl_seconds is not None:
            return utcnow() + timedelta(seconds=self.ttl_seconds)
        return self.expire_at


class WriteMemoryResponse(BaseModel):
    action: Literal["CREATED", "UPDATED", "DELETED", "NONE", "HISTORY"]
    memory: MemoryView | None


class RollbackRequest(RequestBody):
    # No example: one needs a memory with revisions (the documented examples are run).

    user_id: Identifier
    revision: Count = Field(
        ge=1, description="The revision whose text becomes current: its number in `revisions`."
    )
