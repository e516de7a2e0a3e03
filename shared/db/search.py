"""Hybrid retrieval in one SQL statement, over memories or episodes.

For each sub-query, two rankings over the same scoped rows: vector distance
(cosine) and full-text rank (`ts_rank_cd` over the GIN-indexed `tsv`, where the
question matches rows sharing ANY of its meaningful lexemes: the OR of them, not
the AND that `plainto_tsquery` would build). Reciprocal rank fusion sums
`weight / (k + rank)` over both rankings and all sub-queries, each ranking's
weight scaled per sub-query by how its own top rows look (`Fusion`): a function
of the sub-query and the scope's rows alone, so the same data and query give
the same order.

The vector ranking is exact when the scope has fewer than
`AM_SEARCH_EXACT_BELOW` rows (counted first, up to that number, on the scope's
index); otherwise Postgres's planner orders the rows, through the HNSW index
for a large scope. HNSW walks the whole table's graph and drops the rows of
other users and scopes as it goes (`hnsw.iterative_scan` is on for every
connection, so it keeps walking until it has its candidates): for a scope that
is a small share of the table that is many rows thrown away, while sorting the
scope's own rows by distance is cheaper. The planner makes that choice from
sampled statistics and can make it either way for the same user from one load
of the table to the next; the count makes it the same every time. The other
branch is never executed. A caller that knows the count's answer
(`SCOPE_SIZES`, what a recent statement found) passes it, and the statement
then has only the one ranking.

Term weighting is the searching user's own, so a ranking is the same whenever
it is asked and whatever other tenants store: how many of the user's rows hold
each lexeme is kept in `lexeme_counts` by triggers as rows are written
(migration 0009; a memory counts while it is live). A lexeme in more than
`AM_SEARCH_TEXT_SCAN_LIMIT` of them ("user", "prefer" in a large memory store)
selects no rows, as a stop word would not; the others select the rows they are
in (the OR of them), at most that many per sub-query. A selected row scores the
sum of its lexemes' weights, `ln(1 + limit / count)` (rarer: heavier, as in
BM25's IDF), full for a lexeme of the row's own text and 0.4 of it for one only
in an episode's context (the neighbouring turns and the date: weight `B` in
`tsv`); `ts_rank_cd` (the lexemes' density) breaks ties.

A caller's filter is in every ranking's WHERE clause. A selective one, which the
planner expects to admit fewer than `AM_SEARCH_EXACT_BELOW` rows, is read as a
small scope is (its rows sorted by distance); an unselective one only drops rows
from what each ranking reads through its own index (`filter_plan`).

Scope: with a project, that project's rows and the user's global ones; without,
global ones only; a session's own memories only when the search names the
session. The app and user are always in the filter. Every value is a bound
parameter.

The searches are `Steps` (`shared.db.run`): the API runs them on its event loop,
consolidation in its worker thread, through the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.db.context_reads import CITED_COLUMNS, Cited, pop_cited
from shared.db.feedback import BALANCE_SQL
from shared.db.memory_reads import MEMORY_COLUMNS, as_of_columns
from shared.db.memory_rows import MemoryRow
from shared.db.run import Statement, Steps
from shared.db.scoped_metadata import scoped_where
from shared.db.search_entities import NO_ENTITIES, entity_ctes, entity_params
from shared.db.search_filters import (
    SCOPE_SIZES,
    filter_plan,
    memory_count_filter,
    memory_filter_parts,
    text_rows,
)
from shared.memory.filters import Node
from shared.memory.ranking import Fusion, Ranked, Scope

# The context's pinned rules: at most this many, newest first.
PINNED_LIMIT = 50


# A lexeme quoted for to_tsquery (backslash escapes inside quotes).
_QUOTED = "'''' || replace(replace({lex}, '\\', '\\\\'), '''', '\\''') || ''''"


def _lexemes(table: str) -> str:
    """Per sub-query (`q`): each of its lexemes with how many of the user's rows
    hold it (`df.n`, from `lexeme_counts`) and its BM25 weight (`df.idf`, against
    the user's row count, kept under the empty lexeme); the OR of those in at most
    `max_frequency` of the user's rows (or a tenth of `text_scan`, so that a small
    archive, or an episode's word counted in its neighbours' keys too, is not all
    stop words), which selects rows (`qt.mtsq`); and the OR of all, which
    `ts_rank_cd` reads (`qt.tsq`)."""
    quoted = _QUOTED.format(lex="l.lex")
    count = """coalesce((SELECT c.rows FROM lexeme_counts c WHERE c.app = %(app)s
        AND c.user_id = %(user_id)s AND c.tbl = '{table}' AND c.lexeme = {lexeme}), 0)"""
    return f"""
