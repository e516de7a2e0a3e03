"""A filter expression in the search statement, on the real Postgres/pgvector: the
planner knows from the metadata column's statistics how many rows a filter admits,
which decides how the search reads them (a selective filter's rows sorted by
distance, an unselective one's dropped from what each ranking reads), and a
filtered search ranks the rows it admits exactly as the unfiltered search orders
them, either way."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from psycopg.types.json import Jsonb

from shared.db import filter_sql
from shared.db.run import run
from shared.db.search import search_memories, vector_text
from shared.db.search_filters import filter_plan, memory_filter_parts
from shared.memory.filters import parse
from shared.memory.ranking import Fusion, Scope
from tests.conftest import EMBEDDING_DIM

ROWS = 60


def _metadata(i: int) -> dict:
    return {"team": f"team{i % 10}", "level": i % 10, "region": ["emea", "amer", "apac"][i % 3]}


@pytest.mark.parametrize(
    ("expression", "admits"),
    [
        ({"metadata.level": {"gte": 5}}, lambda m: m["level"] >= 5),
        ({"metadata.level": {"lt": 8}}, lambda m: m["level"] < 8),
        ({"metadata.level": {"gte": 3, "lt": 6}}, lambda m: 3 <= m["level"] < 6),
        ({"metadata.team": {"in": ["team1", "team2"]}}, lambda m: m["team"] in ("team1", "team2")),
        (
            {
                "and": [
                    {"or": [{"metadata.region": "emea"}, {"metadata.region": "apac"}]},
                    {"not": {"metadata.level": {"gte": 8}}},
                ]
            },
            lambda m: m["region"] != "amer" and m["level"] < 8,
        ),
    ],
)
def test_the_planner_estimates_what_a_metadata_filter_admits(pool, expression, admits):
    # A range read as `#>` compared with a value was estimated at a fixed 0.17% of
    # the rows whatever it admitted, so the planner sorted half a scope by exact
    # distance where the HNSW walk needed a few dozen rows.
    rows = [_metadata(i) for i in range(2000)]
    params: dict = {}
    clause = filter_sql.where(parse(expression), params)
    with pool.connection() as conn, conn.transaction(force_rollback=True):
        conn.execute("CREATE TEMP TABLE filtered (metadata jsonb NOT NULL) ON COMMIT DROP")
        with conn.cursor().copy("COPY filtered (metadata) FROM STDIN") as copy:
            for metadata in rows:
                copy.write_row((Jsonb(metadata),))
        conn.execute("ANALYZE filtered")
        admitted = conn.execute(f"SELECT count(*) FROM filtered m WHERE {clause}", params)
        (plan,) = conn.execute(
            f"EXPLAIN (FORMAT JSON) SELECT 1 FROM filtered m WHERE {clause}", params
        ).fetchone()
    truth = sum(1 for m in rows if admits(m))
    assert admitted.fetchone() == (truth,)
    estimate = plan[0]["Plan"]["Plan Rows"]
    assert truth / 2 <= estimate <= truth * 2, (estimate, truth)


def _unit(rng: random.Random) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(EMBEDDING_DIM)]
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


@pytest.fixture
def stored(pool, ids) -> dict[str, dict]:
    """ROWS global memories of the test's user (random embeddings, texts sharing the
    query's words unevenly, `_metadata`): id -> metadata."""
    rng = random.Random(3)
    found = {}
    with pool.connection() as conn:
        for i in range(ROWS):
            words = ["quartz"] + ["zircon"] * (i % 3 == 0) + ["beryl"] * (i % 5 == 0)
            row = conn.execute(
                "INSERT INTO memories (app, user_id, scope, kind, text, embedding, observed_at, "
                "metadata) VALUES (%s, %s, 'global', 'fact', %s, %s::vector, now(), %s) "
                "RETURNING id::text",
                (
                    ids["app"],
                    ids["user_id"],
                    " ".join([*words, f"note{i}"]),
                    vector_text(_unit(rng)),
                    Jsonb(_metadata(i)),
                ),
            ).fetchone()
            found[row[0]] = _metadata(i)
    return found


