"""An app's settings its admin key sets through the API (`/v1/config/…`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from services.api.memory_models import ScopeName
from services.api.models import bounded_count
from shared.memory.expiry import MAX_SECONDS, MIN_SECONDS

# Seconds, or null: not set at this level (the next one decides).
TtlSeconds = bounded_count(MIN_SECONDS, MAX_SECONDS) | None  # type: ignore[operator]


class TtlLevels(BaseModel):
    """A TTL for every memory, and one per action that overrides it."""

    model_config = ConfigDict(extra="forbid")

    default: TtlSeconds = None
    create: TtlSeconds = None  # written through POST /v1/memories
    generate_created: TtlSeconds = None  # made by the extraction
    generate_updated: TtlSeconds = None  # changed by the extraction: expiry moves to now + this


class TtlConfig(TtlLevels):
    """The app's TTLs: these levels for every scope, `scopes` to override them per
    scope, and how long revisions are kept. Nothing set: nothing expires."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"default": None, "scopes": {"session": {"default": 604800}}}]
        },
    )

    revisions: TtlSeconds = None
    scopes: dict[ScopeName, TtlLevels] = {}