total AS MATERIALIZED (SELECT {count.format(table=table, lexeme="''")}::float8 AS n),
df AS (
    SELECT l.qi, w.quoted, to_tsquery('simple', w.quoted) AS one,
           to_tsquery('simple', w.quoted || ':AD') AS own, c.n,
           ln(1 + (total.n - c.n + 0.5) / (c.n + 0.5)) AS idf,
           c.n BETWEEN 1 AND greatest(%(text_scan)s / 10, %(max_frequency)s * total.n) AS selects
    FROM (
        SELECT DISTINCT q.qi, lex
        FROM q, unnest(tsvector_to_array(to_tsvector('english', q.qtext))) AS lex
    ) l(qi, lex)
    CROSS JOIN LATERAL (SELECT {quoted} AS quoted) w
    -- OFFSET 0: one lookup per lexeme, not one per use of c.n.
    CROSS JOIN LATERAL (SELECT {count.format(table=table, lexeme="l.lex")} AS n OFFSET 0) c
    CROSS JOIN total
),
qt AS (
    SELECT q.qi, q.emb,
           (SELECT to_tsquery('simple', string_agg(df.quoted, ' | '))
            FROM df WHERE df.qi = q.qi) AS tsq,
           (SELECT to_tsquery('simple', string_agg(df.quoted, ' | '))
            FROM df WHERE df.qi = q.qi AND df.selects) AS mtsq
    FROM q
)"""


def hybrid_sql(
    table: str,
    columns: str,
    where: str,
    *,
    pinned_rules: bool = False,
    count_where: str | None = None,
    exact: bool | None = None,
    entities: bool = False,
    as_of: bool = False,
    feedback: bool = False,
    text_source: tuple[str, str] | None = None,
    read_where: str | None = None,
) -> str:
    """The statement: fused rows (`pinned` false) and, if asked, every rule the
    filter admits (`pinned` true; score 0), each with `exact`, whether the vector
    ranking was exact. Parameters: the filter's and those of `fusion_params`.
    With `exact` None the statement decides, counting the rows of `count_where`
    (`where` if not given: a filter admitting at least `where`'s rows, cheaper to
    count); given (a count a recent statement made, `SCOPE_SIZES`), it only has
    the one ranking to plan and run. `entities`: with the entity ranking
    (`shared.db.search_entities`; its facts true at `as_of` when given). `feedback`:
    each memory's score weighed by its feedback (`shared.db.feedback.BALANCE_SQL`).
    `text_source`: `where` in two, the scope's clause and a filter's, when the
    full-text ranking is to read the query's rows of the scope and drop those the
    filter does not admit (an unselective filter, `search_memories`). `read_where`:
    `where`'s rows written to be read through another index (a selective filter's,
    `shared.db.scoped_metadata`), for the sorted vector ranking and the full text."""
    fused, ranked, was_exact = hybrid_parts(
        table,
        columns,
        where,
        count_where,
        exact,
        entities,
        as_of,
        feedback,
        text_source,
        read_where,
    )
    if not pinned_rules:
        return f"{fused}\n{ranked}"
    rules = f"""(
    SELECT {columns}, 0::float8, NULL::bigint, NULL::bigint, NULL::bigint, true AS pinned,
           {was_exact}
    FROM {table} m WHERE {where} AND m.kind = 'rule'
    ORDER BY m.observed_at DESC, m.id LIMIT %(pinned_limit)s
)"""
    return f"{fused}\n{ranked}\nUNION ALL\n{rules}"


# Longer than most functions: it is one statement's text, read best whole.
def hybrid_parts(
    table: str,
    columns: str,
    where: str,
    count_where: str | None,
    exact: bool | None,
    entities: bool = False,
    as_of: bool = False,
    feedback: bool = False,
    text_source: tuple[str, str] | None = None,
    read_where: str | None = None,
) -> tuple[str, str, str]:
    """`hybrid_sql`'s parts: the WITH clause up to the fused scores (`fused`), the
    query of the ranked rows (in parentheses, so that a caller may name it as one
    more common table), and the expression of whether the ranking was exact."""

    sorted_rows = read_where or where  # what the sorted vector ranking and full text read

    def nearest(order: str, unless_exact: str, rows: str = where) -> str:
        """Each sub-query's `candidates` nearest rows by `order`, if the count says so."""
        return f"""SELECT qt.qi, n.id, n.dist FROM qt CROSS JOIN LATERAL (
            SELECT m.id, m.embedding <=> qt.emb AS dist FROM {table} m
            WHERE {rows} AND m.embedding IS NOT NULL
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
        {nearest(sorted_, " WHERE (SELECT exact FROM sizing)", sorted_rows)}"""
        was_exact = "(SELECT exact FROM sizing)"
    else:
        sizing = ""
        nearest_rows = nearest(sorted_, "", sorted_rows) if exact else nearest(planned, "")
        was_exact = "true" if exact else "false"

    fused = f"""
WITH q AS (
    SELECT u.qi, u.emb, u.qtext
    FROM unnest(%(embeddings)s::text[]::vector[], %(texts)s::text[])
        WITH ORDINALITY AS u(emb, qtext, qi)
),{_lexemes(table)},{sizing}
vec AS (
    SELECT v.qi, v.id, v.dist,
           row_number() OVER (PARTITION BY v.qi ORDER BY v.dist, v.id) AS rank
    FROM (
        {nearest_rows}
    ) v
),
txt AS (
    SELECT qt.qi, t.id, t.r,
           row_number() OVER (PARTITION BY qt.qi ORDER BY t.r DESC, t.d DESC, t.id) AS rank
    FROM qt CROSS JOIN LATERAL (
        -- Cover density (ts_rank_cd, the costlier) only orders the best by weight.
        SELECT b.id, b.r, ts_rank_cd(b.tsv, qt.tsq) AS d FROM (
            SELECT s.id, s.tsv, s.r FROM (
                SELECT m.id, m.tsv, (
                    SELECT sum(df.idf * CASE
                        WHEN m.tsv @@ df.own THEN 1.0 WHEN m.tsv @@ df.one THEN 0.4 ELSE 0 END)
                    FROM df WHERE df.qi = qt.qi AND df.n > 0
                ) AS r
                FROM {text_rows(table, sorted_rows, text_source)}
                LIMIT %(text_scan)s
            ) s
            ORDER BY s.r DESC, s.id LIMIT 2 * %(candidates)s
        ) b
        ORDER BY b.r DESC, d DESC, b.id LIMIT %(candidates)s
    ) t
){entity_ctes(table, where, as_of) if entities else NO_ENTITIES},
-- Each sub-query's weight of each ranking (`Fusion`): scaled by the relative gap
-- between its 1st and its top-th row (its last if it has fewer), distance
-- 1 - d1 / dtop or text weight 1 - rtop / r1, and the vector ranking's also by the
-- share of its top rows that the full-text ranking found; at least `floor` of the
-- weight (top 0: no rows to read, the floor, 1: the weights as given).
weights AS (
    SELECT q.qi,
        %(wv)s::float8 * greatest(%(floor)s, coalesce((
            SELECT count(t.id)::float8 / nullif(count(*), 0)
                   * (1 - min(v.dist) / nullif(max(v.dist), 0))
            FROM vec v LEFT JOIN txt t ON t.qi = v.qi AND t.id = v.id
            WHERE v.qi = q.qi AND v.rank <= %(top)s
        ), 0)) AS wv,
        %(wt)s::float8 * greatest(%(floor)s, coalesce((
            SELECT 1 - min(t.r) / nullif(max(t.r), 0)
            FROM txt t WHERE t.qi = q.qi AND t.rank <= %(top)s
        ), 0)) AS wt
    FROM q
),
fused AS (
    SELECT id, sum(score) AS score, min(vrank) AS vrank, min(trank) AS trank,
           min(erank) AS erank FROM (
        SELECT v.id, w.wv / (%(rrf_k)s + v.rank) AS score, v.rank AS vrank, NULL::bigint AS trank,
               NULL::bigint AS erank
        FROM vec v JOIN weights w ON w.qi = v.qi
        UNION ALL
        SELECT t.id, w.wt / (%(rrf_k)s + t.rank), NULL, t.rank, NULL
        FROM txt t JOIN weights w ON w.qi = t.qi
        UNION ALL
        -- A query that names no entity has only the entities its full text lent: they
        -- count as much as the full text is sure of its top.
        SELECT e.id, CASE WHEN e.named THEN %(we)s::float8
                          ELSE %(we)s * w.wt / greatest(%(wt)s, 1e-9) END / (%(rrf_k)s + e.rank),
               NULL, NULL, e.rank
        FROM ent e JOIN weights w ON w.qi = e.qi
    ) s GROUP BY id
)"""
    score = f"f.score * (1 + %(wf)s::float8 * {BALANCE_SQL})" if feedback else "f.score"
    ranked = f"""(
    SELECT {columns}, {score} AS score, f.vrank, f.trank, f.erank, false AS pinned,
           {was_exact} AS exact
    FROM fused f JOIN {table} m ON m.id = f.id
    ORDER BY score DESC, m.id LIMIT %(limit)s
)"""
    return fused, ranked, was_exact


