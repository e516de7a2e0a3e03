"""Changing a user's profile, in the caller's transaction (which holds the user's
lock): each update is checked against the app's schema as it is now, and an
observation older than the value it would replace is kept in the history only
(the late-event rule of memories).

An update of a field the schema no longer has, or whose value does not fit the
field's type, is not stored: it is logged and counted
(`agent_memory_profile_values_refused_total{reason}`), and the rest goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from shared.db.planned_write import user_transaction
from shared.db.profiles import ProfileRevisionRow, ProfileValueRow, profile_of
from shared.db.unit_of_work import UnitOfWork
from shared.metrics import PROFILE_VALUES_REFUSED
from shared.profiles.schema import PROFILE_SETTING, ProfileSchema, of_setting

log = structlog.get_logger("agent_memory.profiles")


@dataclass(frozen=True)
class Update:
    """A field's new value: a JSON value the API checked (`typed`), text an
    extraction read (checked here), or None to clear the field."""

    field: str
    value: Any
    observed_at: datetime
    source: str = ""  # "" the extraction, "key:<id>" the API
    source_event_id: str = ""
    typed: bool = False


@dataclass(frozen=True)
class Changed:
    field: str
    action: str  # SET, CLEARED, HISTORY; NONE: the value it already had
    value: Any


def load_schema(uow: UnitOfWork, app: str) -> ProfileSchema:
    return of_setting(uow.app_settings.get(app, PROFILE_SETTING))


def apply_updates(uow: UnitOfWork, app: str, user_id: str, updates: list[Update]) -> list[Changed]:
    """The updates in order, against the schema and the values as they are now."""
    schema = load_schema(uow, app)
    current = {row.field: row for row in uow.profiles.values(app, user_id)}
    changed = []
    for update in updates:
        field = schema.field(update.field)
        if field is None:
            _refused(app, update, "unknown_field", "the schema has no such field")
            continue
        value = update.value
        if value is not None:
            try:
                value = field.checked(value) if update.typed else field.read(str(value))
            except ValueError as exc:
                _refused(app, update, "wrong_type", str(exc))
                continue
        now = current.get(field.name)
        previous = now.value if now is not None else None
        if same_value(value, previous):
            changed.append(Changed(field.name, "NONE", value))
            continue
        late = now is not None and update.observed_at < now.observed_at
        action = "HISTORY" if late else "SET" if value is not None else "CLEARED"
        revision = ProfileRevisionRow(
            0,
            field.name,
            action,
            value,
            previous,
            update.observed_at,
            not late,
            update.source,
            update.source_event_id,
            update.observed_at,
        )
        uow.profiles.put(app, user_id, revision)
        if not late and value is None:
            current.pop(field.name, None)
        elif not late:
            current[field.name] = ProfileValueRow(
                field.name, value, update.observed_at, update.observed_at
            )
        changed.append(Changed(field.name, action, value))
    return changed


def same_value(a: Any, b: Any) -> bool:
    return a == b and type(a) is type(b)  # True is not 1


def _refused(app: str, update: Update, reason: str, detail: str) -> None:
    PROFILE_VALUES_REFUSED.labels(app, reason).inc()
    log.warning(
        "profile value refused",
        field=update.field,
        reason=reason,
        detail=detail,
        source_event_id=update.source_event_id,
    )


class ProfileRefused(ValueError):
    """A change the API refuses: its status (422 a value that does not fit; a
    rollback's 404 and 409), the field it names (`values.<name>`) and why."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


def patch_profile(
    units: Callable[[], UnitOfWork],
    app: str,
    user_id: str,
    values: dict[str, Any],
    source: str,
    now: datetime,
) -> list[ProfileValueRow]:
    """A caller's new values (None clears), all or none: each must be a field of the
    app's schema and fit its type, else `ProfileRefused` and nothing is written.
    The user's values of the schema's fields after. Blocking."""
    with user_transaction(units, app, user_id) as uow:
        schema = load_schema(uow, app)
        for name, value in values.items():
            field = schema.field(name)
            if field is None:
                raise ProfileRefused(
                    f"values.{name}", f"the app's profile schema has no field {name!r}"
                )
            if value is not None:
                try:
                    field.checked(value)
                except ValueError as exc:
                    raise ProfileRefused(f"values.{name}", str(exc)) from None
        updates = [Update(n, v, now, source, typed=True) for n, v in values.items()]
        apply_updates(uow, app, user_id, updates)
        return profile_after(uow, app, user_id)


def profile_after(uow: UnitOfWork, app: str, user_id: str) -> list[ProfileValueRow]:
    """The user's profile as the caller's changes left it, read in their transaction
    as `GET /v1/users/{id}/profile` reads it (the schema's fields, in its order)."""
    return uow.run(profile_of(app, user_id))
