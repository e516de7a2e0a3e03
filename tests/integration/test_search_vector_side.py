"""The vector side of hybrid search: exact for a scope with fewer rows than
`exact_below`, through the HNSW index otherwise, on the real Postgres/pgvector.
Only one of the two branches of the statement runs."""

import math
import random
from dataclasses import replace

import pytest
from psycopg.rows import dict_row

from shared.db import search as db_search
from shared.db.memory_reads import MEMORY_COLUMNS
from shared.db.search import fusion_params, hybrid_sql, vector_text
from shared.db.search_filters import SCOPE_SIZES, memory_count_filter, memory_filter
from shared.memory.ranking import Fusion, Scope
from tests.conftest import EMBEDDING_DIM

ROWS = 40


def _unit(rng: random.Random) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(EMBEDDING_DIM)]
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


def _cosine_distance(a: list[float], b: list[float]) -> float:
    return 1 - sum(x * y for x, y in zip(a, b, strict=True))  # both unit length


@pytest.fixture
def vectors(pool, ids) -> dict[str, list[float]]:
    """ROWS global memories of the test's user with random unit embeddings: id -> vector."""
    rng = random.Random(11)
    found = {}
    with pool.connection() as conn:
        for i in range(ROWS):
            vector = _unit(rng)
            row = conn.execute(
                "INSERT INTO memories (app, user_id, scope, kind, text, embedding, observed_at) "
                "VALUES (%s, %s, 'global', 'fact', %s, %s::vector, now()) RETURNING id::text",
                (ids["app"], ids["user_id"], f"fact number {i}", vector_text(vector)),
            ).fetchone()
            found[row[0]] = vector
    return found


def _search(
    pool, ids, query: list[float], exact_below: int, exact: bool | None = None
) -> tuple[list[str], list[dict], set[bool]]:
    """The vector ranking alone (text weight 0): the ids in order, the plan, and
    what the rows say of the ranking (`exact`)."""
    fusion = replace(Fusion(), vector_weight=1.0, text_weight=0.0, exact_below=exact_below)
    where, params = memory_filter(Scope(ids["app"], ids["user_id"]), None)
    params.update(fusion_params(fusion, [query], ["no words in common"], 10))
    sql = hybrid_sql("memories", MEMORY_COLUMNS, where, exact=exact)
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(sql, params).fetchall()
        plan = cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
    nodes = list(_nodes(plan["QUERY PLAN"][0]["Plan"]))
    return [r["id"] for r in rows], nodes, {r["exact"] for r in rows}


def _nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _branches_run(plan: list[dict]) -> dict[str, bool]:
    """Which of the vector side's two branches ran: each sits under a node whose
    one-time filter is the count's verdict (`exact`, or `NOT exact`)."""
    run = {}
    for node in plan:
        gate = node.get("One-Time Filter", "")
        if "InitPlan" in gate:
            branch = "ordered by the planner" if gate.startswith("(NOT") else "exact"
            below = [c for c in node.get("Plans", []) if c["Parent Relationship"] != "InitPlan"]
            run[branch] = any(child["Actual Loops"] > 0 for child in below)
    return run


def test_a_scope_below_the_threshold_is_ranked_by_exact_distance(pool, ids, vectors):
    query = _unit(random.Random(12))
    expected = sorted(vectors, key=lambda i: (_cosine_distance(vectors[i], query), i))[:10]
    found, plan, reported = _search(pool, ids, query, exact_below=ROWS + 1)
    assert found == expected
    assert reported == {True}
    assert _branches_run(plan) == {"exact": True, "ordered by the planner": False}
    assert not any(n.get("Index Name") == "memories_embedding" for n in plan if n["Actual Loops"])


def test_a_scope_at_the_threshold_is_left_to_the_planner(pool, ids, vectors):
    # ...which may take the HNSW index (for 40 rows it sorts them itself).
    query = _unit(random.Random(12))
    for exact_below in (ROWS, 0):  # 0: never exact
        found, plan, reported = _search(pool, ids, query, exact_below=exact_below)
        assert len(found) == 10 and set(found) <= set(vectors)
        assert reported == {False}
        assert _branches_run(plan) == {"exact": False, "ordered by the planner": True}