def vector_text(vector: Any) -> str:
    """pgvector's text form of a vector (a list, a numpy array or a `Vector`; a text
    form already made, as it is)."""
    if isinstance(vector, str):
        return vector
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
        "we": fusion.entity_weight,
        "wf": fusion.feedback_weight,
        "rrf_k": fusion.k,
        "top": fusion.top,
        "floor": fusion.floor if fusion.top else 1.0,
        "text_scan": fusion.text_scan,
        "max_frequency": fusion.max_frequency,
        "exact_below": fusion.exact_below,
        "limit": limit,
    }


def split_ranked(row: dict[str, Any]) -> tuple[dict[str, Any], Ranked, bool]:
    """A row of `hybrid_sql` split into its columns, its ranking and whether it is pinned."""
    ranked = Ranked(float(row.pop("score")), row.pop("vrank"), row.pop("trank"), row.pop("erank"))
    row.pop("exact")
    return row, ranked, bool(row.pop("pinned"))


def search_memories(
    scope: Scope,
    queries: list[str],
    embeddings: list[Any],
    k: int,
    fusion: Fusion,
    kinds: Sequence[str] | None = None,
    pinned: bool = False,
    citations: dict[str, Cited] | None = None,
    matching: Node | None = None,
) -> Steps[tuple[list[tuple[MemoryRow, Ranked]], list[MemoryRow]]]:
    """The fused top-k live memories `scope` may see (and the filter `matching`
    admits) and, if `pinned`, its rules (at most PINNED_LIMIT, newest first): one
    statement. Given `citations`, it also reads where each comes from, into it by
    memory id."""
    scoped, filtered, params = memory_filter_parts(scope, kinds, matching)
    where = scoped if filtered is None else f"{scoped} AND {filtered}"
    sized = SCOPE_SIZES.key("memories", scope, fusion.exact_below)
    # A filter's size is the planner's estimate, not a count: counting what a filter
    # admits read up to the whole scope (x2.7 the unfiltered search at 100,000
    # memories, bench/filtered_search.py).
    exact, text_source = yield from filter_plan(
        scoped, filtered, params, SCOPE_SIZES.cached(sized), fusion.exact_below
    )
    # Rows sorted by distance (a small scope's, a selective filter's): a filter's
    # metadata equalities are read through the scope's metadata index.
    keyed = scoped_where(scope, kinds, matching, params) if exact else None
    params.update(fusion_params(fusion, embeddings, queries, k))
    params.update(entity_params(scope, queries))
    params["pinned_limit"] = PINNED_LIMIT
    columns = MEMORY_COLUMNS + (CITED_COLUMNS if citations is not None else "")
    sql = hybrid_sql(
        "memories",
        as_of_columns(columns) if "as_of" in params else columns,
        where,
        pinned_rules=pinned,
        count_where=memory_count_filter(scope),
        exact=exact,
        entities=fusion.entity_weight > 0,
        as_of="as_of" in params,
        feedback=fusion.feedback_weight > 0,
        text_source=text_source,
        read_where=keyed.where if keyed else None,
    )
    # A filter of metadata equalities alone, read through the scoped metadata index,
    # has one plan for any user and values (that index's entry, then its rows), and
    # planning it anew cost a fifth of the statement (bench/filtered_search.py):
    # it is made once per connection.
    rows = yield Statement(sql, params, generic_plan=bool(keyed and keyed.keyed_only))
    if exact is None and rows:
        SCOPE_SIZES.store(sized, bool(rows[0]["exact"]))
    found, rules = [], []
    for row in rows:
        fields, ranked, is_pinned = split_ranked(row)
        if citations is not None:
            citations[fields["id"]] = pop_cited(fields)
        memory = MemoryRow.from_row(fields)
        if is_pinned:
            rules.append(memory)
        else:
            found.append((memory, ranked))
    return found, rules
