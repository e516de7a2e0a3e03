"""The memories a new one may repeat: consolidation's neighbours
(`shared.memory.consolidate`), found by the hybrid statement of `shared.db.search`
among the rows of exactly the new memory's owner and scope."""

from __future__ import annotations

from shared.db.memory_reads import LIVE, MEMORY_COLUMNS
from shared.db.memory_rows import MemoryRow, NewMemory
from shared.db.run import Statement, Steps
from shared.db.search import fusion_params, hybrid_sql
from shared.memory.ranking import Fusion


def similar_memories(
    new: NewMemory, fusion: Fusion, limit: int, except_entity: str
) -> Steps[list[MemoryRow]]:
    """The live memories most similar to `new` of exactly its user, scope, project,
    session and agent, but none of the entity `except_entity`."""
    where = (
        f"m.app = %(app)s AND m.user_id = %(user_id)s AND {LIVE} "
        "AND m.scope = %(scope)s AND m.project_id = %(project_id)s "
        "AND m.session_id = %(session_id)s AND m.agent_id = %(agent_id)s "
        "AND m.entity_name <> %(except_entity)s"
    )
    params = {
        "app": new.app,
        "user_id": new.user_id,
        "scope": new.scope,
        "project_id": new.project_id,
        "session_id": new.session_id,
        "agent_id": new.agent_id,
        "except_entity": except_entity,
    }
    params |= fusion_params(fusion, [new.embedding], [new.text], limit)
    rows = yield Statement(hybrid_sql("memories", MEMORY_COLUMNS, where), params)
    return [MemoryRow.from_row(row) for row in rows]
