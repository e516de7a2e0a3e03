"""Which memories a read sees, and as what: the columns of a memory row, the
liveness of a memory now (`LIVE`) or at a moment in valid time (`LIVE_AS_OF`,
with the text it had then), and a read's observed range.
"""

from __future__ import annotations

from typing import Any

from shared.memory.ranking import TimeFilter

MEMORY_COLUMNS = (
    "m.id::text AS id, m.app, m.user_id, m.project_id, m.session_id, m.scope, m.kind, "
    "m.entity_name, m.text, m.observed_at, m.created_at, m.updated_at, m.valid_to, "
    "m.topic, m.expire_at, m.metadata, m.agent_id"
)


# A memory every read sees: not retired, not expired (the sweep retires it later).
LIVE = "m.valid_to IS NULL AND (m.expire_at IS NULL OR m.expire_at > now())"

# The memory's last applied revision observed at or before `%(as_of)s` (valid time).
_REVISION_AS_OF = (
    "(SELECT r.{column} FROM memory_revisions r WHERE r.memory_id = m.id AND r.applied "
    "AND r.observed_at <= %(as_of)s ORDER BY r.observed_at DESC, r.id DESC LIMIT 1)"
)
# A memory that was live at `%(as_of)s`: created by then, not retired nor expired by then.
LIVE_AS_OF = (
    _REVISION_AS_OF.format(column="action")
    + " IN ('CREATED', 'UPDATED') AND (m.expire_at IS NULL OR m.expire_at > %(as_of)s)"
)


def as_of_columns(columns: str) -> str:
    """`columns` (of MEMORY_COLUMNS) with the text the memory had at `%(as_of)s`."""
    return columns.replace("m.text,", _REVISION_AS_OF.format(column="new_text") + " AS text,", 1)


def time_clauses(time: TimeFilter | None, params: dict[str, Any]) -> tuple[str, str]:
    """The liveness clause of a read at `time` (LIVE, or LIVE_AS_OF) and the clauses of
    its observed range (each with a leading AND), their values put in `params`."""
    if time is None:
        return LIVE, ""
    extra = ""
    if time.observed_after is not None:
        extra += " AND m.observed_at > %(observed_after)s"
        params["observed_after"] = time.observed_after
    if time.observed_before is not None:
        extra += " AND m.observed_at < %(observed_before)s"
        params["observed_before"] = time.observed_before
    if time.as_of is None:
        return LIVE, extra
    params["as_of"] = time.as_of
    return LIVE_AS_OF, extra
