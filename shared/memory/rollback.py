"""Rolling a memory back: revision N's text becomes current again, with the kind,
entity, topic and metadata it had then (when the revision kept them), as a new
revision (`UPDATED`, published as the change `ROLLED_BACK`); nothing in the
history is rewritten.

Revisions are numbered from 1 in the order they were written, as the API lists
them. It is an edit (`shared.memory.editing`): embedded with no transaction open,
written under the user's lock if the memory is still as it was read. A memory
that `wrong` feedback retired is rolled back to life (`shared.memory.restoring`);
any other deleted memory stays deleted.
"""

from __future__ import annotations

from datetime import datetime

from shared.db.memory_rows import MemoryEdit, MemoryRow, Revision
from shared.db.unit_of_work import UnitsOfWork
from shared.embeddings.base import Embedder
from shared.memory import restoring
from shared.memory.editing import Edited, MemoryRefused, restored, unchanged, write_edit


def rollback(
    units: UnitsOfWork,
    embedder: Embedder,
    app: str,
    user_id: str,
    memory_id: str,
    revision: int,
    *,
    source: str,
    now: datetime,
    attempts: int,
) -> Edited:
    # A memory that wrong feedback retired comes back; any other is edited.
    target = (app, user_id, memory_id)
    back = restoring.restore(units, embedder, target, revision, source, now, attempts)
    if back is not None:
        return back

    def edited(memory: MemoryRow, revisions: list[Revision]) -> MemoryEdit:
        # A live memory has no DELETED revision: every revision it has left a text.
        edit = restored(memory, restoring.chosen(revisions, revision), now, source)
        if unchanged(memory, edit):
            raise MemoryRefused(409, "revision", f"revision {revision}'s text is already current")
        return edit

    return write_edit(units, embedder, app, user_id, memory_id, edited, attempts)
