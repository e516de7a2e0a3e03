"""Hybrid retrieval (docs/design.md, "Hybrid retrieval") in one SQL statement.

For each sub-query, two rankings over the same scoped rows: vector distance
(cosine) and full-text rank (`ts_rank_cd` over the
GIN-indexed `tsv`, where the question matches rows sharing ANY of its meaningful
lexemes: the OR of them, not the AND that `plainto_tsquery` would build).
Reciprocal rank fusion sums `weight / (k + rank)` over both rankings and all
sub-queries.

The vector ranking is exact when the scope has fewer than
`AM_SEARCH_EXACT_BELOW` rows (counted first, up to that number, on the scope's
index); otherwise Postgres's planner orders the rows, through the HNSW index
for a large scope. HNSW walks the whole table's graph
and drops the rows of other users and scopes as it goes (`hnsw.iterative_scan`
is on for every connection, so it keeps walking until it has its candidates):
for a scope that is a small share of the table that is thousands of rows
thrown away, while sorting the scope's own few thousand rows by distance is
cheaper. Postgres's planner makes that choice from sampled statistics and made
it either way for the same user from one load of the table to the next, at twice
the cost one way; the count makes it the same every time. The other branch is
never executed. A caller that knows the count's answer (`SCOPE_SIZES`, what a
statement of the last minute found) passes it, and the statement then has only
the one ranking.

"Meaningful": a lexeme that Postgres's statistics find in more than
`AM_SEARCH_TEXT_MAX_FREQUENCY` of the rows ("user", "prefer" in a memory store)
selects no rows, as a stop word would not, though it still counts in the rank of
the rows the other lexemes select. Without this, a question sharing one such
word with half of a user's 100,000 memories would rank all of them. The list of
such lexemes is read from `pg_stats` once a minute per process (`FrequentLexemes`)
and passed to the statement as a parameter. At most
`AM_SEARCH_TEXT_SCAN_LIMIT` selected rows are ranked per sub-query: first by
the cheaper `ts_rank`, then the best twice `candidates` by `ts_rank_cd`.

Scope (docs/design.md, "The read path"): with a project, that project's rows and
the user's global ones; without, global ones only; a session's own memories only when the search
names the session. The app and user are always in the filter. Every value is a
bound parameter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

import psycopg
from psycopg.rows import tuple_row

from shared.config import Settings

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class Scope:
    """Whose rows a search may see."""

    app: str
    user_id: str
    project_id: str = ""
    session_id: str = ""  # also this session's own memories (the context path)


@dataclass(frozen=True)
class Fusion:
    vector_weight: float = 0.4
    text_weight: float = 0.6
    k: int = 60
    candidates: int = 30
    # Lexemes in more of the rows than this do not select rows (they still rank).
    max_frequency: float = 0.02
    # Rows the full-text side ranks at most per sub-query (bounds its cost).
    text_scan: int = 1000
    # Scopes with fewer rows than this are ranked by exact distance (0: never).
    exact_below: int = 5000

    @classmethod
    def from_settings(cls, settings: Settings) -> Fusion:
        return cls(
            settings.search_vector_weight,
            settings.search_text_weight,
            settings.search_rrf_k,
            settings.search_candidates,
            settings.search_text_max_frequency,
            settings.search_text_scan_limit,
            settings.search_exact_below,
        )


@dataclass(frozen=True)
class Ranked:
    """A row's fused score and its best rank in each ranking (None: not found by it)."""

    score: float
    vector_rank: int | None
    text_rank: int | None

    @property
    def rankers(self) -> list[str]:
        found = []
        if self.vector_rank is not None:
            found.append("vector")
        if self.text_rank is not None:
            found.append("text")
        return found


# The lexemes in more than a fraction of a table's rows, from Postgres's statistics
# of its `tsv` column.
FREQUENT_SQL = """
SELECT x.elem
FROM pg_stats s, unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs)
    AS x(elem, freq)
WHERE s.schemaname = current_schema() AND s.tablename = %s AND s.attname = 'tsv'
  -- the frequencies array ends with three more numbers (minimum, maximum, nulls)
  AND x.elem IS NOT NULL AND x.freq > %s
ORDER BY x.elem"""
FREQUENT_TTL_SECONDS = 60.0


class Expiring(Generic[K, V]):
    """Values kept `ttl` seconds in this process, shared by its threads; at most
    `size` of them (storing one more forgets the oldest), and none past its time."""

    def __init__(
        self,
        ttl: float = FREQUENT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        size: int = 10_000,
    ) -> None:
        self.ttl = ttl
        self.size = size
        self._clock = clock
        self._lock = threading.Lock()
        # Oldest first: a value stored again moves to the end.
        self._found: dict[K, tuple[float, V]] = {}

    def cached(self, key: K) -> V | None:
        with self._lock:
            entry = self._found.get(key)
        return entry[1] if entry is not None and entry[0] > self._clock() else None

    def store(self, key: K, value: V) -> V:
        with self._lock:
            now = self._clock()
            self._found.pop(key, None)
            self._found[key] = (now + self.ttl, value)
            while self._found:
                oldest = next(iter(self._found))
                if self._found[oldest][0] > now and len(self._found) <= self.size:
                    break
                del self._found[oldest]
        return value

    def __len__(self) -> int:
        return len(self._found)


