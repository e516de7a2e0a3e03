"""Which rows a hybrid search reads (`shared.db.search`): the WHERE clauses of the
memories and episodes a scope may see, what a statement found of a scope's
size, so that the next one plans a single ranking, and how many rows the planner
expects a caller's filter to admit, which decides how the search reads them."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from shared.db import filter_sql
from shared.db.memory_reads import time_clauses
from shared.db.run import Statement, Steps
from shared.expiring import Expiring
from shared.memory.agents import visible_to
from shared.memory.filters import Node
from shared.memory.ranking import Scope


class ScopeSizes(Expiring[tuple[str, str, str, str, str, int], bool]):
    """Whether a scope's vector ranking is exact (fewer rows than `exact_below`), as
    the last statement that counted it found, kept `ttl` seconds in this process:
    a statement told so does not count again nor plan the other ranking.
    A scope that grows past the threshold meanwhile is ranked the old way for at
    most `ttl` seconds: both ways are right, only their cost differs. One entry per
    scope searched in the last minute, 10,000 at most (`Expiring.size`)."""

    @staticmethod
    def key(table: str, scope: Scope, exact_below: int) -> tuple[str, str, str, str, str, int]:
        # What the statement counts: `memory_count_filter`'s rows, with the scope's values.
        count = memory_count_filter(scope)
        return (table, count, scope.app, scope.user_id, scope.project_id, exact_below)

    @staticmethod
    def archive_key(scope: Scope, exact_below: int) -> tuple[str, str, str, str, str, int]:
        # What an archive search without a period counts: `episode_filter`'s rows.
        agent = f"agent_id = {scope.agent_id}"  # its rows differ by agent (`episode_filter`)
        return ("episodes", agent, scope.app, scope.user_id, scope.project_id, exact_below)


SCOPE_SIZES = ScopeSizes()


class FilterSizes(Expiring[bytes, int]):
    """How many rows the planner expects a filtered search's WHERE clause to admit,
    by a digest of the clause and its parameters, kept `ttl` seconds in this
    process: a search that repeats a filter within a minute plans without asking
    again. Estimates move with the table's statistics, slowly, and only decide how
    a search reads its rows, never which rows it finds."""


FILTER_SIZES = FilterSizes()


def admitted_rows(where: str, params: dict[str, Any]) -> Steps[int]:
    """The planner's estimate of the memories `where` (alias `m`) admits: a plan, no
    row read. Every test a filter compiles to is one Postgres estimates from the
    columns' statistics (`shared.db.filter_sql`)."""
    key = hashlib.blake2b(f"{where}\n{sorted(params.items())!r}".encode(), digest_size=16).digest()
    known = FILTER_SIZES.cached(key)
    if known is not None:
        return known
    rows = yield Statement(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM memories m WHERE {where}", params)
    return FILTER_SIZES.store(key, int(rows[0]["QUERY PLAN"][0]["Plan"]["Plan Rows"]))


def _in_scope(scope: Scope, live: str, session_rows: str) -> str:
    """Rows of the scope's app and user that `live` admits: global ones, the
    project's, and `session_rows` when the scope names a session."""
    visible = ["m.scope = 'global'"]
    if scope.project_id:
        visible.append("(m.scope = 'project' AND m.project_id = %(project_id)s)")
    if scope.session_id:
        visible.append(session_rows)
    return f"m.app = %(app)s AND m.user_id = %(user_id)s AND {live} AND ({' OR '.join(visible)})"


def filter_plan(
    scoped: str, filtered: str | None, params: dict[str, Any], exact: bool | None, below: int
) -> Steps[tuple[bool | None, tuple[str, str] | None]]:
    """How a search reads the rows its filter admits: `hybrid_sql`'s `exact` and
    `text_source`, given the scope's clause (`scoped`), the filter's (`filtered`,
    None: no filter) and whether the scope's vector ranking is `exact` (None: not
    known yet). A selective filter, one the planner expects to admit fewer than
    `below` (`exact_below`) rows, is read as a small scope is: its rows sorted by
    distance, found through the filter's indexes by the full-text ranking too. An
    unselective one only drops rows that each ranking reads through its own index:
    the HNSW walk goes on past them, the full text reads the query's rows of the
    scope. Either way every ranking's candidates are rows the filter admits."""
    if filtered is None or exact:
        return exact, None
    if below > 0 and (yield from admitted_rows(f"{scoped} AND {filtered}", params)) < below:
        return True, None
    return exact, (scoped, filtered)


def memory_filter(
    scope: Scope, kinds: Sequence[str] | None, matching: Node | None = None
) -> tuple[str, dict[str, Any]]:
    """The WHERE clause (alias `m`) of the live memories `scope` may see (with its
    `time`, those live at its `as_of`, in its observed range) and `matching`, a
    caller's filter, admits."""
    scoped, filtered, params = memory_filter_parts(scope, kinds, matching)
    return (scoped if filtered is None else f"{scoped} AND {filtered}"), params


def memory_filter_parts(
    scope: Scope, kinds: Sequence[str] | None, matching: Node | None
) -> tuple[str, str | None, dict[str, Any]]:
    """`memory_filter`'s clause in two: the memories `scope` may see (of `kinds`),
    and the clause of `matching` (None without it); their parameters."""
    params: dict[str, Any] = {"app": scope.app, "user_id": scope.user_id}
    if scope.project_id:
        params["project_id"] = scope.project_id
    if scope.session_id:
        params["session_id"] = scope.session_id
    live, owned = owned_rows(scope, kinds, params)
    session = "(m.scope = 'session' AND m.session_id = %(session_id)s)"
    clause = _in_scope(scope, live, session) + owned
    filtered = None if matching is None else filter_sql.where(matching, params)
    return clause, filtered, params


def owned_rows(
    scope: Scope, kinds: Sequence[str] | None, params: dict[str, Any]
) -> tuple[str, str]:
    """What `memory_filter_parts` asks of a row besides its app, user and row
    group: the liveness clause at the scope's time, and the rest (its observed
    range, its owner among the agents the read sees, its kind; a leading AND)."""
    live, observed = time_clauses(scope.time, params)
    params["agents"] = list(visible_to(scope.agent_id))
    owned = observed + " AND m.agent_id = ANY(%(agents)s)"
    if kinds:
        owned += " AND m.kind = ANY(%(kinds)s)"
        params["kinds"] = list(kinds)
    return live, owned


def text_rows(table: str, where: str, source: tuple[str, str] | None) -> str:
    """The FROM clause of the rows a hybrid search's full-text ranking scores: the
    query's rows (`qt.mtsq`) that `where` admits; with `source` (`hybrid_sql`'s
    `text_source`), the query's rows of the scope, less those the filter drops."""
    matched = "qt.mtsq IS NOT NULL AND m.tsv @@ qt.mtsq"
    if source is None:
        return f"{table} m WHERE {matched} AND {where}"
    # OFFSET 0 keeps the filter out of the scan of the query's rows: the planner would
    # AND the query's bitmap with one of every row of the table the filter's index
    # admits (two thirds of it in bench/filtered_search.py: x1.7 the unfiltered
    # search at 100,000 memories) to drop a few of a few hundred rows.
    scoped, filtered = source
    return f"(SELECT * FROM {table} m WHERE {matched} AND {scoped} OFFSET 0) m WHERE {filtered}"


def memory_count_filter(scope: Scope) -> str:
    """Rows of at least `memory_filter`'s, which the scope index (`memories_scope`)
    answers alone, so that counting them reads no table row: any kind, the
    memories of every session when one is named, expired ones not yet swept.
    Same parameters."""
    return _in_scope(scope, "m.valid_to IS NULL", "m.scope = 'session'")


def episode_filter(
    scope: Scope, before: datetime | None, after: datetime | None
) -> tuple[str, dict[str, Any]]:
    """The WHERE clause (alias `m`) of the episodes `scope` may see: with a project,
    that project's and those recorded without one; without, those without one;
    the agent's and those of no agent (shared.memory.agents)."""
    params: dict[str, Any] = {
        "app": scope.app,
        "user_id": scope.user_id,
        "project_id": scope.project_id,
    }
    clause = (
        "m.app = %(app)s AND m.user_id = %(user_id)s AND m.project_id IN (%(project_id)s, '') "
        "AND m.agent_id = ANY(%(agents)s)"
    )
    params["agents"] = list(visible_to(scope.agent_id))
    time = scope.time
    if time is not None and time.as_of is not None:
        clause += " AND m.created_at <= %(as_of)s"
        params["as_of"] = time.as_of
    if time is not None and time.observed_after is not None:
        clause += " AND m.created_at > %(observed_after)s"
        params["observed_after"] = time.observed_after
    if time is not None and time.observed_before is not None:
        clause += " AND m.created_at < %(observed_before)s"
        params["observed_before"] = time.observed_before
    if before is not None:
        clause += " AND m.created_at < %(before)s"
        params["before"] = before
    if after is not None:
        clause += " AND m.created_at > %(after)s"
        params["after"] = after
    return clause, params
