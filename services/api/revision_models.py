"""The body of a memory's rollback (`POST /v1/memories/{id}:rollback`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from services.api.models import Count, Identifier


class RollbackRequest(BaseModel):
    # No example: one needs a memory with revisions (the documented examples are run).
    model_config = ConfigDict(extra="forbid")

    user_id: Identifier
    revision: Count = Field(
        ge=1, description="The revision whose text becomes current: its number in `revisions`."
    )
