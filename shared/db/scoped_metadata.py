"""A selective filter's rows read through one index entry per metadata value of a
scope: the GIN index `memories_scoped_metadata` (migration 0021) holds each live
memory's metadata under a key naming its app, user and row group (the global
rows, a project's, a session's), so `{key: {"team": "x"}}` finds exactly the
rows of that user's scope with team x, where the plain metadata index finds
every user's team x and must be ANDed with the scope's index (29,715 entries of
a bitmap for one scope in bench/filtered_search.py, most of the sort's time).

`scoped_where` is the search's WHERE clause with the filter's metadata
equalities at its top level moved into that test: the same rows, since the key
is read back unambiguously (lengths before the app and user) and `{key: P}`
contains `{key: Q}` exactly when P contains Q. The app, user and row group are
tested by the key alone, so the planner reads the rows through this index
instead of ANDing the scope's. Only a filter that the search sorts by distance
(`filter_plan`: the planner expects it to admit few rows) is read this way, and
only the live rows (the index is partial), not a read `as_of`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from shared.db import filter_sql
from shared.db.search_filters import owned_rows
from shared.memory.filters import All, Condition, Node
from shared.memory.ranking import Scope

# Migration 0021's index expression, written the same way (alias `m`).
SCOPED_METADATA = (
    "jsonb_set('{}'::jsonb, ARRAY[length(m.app)::text || ':' || m.app "
    "|| length(m.user_id)::text || ':' || m.user_id || m.scope || ':' "
    "|| CASE m.scope WHEN 'project' THEN m.project_id WHEN 'session' THEN m.session_id "
    "ELSE '' END], m.metadata)"
)


def scope_key(app: str, user_id: str, scope: str, within: str = "") -> str:
    """The key SCOPED_METADATA gives the rows of `scope` ('global', or 'project' or
    'session' `within` that project or session)."""
    return f"{len(app)}:{app}{len(user_id)}:{user_id}{scope}:{within}"


@dataclass(frozen=True, slots=True)
class ScopedRead:
    """A search's rows written to be read through `memories_scoped_metadata`."""

    where: str
    # Whether every test of the caller's filter is in the index's key (no kinds, no
    # time range, no other test): then the plan reads that key's entry and its rows
    # whatever the values, and may be made once for all of them (`shared.db.search`).
    keyed_only: bool


def scoped_where(
    scope: Scope, kinds: Sequence[str] | None, matching: Node | None, params: dict[str, Any]
) -> ScopedRead | None:
    """`memory_filter`'s clause read through `memories_scoped_metadata`, its new
    parameters added to `params` (which holds `memory_filter_parts`' already); None
    when `matching` has no metadata equality at its top level, or the read is as of
    a moment."""
    if matching is None or (scope.time is not None and scope.time.as_of is not None):
        return None
    contained: dict[str, Any] = {}
    rest = []
    for part in matching.parts if isinstance(matching, All) else (matching,):
        if not (isinstance(part, Condition) and part.keys and part.op == "eq"):
            rest.append(part)
        elif not _place(contained, part.keys, part.value):
            rest.append(part)  # a key twice, or inside another's value: tested as written
    if not contained:
        return None
    groups = [scope_key(scope.app, scope.user_id, "global")]
    if scope.project_id:
        groups.append(scope_key(scope.app, scope.user_id, "project", scope.project_id))
    if scope.session_id:
        groups.append(scope_key(scope.app, scope.user_id, "session", scope.session_id))
    tests = " OR ".join(
        f"{SCOPED_METADATA} @> {filter_sql.bind(params, Jsonb({key: contained}))}" for key in groups
    )
    live, owned = owned_rows(scope, kinds, params)
    clause = f"{live}{owned} AND ({tests})"
    where = "".join([clause, *(f" AND {filter_sql.where(part, params)}" for part in rest)])
    return ScopedRead(where, keyed_only=not rest and not kinds and scope.time is None)


def _place(contained: dict[str, Any], keys: tuple[str, ...], value: Any) -> bool:
    """Put `value` at `keys` in `contained`; False (and nothing changed) if that
    path is taken, or runs through a value already placed. Two paths in one object
    test what both tests do: an object contains {a: {b, c}} when it contains
    {a: {b}} and {a: {c}}."""
    node = contained
    for key in keys[:-1]:
        child = node.setdefault(key, {})  # a new path: nothing to undo on False below
        if not isinstance(child, dict):
            return False
        node = child
    if keys[-1] in node:
        return False
    node[keys[-1]] = value
    return True
