"""Rolling a profile field back: the value revision N of the field recorded (a
cleared one: none) becomes current again, as a new revision whose source is the
caller, and a change event like a `PATCH`'s; nothing in the history is rewritten.

A field's revisions are numbered from 1 in the order written, as the API lists
them (`numbers`): per field, as a memory's are per memory, so the numbers survive
an export and import, which keep each field's history in its order. Decided and
written in one transaction holding the user's lock (a read of the database is
all the decision needs), against the app's schema as it is now.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime

from shared.db.planned_write import user_transaction
from shared.db.profiles import ProfileRevisionRow, ProfileValueRow
from shared.db.unit_of_work import UnitOfWork
from shared.profiles.writing import (
    ProfileRefused,
    Update,
    apply_updates,
    load_schema,
    profile_after,
    same_value,
)


def numbers(revisions: list[ProfileRevisionRow]) -> list[int]:
    """Each revision's number among its field's (`revisions` in the order written)."""
    seen: Counter[str] = Counter()
    numbered = []
    for revision in revisions:
        seen[revision.field] += 1
        numbered.append(seen[revision.field])
    return numbered


def history(revisions: list[ProfileRevisionRow]) -> list[tuple[ProfileRevisionRow, int]]:
    """Each revision (`revisions` in the order written) with its number, oldest first.
    An import writes one field's history after another's, keeping their times: by
    time, then by field, then by number, the order is the same whatever the order
    the rows went in."""
    numbered = zip(revisions, numbers(revisions), strict=True)
    return sorted(numbered, key=lambda pair: (pair[0].created_at, pair[0].field, pair[1]))


def rollback_field(
    units: Callable[[], UnitOfWork],
    app: str,
    user_id: str,
    field: str,
    revision: int,
    source: str,
    now: datetime,
) -> list[ProfileValueRow]:
    """Make revision `revision` of `field` current again; the user's profile after.
    `ProfileRefused` 404 (no such field or revision), 409 (that value is current,
    or no longer fits the field), and nothing is written. Blocking."""
    with user_transaction(units, app, user_id) as uow:
        schema = load_schema(uow, app)
        typed = schema.field(field)
        if typed is None:
            raise ProfileRefused("field", f"the app's profile schema has no field {field!r}", 404)
        history = uow.profiles.revisions(app, user_id, field)
        if not 1 <= revision <= len(history):
            held = f"it has revisions 1 to {len(history)}" if history else "it has none"
            message = f"no revision {revision} of field {field!r} for this user: {held}"
            raise ProfileRefused("revision", message, 404)
        value = history[revision - 1].value
        now_value = next(
            (r.value for r in uow.profiles.values(app, user_id) if r.field == field), None
        )
        if same_value(value, now_value):
            message = f"revision {revision}'s value of field {field!r} is already current"
            raise ProfileRefused("revision", message, 409)
        if value is not None:
            try:
                typed.checked(value)
            except ValueError as exc:
                message = f"revision {revision}'s value no longer fits field {field!r}: {exc}"
                raise ProfileRefused("revision", message, 409) from None
        apply_updates(uow, app, user_id, [Update(field, value, now, source, typed=True)])
        return profile_after(uow, app, user_id)