def _ids(pool, ids, fusion: Fusion, query: str, k: int, expression: dict | None) -> list[str]:
    scope = Scope(ids["app"], ids["user_id"])
    embedding = _unit(random.Random(4))
    matching = parse(expression) if expression else None
    with pool.connection() as conn:
        found, _ = run(
            conn, search_memories(scope, [query], [embedding], k, fusion, matching=matching)
        )
    return [memory.id for memory, _ in found]


# exact_below at its maximum: every filter is selective (and the scope small); at 0
# none is (the full text reads the query's rows of the scope, then drops some).
ALONE = Fusion(entity_weight=0.0, feedback_weight=0.0, exact_below=100_000)
VECTOR = replace(ALONE, vector_weight=1.0, text_weight=0.0)
TEXT = replace(ALONE, vector_weight=0.0, text_weight=1.0)


@pytest.mark.parametrize(
    ("ranking", "fusion", "query"),
    [
        ("vector", VECTOR, "no words in common"),
        ("full text", TEXT, "quartz zircon beryl"),
        ("full text, unselective", replace(TEXT, exact_below=0), "quartz zircon beryl"),
    ],
)
@pytest.mark.parametrize(
    ("expression", "admits"),
    [
        ({"metadata.team": "team3"}, lambda m: m["team"] == "team3"),
        ({"metadata.level": {"gte": 5}}, lambda m: m["level"] >= 5),
        ({"not": {"metadata.region": {"in": ["amer"]}}}, lambda m: m["region"] != "amer"),
    ],
)
def test_a_filtered_search_ranks_the_rows_it_admits_as_the_unfiltered_one_does(
    pool, ids, stored, ranking, fusion, query, expression, admits
):
    everything = _ids(pool, ids, fusion, query, ROWS, None)
    assert sorted(everything) == sorted(stored)  # every row ranked
    filtered = _ids(pool, ids, fusion, query, 5, expression)
    assert filtered == [i for i in everything if admits(stored[i])][:5], ranking


def test_through_the_hnsw_index_a_filtered_search_finds_only_rows_it_admits(pool, ids, stored):
    # Never exact: the planner chooses (the HNSW walk, or the admitted rows sorted).
    fusion = replace(VECTOR, exact_below=0)
    found = _ids(pool, ids, fusion, "no words in common", 5, {"metadata.level": {"lt": 5}})
    assert len(found) == 5
    assert all(stored[i]["level"] < 5 for i in found)


def _counted(steps, ran: list):
    """`steps`, each statement noted in `ran` as it is run."""
    try:
        statement = next(steps)
        while True:
            ran.append(statement)
            statement = steps.send((yield statement))
    except StopIteration as done:
        return done.value


def test_a_selective_filter_is_read_as_a_small_scope_and_an_unselective_one_as_a_large(pool, ids):
    scope = Scope(ids["app"], ids["user_id"])
    scoped, filtered, params = memory_filter_parts(scope, None, parse({"metadata.team": "x"}))
    assert filtered is not None

    def plan(exact: bool | None, below: int, clause: str | None = filtered):
        ran: list = []
        with pool.connection() as conn:
            planned = run(conn, _counted(filter_plan(scoped, clause, params, exact, below), ran))
        return planned, len(ran)

    # Fewer than `below` admitted: sorted by distance; the full text uses the filter's
    # indexes too. The planner's estimate, asked once a minute (FILTER_SIZES).
    assert plan(None, 100_000) == ((True, None), 1)
    assert plan(False, 100_000) == ((True, None), 0)
    # Not fewer: the scope decides the vector ranking; the full text drops rows.
    assert plan(None, 0) == ((None, (scoped, filtered)), 0)  # 0: never exact, never asked
    assert plan(False, 0) == ((False, (scoped, filtered)), 0)
    # A small scope is exact anyway, and no filter is nothing to plan.
    assert plan(True, 0) == ((True, None), 0)
    assert plan(None, 100_000, clause=None) == ((None, None), 0)