class FrequentLexemes(Expiring[tuple[str, float], list[str]]):
    """`FREQUENT_SQL` per (table, fraction), kept `ttl` seconds in this process.
    Read inside the search statement, the statistics would cost every query a join
    of four catalogs with privilege checks (the pg_stats view); they change only
    when the table is analysed."""

    def get(self, conn: psycopg.Connection, table: str, fraction: float) -> list[str]:
        key = (table, fraction)
        found = self.cached(key)
        if found is None:
            with conn.cursor(row_factory=tuple_row) as cur:
                rows = cur.execute(FREQUENT_SQL, key).fetchall()
            found = self.store(key, [row[0] for row in rows])
        return found

    async def aget(self, conn: psycopg.AsyncConnection, table: str, fraction: float) -> list[str]:
        key = (table, fraction)
        found = self.cached(key)
        if found is None:
            async with conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(FREQUENT_SQL, key)
                rows = await cur.fetchall()
            found = self.store(key, [row[0] for row in rows])
        return found


FREQUENT = FrequentLexemes()


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


SCOPE_SIZES = ScopeSizes()


def _lexemes() -> str:
    """Per sub-query: the OR of all its lexemes (`tsq`, what ranks) and the OR of
    its meaningful ones (`mtsq`, what selects rows): all but the `frequent` ones
    (a parameter, from `FrequentLexemes`). Lexemes are quoted for to_tsquery
    (backslash escapes inside quotes)."""
    return """
qt AS (
    SELECT q.qi, q.emb,
           to_tsquery('simple', l.all_lexemes) AS tsq,
           to_tsquery('simple', l.meaningful) AS mtsq
    FROM q CROSS JOIN LATERAL (
        SELECT string_agg(w.quoted, ' | ') AS all_lexemes,
               string_agg(w.quoted, ' | ') FILTER (
                   WHERE NOT (lex = ANY(%(frequent)s::text[]))) AS meaningful
        FROM unnest(tsvector_to_array(to_tsvector('english', q.qtext))) AS lex
        CROSS JOIN LATERAL (
            SELECT '''' || replace(replace(lex, '\\', '\\\\'), '''', '\\''') || '''' AS quoted
        ) w
    ) l
)"""


def _live_in_scope(scope: Scope, session_rows: str) -> str:
    """Live rows of the scope's app and user: global ones, the project's, and
    `session_rows` when the scope names a session."""
    visible = ["m.scope = 'global'"]
    if scope.project_id:
        visible.append("(m.scope = 'project' AND m.project_id = %(project_id)s)")
    if scope.session_id:
        visible.append(session_rows)
    return (
        "m.app = %(app)s AND m.user_id = %(user_id)s AND m.valid_to IS NULL "
        f"AND ({' OR '.join(visible)})"
    )


def memory_filter(scope: Scope, kinds: list[str] | None) -> tuple[str, dict[str, Any]]:
    """The WHERE clause (alias `m`) of the live memories `scope` may see."""
    params: dict[str, Any] = {"app": scope.app, "user_id": scope.user_id}
    if scope.project_id:
        params["project_id"] = scope.project_id
    if scope.session_id:
        params["session_id"] = scope.session_id
    clause = _live_in_scope(scope, "(m.scope = 'session' AND m.session_id = %(session_id)s)")
    if kinds:
        clause += " AND m.kind = ANY(%(kinds)s)"
        params["kinds"] = list(kinds)
    return clause, params


def memory_count_filter(scope: Scope) -> str:
    """Rows of at least `memory_filter`'s, which the scope index (`memories_scope`)
    answers alone, so that counting them reads no table row: any kind, and the
    memories of every session when one is named. Same parameters."""
    return _live_in_scope(scope, "m.scope = 'session'")


def episode_filter(
    scope: Scope, before: datetime | None, after: datetime | None
) -> tuple[str, dict[str, Any]]:
    """The WHERE clause (alias `m`) of the episodes `scope` may see: with a project,
    that project's and those recorded without one; without, those without one."""
    params: dict[str, Any] = {
        "app": scope.app,
        "user_id": scope.user_id,
        "project_id": scope.project_id,
    }
    clause = "m.app = %(app)s AND m.user_id = %(user_id)s AND m.project_id IN (%(project_id)s, '')"
    if before is not None:
        clause += " AND m.created_at < %(before)s"
        params["before"] = before
    if after is not None:
        clause += " AND m.created_at > %(after)s"
        params["after"] = after
    return clause, params


