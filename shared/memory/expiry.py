"""When memories expire: an app's time-to-live settings (`PUT /v1/config/ttl`).

A TTL is chosen per scope and per action, the most specific one set winning:

    scopes.<scope>.<action>  >  scopes.<scope>.default  >  <action>  >  default

where the action is `create` (a memory written through the API),
`generate_created` (a memory the extraction made) or `generate_updated` (one the
extraction changed, whose expiry moves to now + that TTL). None set: it never
expires (an update keeps the expiry it had). `revisions` is how long a revision
is kept. An expired memory is out of every read at once; the compaction worker's
sweep retires it later, as a delete does (shared.memory.sweep).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from shared.db.memory_rows import NewMemory
from shared.db.unit_of_work import UnitOfWork

ACTIONS = ("create", "generate_created", "generate_updated")
SCOPES = ("global", "project", "session")
MIN_SECONDS = 60
MAX_SECONDS = 100 * 365 * 86400  # a century: beyond it, leave it unset
TTL_SETTING = "ttl"


@dataclass(frozen=True)
class Ttl:
    """The app's TTLs in seconds, as stored (see `parse`)."""

    config: dict[str, Any]

    def seconds(self, scope: str, action: str) -> int | None:
        scoped = self.config.get("scopes", {}).get(scope, {})
        for value in (
            scoped.get(action),
            scoped.get("default"),
            self.config.get(action),
            self.config.get("default"),
        ):
            if value is not None:
                return int(value)
        return None

    def expire_at(self, scope: str, action: str, now: datetime) -> datetime | None:
        seconds = self.seconds(scope, action)
        return now + timedelta(seconds=seconds) if seconds is not None else None

    @property
    def revisions(self) -> int | None:
        value = self.config.get("revisions")
        return int(value) if value is not None else None


NO_TTL = Ttl({})


def load(uow: UnitOfWork, app: str) -> Ttl:
    """The app's TTLs as stored (none set: nothing expires)."""
    return Ttl(uow.app_settings.get(app, TTL_SETTING) or {})


def with_expiry(new: NewMemory, ttl: Ttl, created: str, updated: str, now: datetime) -> NewMemory:
    """`new` with the expiry it gets when created (action `created`) and when it
    updates a memory (action `updated`)."""
    return replace(
        new,
        expire_at=ttl.expire_at(new.scope, created, now),
        updated_expire_at=ttl.expire_at(new.scope, updated, now),
    )