def test_a_statement_told_the_count_plans_and_runs_only_that_ranking(pool, ids, vectors):
    query = _unit(random.Random(12))
    expected = sorted(vectors, key=lambda i: (_cosine_distance(vectors[i], query), i))[:10]
    counted, _, _ = _search(pool, ids, query, exact_below=0)  # the planner's order, counted
    for exact, same_as in ((True, expected), (False, counted)):
        # A count would say the opposite: the statement must not count.
        opposite = ROWS if exact else ROWS + 1
        found, plan, reported = _search(pool, ids, query, exact_below=opposite, exact=exact)
        assert found == same_as
        assert reported == {exact}
        assert _branches_run(plan) == {}
        assert not any(n.get("CTE Name") == "sizing" for n in plan)


def test_a_search_keeps_its_scopes_count_for_the_next_search_of_that_scope(
    client, app_settings, ids, monkeypatch
):
    told: list[bool | None] = []  # what the route tells each statement it builds

    def recording(*args, **kwargs):
        told.append(kwargs.get("exact"))
        return hybrid_sql(*args, **kwargs)

    monkeypatch.setattr(db_search, "hybrid_sql", recording)
    for i in range(3):
        body = {"user_id": ids["user_id"], "text": f"I prefer tool number {i}.", "scope": "global"}
        written = client.post(
            "/v1/memories", json={**body, "kind": "preference", "consolidate": False}
        )
        assert written.status_code == 201, written.text
    sized = SCOPE_SIZES.key(
        "memories", Scope(ids["app"], ids["user_id"]), app_settings.search_exact_below
    )
    assert SCOPE_SIZES.cached(sized) is None
    answers = []
    for _ in range(2):
        response = client.post(
            "/v1/memories:search", json={"user_id": ids["user_id"], "query": "which tool"}
        )
        assert response.status_code == 200, response.text
        answers.append(response.json()["memories"])
        assert SCOPE_SIZES.cached(sized) is True  # 3 rows: below the threshold
    assert len(answers[0]) == 3 and answers[1] == answers[0]
    assert told == [None, True]  # the first statement counts; the second is told


def test_the_count_admits_every_row_of_the_scope_and_reads_only_the_index(pool, ids):
    app, user = ids["app"], ids["user_id"]
    rows = [  # (scope, project_id, session_id, kind)
        ("global", "", "", "fact"),
        ("project", "Alpha", "", "rule"),
        ("project", "Beta", "", "fact"),
        ("session", "", "s1", "preference"),
        ("session", "", "s2", "preference"),
    ]
    scope = Scope(app, user, "Alpha", "s1")
    where, params = memory_filter(scope, ["fact", "rule", "preference"])
    with pool.connection() as conn:
        for scope_name, project, session, kind in rows:
            conn.execute(
                "INSERT INTO memories (app, user_id, project_id, session_id, scope, kind, text, "
                "observed_at) VALUES (%s, %s, %s, %s, %s, %s, 'x', now())",
                (app, user, project, session, scope_name, kind),
            )

        def matching(clause: str) -> set[tuple]:
            found = conn.execute(
                f"SELECT m.scope, m.project_id, m.session_id FROM memories m WHERE {clause}", params
            ).fetchall()
            return set(found)

        assert matching(where) == {
            ("global", "", ""),
            ("project", "Alpha", ""),
            ("session", "", "s1"),
        }
        # every session's memories too: an upper bound the index answers
        assert matching(memory_count_filter(scope)) == matching(where) | {("session", "", "s2")}
        conn.execute("SET enable_seqscan = off")  # a table this small is read whole anyway
        with conn.transaction(force_rollback=True):
            # The user's other live indexes tie on a table this small, as the stats of
            # the tests before have it (the entity index too, once those tests leave
            # more memories): set aside (rolled back), so the plan shows what the
            # scope index leaves for the table.
            conn.execute("DROP INDEX memories_live_user")
            conn.execute("DROP INDEX memories_user_entity")
            plan = [
                line
                for (line,) in conn.execute(
                    f"EXPLAIN SELECT count(*) FROM memories m WHERE {memory_count_filter(scope)}",
                    params,
                ).fetchall()
            ]
    # The scope index's columns decide every row: nothing is left for the table.
    assert any("using memories_scope" in line for line in plan), plan
    assert not any("session_id" in line or "kind" in line for line in plan), plan