def hybrid_sql(
    table: str,
    columns: str,
    where: str,
    *,
    pinned_rules: bool = False,
    count_where: str | None = None,
    exact: bool | None = None,
) -> str:
    """The statement: fused rows (`pinned` false) and, if asked, every rule the
    filter admits (`pinned` true; score 0), each with `exact`, whether the vector
    ranking was exact. Parameters: the filter's, those of `fusion_params`, and
    `frequent` (the table's `FrequentLexemes`). With `exact` None the statement
    decides, counting the rows of `count_where` (`where` if not given: a filter
    admitting at least `where`'s rows, cheaper to count); given (a count a recent
    statement made, `SCOPE_SIZES`), it only has the one ranking to plan and run."""

    def nearest(order: str, unless_exact: str) -> str:
        """Each sub-query's `candidates` nearest rows by `order`, if the count says so."""
        return f"""SELECT qt.qi, n.id, n.dist FROM qt CROSS JOIN LATERAL (
            SELECT m.id, m.embedding <=> qt.emb AS dist FROM {table} m
            WHERE {where} AND m.embedding IS NOT NULL
            ORDER BY {order} LIMIT %(candidates)s
        ) n{unless_exact}"""

    planned = "m.embedding <=> qt.emb"
    # `+ 0`: an order the HNSW index cannot give, so the scope's rows are sorted.
    sorted_ = "(m.embedding <=> qt.emb) + 0"
    if exact is None:
        sizing = f"""
sizing AS (
    SELECT count(*) < %(exact_below)s AS exact FROM (
        SELECT 1 FROM {table} m WHERE {count_where or where} LIMIT %(exact_below)s
    ) s
),"""
        nearest_rows = f"""{nearest(planned, " WHERE NOT (SELECT exact FROM sizing)")}
        UNION ALL
        {nearest(sorted_, " WHERE (SELECT exact FROM sizing)")}"""
        was_exact = "(SELECT exact FROM sizing)"
    else:
        sizing = ""
        nearest_rows = nearest(sorted_ if exact else planned, "")
        was_exact = "true" if exact else "false"

    fused = f"""
WITH q AS (
    SELECT u.qi, u.emb, u.qtext
    FROM unnest(%(embeddings)s::text[]::vector[], %(texts)s::text[])
        WITH ORDINALITY AS u(emb, qtext, qi)
),{_lexemes()},{sizing}
vec AS (
    SELECT v.id, row_number() OVER (PARTITION BY v.qi ORDER BY v.dist, v.id) AS rank
    FROM (
        {nearest_rows}
    ) v
),
txt AS (
    SELECT t.id, row_number() OVER (PARTITION BY qt.qi ORDER BY t.r DESC, t.id) AS rank
    FROM qt CROSS JOIN LATERAL (
        SELECT c.id, ts_rank_cd(c.tsv, qt.tsq) AS r FROM (
            SELECT s.id, s.tsv FROM (
                SELECT m.id, m.tsv FROM {table} m
                WHERE qt.mtsq IS NOT NULL AND m.tsv @@ qt.mtsq AND {where}
                LIMIT %(text_scan)s
            ) s
            ORDER BY ts_rank(s.tsv, qt.tsq) DESC LIMIT 2 * %(candidates)s
        ) c
        ORDER BY r DESC LIMIT %(candidates)s
    ) t
),
fused AS (
    SELECT id, sum(score) AS score, min(vrank) AS vrank, min(trank) AS trank FROM (
        SELECT id, %(wv)s::float8 / (%(rrf_k)s + rank) AS score,
               rank AS vrank, NULL::bigint AS trank FROM vec
        UNION ALL
        SELECT id, %(wt)s::float8 / (%(rrf_k)s + rank), NULL, rank FROM txt
    ) s GROUP BY id
)"""
    ranked = f"""(
    SELECT {columns}, f.score, f.vrank, f.trank, false AS pinned, {was_exact} AS exact
    FROM fused f JOIN {table} m ON m.id = f.id
    ORDER BY f.score DESC, m.id LIMIT %(limit)s
)"""
    if not pinned_rules:
        return f"{fused}\n{ranked}"
    rules = f"""(
    SELECT {columns}, 0::float8, NULL::bigint, NULL::bigint, true AS pinned, {was_exact}
    FROM {table} m WHERE {where} AND m.kind = 'rule'
    ORDER BY m.observed_at DESC, m.id LIMIT %(pinned_limit)s
)"""
    return f"{fused}\n{ranked}\nUNION ALL\n{rules}"


def vector_text(vector: Any) -> str:
    """pgvector's text form of a vector (a list, a numpy array or a `Vector`)."""
    values = vector.to_list() if hasattr(vector, "to_list") else vector
    return "[" + ",".join(repr(float(x)) for x in values) + "]"


def fusion_params(
    fusion: Fusion, embeddings: list[Any], texts: list[str], limit: int
) -> dict[str, Any]:
    return {
        "embeddings": [vector_text(e) for e in embeddings],
        "texts": texts,
        "candidates": max(fusion.candidates, limit),
        "wv": fusion.vector_weight,
        "wt": fusion.text_weight,
        "rrf_k": fusion.k,
        "text_scan": fusion.text_scan,
        "exact_below": fusion.exact_below,
        "limit": limit,
    }
