"""Rolling a memory back: revision N's text becomes current again, as a new
revision (`UPDATED`, published as the change `ROLLED_BACK`); nothing in the
history is rewritten.

Revisions are numbered from 1 in the order they were written, as the API lists
them. The text is embedded with no transaction open; then, holding the user's
lock, the memory is updated only if it is still as it was read (else read again:
`shared.db.planned_write`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.db.memory_rows import MemoryRow, Revision
from shared.db.planned_write import StalePlan, write_for_user
from shared.db.unit_of_work import UnitOfWork, UnitsOfWork
from shared.embeddings.base import Embedder
from shared.memory.consolidate import expired

ROLLED_BACK = "ROLLED_BACK"
# The memory as it was read, the text to make current, and its embedding.
Plan = tuple[MemoryRow, str, list[float]]


class RollbackRefused(Exception):
    """Why a rollback cannot be done: `status` 404, 409 or 422, and the field."""

    def __init__(self, status: int, field: str | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


@dataclass(frozen=True)
class RolledBack:
    memory: MemoryRow
    revisions: list[Revision]


def rollback(
    units: UnitsOfWork,
    embedder: Embedder,
    app: str,
    user_id: str,
    memory_id: str,
    revision: int,
    now: datetime,
    attempts: int,
) -> RolledBack:
    def plan() -> Plan:
        with units() as uow:
            memory = uow.memories.get(app, user_id, memory_id)
            revisions = uow.memories.revisions(memory_id) if memory is not None else []
        text = _target(memory, revisions, revision)
        assert memory is not None
        return memory, text, embedder.embed([text])[0]

    def write(uow: UnitOfWork, planned: Plan) -> RolledBack:
        memory, text, embedding = planned
        if uow.memories.get(app, user_id, memory_id) != memory:
            raise StalePlan("the memory changed since it was read")
        uow.memories.update(memory, text, memory.kind, embedding, now, None, change=ROLLED_BACK)
        updated = uow.memories.get(app, user_id, memory_id)
        assert updated is not None
        return RolledBack(updated, uow.memories.revisions(memory_id))

    return write_for_user(units, app, user_id, attempts, f"memory {memory_id}", plan, write)


def _target(memory: MemoryRow | None, revisions: list[Revision], number: int) -> str:
    """The text revision `number` left, or why it cannot be made current."""
    if memory is None:
        raise RollbackRefused(404, None, "no memory with this id for this user")
    if memory.valid_to is not None:
        raise RollbackRefused(409, None, "the memory is deleted: write it anew instead")
    if expired(memory):
        raise RollbackRefused(409, None, "the memory expired: write it anew instead")
    if not 1 <= number <= len(revisions):
        raise RollbackRefused(
            422,
            "revision",
            f"no revision {number}: this memory has revisions 1 to {len(revisions)}",
        )
    chosen = revisions[number - 1]
    # A live memory has no DELETED revision: every revision it has left a text.
    assert chosen.new_text is not None
    if chosen.new_text == memory.text:
        raise RollbackRefused(409, "revision", f"revision {number}'s text is already current")
    return chosen.new_text
