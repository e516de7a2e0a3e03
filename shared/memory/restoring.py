"""Undoing a `wrong` feedback: the rollback of a memory it retired makes the memory
live again with revision N's text and fields (`shared.memory.editing.restored`),
as a new revision (the change `ROLLED_BACK`), and ends the feedback's hold on the
turns the memory came from (`shared.db.feedback`). The feedback itself stays
recorded.

Planned like an edit: read with no lock, the text embedded if it changes, then
written under the user's lock if the memory and its retirement are as they were read.
"""

from __future__ import annotations

from datetime import datetime

from shared.db.feedback import FeedbackRow
from shared.db.memory_rows import MemoryEdit, MemoryRow, Revision
from shared.db.planned_write import Done, StalePlan, write_for_user
from shared.db.unit_of_work import UnitOfWork, UnitsOfWork
from shared.embeddings.base import Embedder
from shared.memory.editing import Edited, MemoryRefused, entity_free, restored

Plan = tuple[MemoryRow, FeedbackRow, MemoryEdit, list[float] | None]


def chosen(revisions: list[Revision], revision: int) -> Revision:
    """Revision `revision` (numbered from 1) of a memory's `revisions`, or why not."""
    if not 1 <= revision <= len(revisions):
        raise MemoryRefused(
            422,
            "revision",
            f"no revision {revision}: this memory has revisions 1 to {len(revisions)}",
        )
    return revisions[revision - 1]


def restore(
    units: UnitsOfWork,
    embedder: Embedder,
    target: tuple[str, str, str],
    revision: int,
    source: str,
    now: datetime,
    attempts: int,
) -> Edited | None:
    """Make the memory `target` (app, user, id) live again as revision `revision`
    left it, if wrong feedback retired it; None if it is not such a memory (a
    rollback goes on as an edit)."""
    app, user_id, memory_id = target

    def plan() -> Plan | Done[Edited | None]:
        with units() as uow:
            memory = uow.memories.get(app, user_id, memory_id)
            if memory is None or memory.valid_to is None:
                return Done(None)
            standing = uow.feedback.standing(memory_id)
            revisions = uow.memories.revisions(memory_id)
        if standing is None:
            return Done(None)
        back_to = chosen(revisions, revision)
        if back_to.new_text is None:
            raise MemoryRefused(
                422, "revision", f"revision {revision} left no text (it retired the memory)"
            )
        edit = restored(memory, back_to, now, source)
        embedding = embedder.embed([edit.text])[0] if edit.text != memory.text else None
        return memory, standing, edit, embedding

    def write(uow: UnitOfWork, planned: Plan) -> Edited | None:
        memory, standing, edit, embedding = planned
        if uow.memories.get(app, user_id, memory_id) != memory:
            raise StalePlan("the memory changed since it was read")
        if uow.feedback.standing(memory_id) != standing:
            raise StalePlan("the memory's retirement changed since it was read")
        entity_free(uow, memory, edit, reopening=True)
        live = uow.memories.edit(memory, edit, embedding, reopen=True)
        uow.feedback.restore(standing.id, now)
        return Edited(live, uow.memories.revisions(memory_id))

    return write_for_user(units, app, user_id, attempts, f"memory {memory_id}", plan, write)
