"""Feedback on a memory (`POST /v1/memories/{id}:feedback`): useful, not useful
or wrong, with an optional reason, recorded with the caller as its source.

Useful and not useful weigh the memory in the ranking, within a bound
(`AM_SEARCH_FEEDBACK_WEIGHT`; each caller's latest feedback counts:
`shared.db.feedback`). Wrong retires the memory in the same transaction, as a
`DELETED` revision whose source is the caller (the change event `DELETED`), and
from then on consolidation does not write the turns it came from into the same
memory again (`shared.memory.consolidate`), however often they are extracted. A rollback makes
it live again and ends that (`shared.memory.restoring`).

Nothing here waits on a model or an embedding: the memory is read, checked and
written in one short transaction holding the user's lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from shared.db.feedback import FeedbackRow
from shared.db.memory_rows import MemoryRow, Revision
from shared.db.planned_write import user_transaction
from shared.db.unit_of_work import UnitOfWork
from shared.memory.editing import editable

WRONG = "wrong"


@dataclass(frozen=True)
class Given:
    """The feedback as recorded, the memory after it (retired when it was wrong)
    with its revisions, and how many callers' latest feedback is each rating."""

    feedback: FeedbackRow
    memory: MemoryRow
    revisions: list[Revision]
    tally: dict[str, int]


def give_feedback(
    units: Callable[[], UnitOfWork],
    target: tuple[str, str, str],
    rating: str,
    reason: str,
    *,
    source: str,
    now: datetime,
) -> Given:
    """Record the feedback on the user's live memory `target` (app, user, id), or
    `MemoryRefused` 404 or 409 when it is not one; a wrong one also retires it."""
    app, user_id, memory_id = target
    with user_transaction(units, app, user_id) as uow:
        memory = editable(uow.memories.get(app, user_id, memory_id), uow.now())
        events = uow.feedback.source_events(memory_id) if rating == WRONG else []
        row = uow.feedback.record(memory, rating, reason, source, events)
        if rating == WRONG:
            memory = uow.memories.retire(memory, now, None, source=source)
        return Given(row, memory, uow.memories.revisions(memory_id), uow.feedback.tally(memory_id))
