"""Editing a memory directly (a caller's PATCH): its text, kind, entity, topic,
metadata or expiry, as one `UPDATED` revision whose source is the caller.

The new text is embedded with no transaction open; then, holding the user's lock,
the memory is changed only if it is still as it was read (else read again:
`shared.db.planned_write`). An edit that changes nothing writes nothing. A
rollback (`shared.memory.rollback`) is an edit back to a revision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from shared.db.memory_rows import MemoryEdit, MemoryRow, NewMemory, Revision
from shared.db.planned_write import Done, StalePlan, write_for_user
from shared.db.unit_of_work import UnitOfWork, UnitsOfWork
from shared.embeddings.base import Embedder
from shared.memory.consolidate import expired

# What a caller may change; scope, project and session stay (write a new memory).
FIELDS = ("text", "kind", "entity_name", "topic", "metadata", "expire_at")
ROLLED_BACK = "ROLLED_BACK"  # what the change event calls a rollback's revision


class MemoryRefused(Exception):
    """Why an edit or a rollback cannot be done: `status` 404, 409 or 422, and the
    field it is about (None: the memory itself)."""

    def __init__(self, status: int, field: str | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


@dataclass(frozen=True)
class Edited:
    memory: MemoryRow
    revisions: list[Revision]


# The memory as it was read, how the edit leaves it, and the new text's embedding
# (None: the text is unchanged, and so is its embedding).
Plan = tuple[MemoryRow, MemoryEdit, list[float] | None]


def editable(memory: MemoryRow | None, now: datetime) -> MemoryRow:
    """`memory` if a caller may change it, else why not."""
    if memory is None:
        raise MemoryRefused(404, None, "no memory with this id for this user")
    if memory.valid_to is not None:
        raise MemoryRefused(409, None, "the memory is deleted (a rollback brings it back)")
    if expired(memory, now):
        raise MemoryRefused(409, None, "the memory expired")
    return memory


def as_edit(memory: MemoryRow, now: datetime, source: str, **changes: Any) -> MemoryEdit:
    """The memory as `changes` (a subset of FIELDS) leave it."""
    current = {name: getattr(memory, name) for name in FIELDS}
    return MemoryEdit(**(current | changes), observed_at=now, source=source)


def unchanged(memory: MemoryRow, edit: MemoryEdit) -> bool:
    return all(getattr(memory, name) == getattr(edit, name) for name in FIELDS)


def edit_memory(
    units: UnitsOfWork,
    embedder: Embedder,
    app: str,
    user_id: str,
    memory_id: str,
    changes: dict[str, Any],
    *,
    source: str,
    now: datetime,
    attempts: int,
) -> Edited:
    """Apply `changes` (field name to its new value) to the user's live memory."""

    def target(memory: MemoryRow, _: list[Revision]) -> MemoryEdit:
        return as_edit(memory, now, source, **changes)

    return write_edit(units, embedder, app, user_id, memory_id, target, attempts)


def write_edit(
    units: UnitsOfWork,
    embedder: Embedder,
    app: str,
    user_id: str,
    memory_id: str,
    target: Callable[[MemoryRow, list[Revision]], MemoryEdit],
    attempts: int,
) -> Edited:
    """Plan the edit `target` makes of the memory and its revisions, embed its text
    if it changed (no lock held), then write it under the user's lock."""

    def plan() -> Plan | Done[Edited]:
        with units() as uow:
            memory = uow.memories.get(app, user_id, memory_id)
            revisions = uow.memories.revisions(memory_id) if memory is not None else []
            now = uow.now()
        edit = target(editable(memory, now), revisions)
        assert memory is not None
        if unchanged(memory, edit):
            return Done(Edited(memory, revisions))
        embedding = embedder.embed([edit.text])[0] if edit.text != memory.text else None
        return memory, edit, embedding

    def write(uow: UnitOfWork, planned: Plan) -> Edited:
        memory, edit, embedding = planned
        if uow.memories.get(app, user_id, memory_id) != memory:
            raise StalePlan("the memory changed since it was read")
        entity_free(uow, memory, edit)
        edited = uow.memories.edit(memory, edit, embedding)
        return Edited(edited, uow.memories.revisions(memory_id))

    return write_for_user(units, app, user_id, attempts, f"memory {memory_id}", plan, write)


def entity_free(
    uow: UnitOfWork, memory: MemoryRow, edit: MemoryEdit, reopening: bool = False
) -> None:
    """One live memory per entity in a scope: refuse an entity another one has (one
    the memory keeps is its own, unless it is `reopening`: retired, it holds none)."""
    if not edit.entity_name:
        return
    if not reopening and edit.entity_name.casefold() == memory.entity_name.casefold():
        return
    probe = NewMemory(
        memory.app,
        memory.user_id,
        memory.project_id,
        memory.session_id,
        memory.scope,
        edit.kind,
        edit.entity_name,
        edit.text,
        None,
        edit.observed_at,
    )
    other = uow.memories.live_of_entity(probe)
    if other is not None and other.id != memory.id:
        raise MemoryRefused(
            409,
            "entity_name",
            f"memory {other.id} is this scope's live memory of entity {edit.entity_name!r}",
        )


def restored(memory: MemoryRow, revision: Revision, now: datetime, source: str) -> MemoryEdit:
    """The edit that makes `revision` current again: its text and, when it kept
    them, its kind, entity, topic and metadata (the expiry stays)."""
    assert revision.new_text is not None
    state = revision.state or {}
    kept = {
        name: state[name] for name in ("kind", "entity_name", "topic", "metadata") if name in state
    }
    edit = as_edit(memory, now, source, text=revision.new_text, **kept)
    return replace(edit, change=ROLLED_BACK)
