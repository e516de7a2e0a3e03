"""A selective filter's metadata equalities read through `memories_scoped_metadata`
(migration 0021), on the real Postgres: the search statement can use the index
(its expression is the migration's), finds the same rows as the same filter
written so that it cannot, and never a row of another app, user, project or
session, even where app and user ids run into each other."""

from __future__ import annotations

import json
import random
from dataclasses import replace

from psycopg.types.json import Jsonb

from shared.db.run import Statement, run
from shared.db.scoped_metadata import SCOPED_METADATA, scope_key
from shared.db.search import search_memories, vector_text
from shared.memory.filters import parse
from shared.memory.ranking import Fusion, Scope
from tests.integration.test_filtered_search import _unit

# Every filter selective: the rows it admits are sorted by distance.
FUSION = Fusion(entity_weight=0.0, feedback_weight=0.0, exact_below=100_000)
TEAM = {"metadata.team": "t3"}


def _insert(conn, app: str, user: str, text: str, metadata: dict, **where: str) -> None:
    scope = "session" if "session_id" in where else "project" if "project_id" in where else "global"
    conn.execute(
        "INSERT INTO memories (app, user_id, scope, project_id, session_id, kind, text, "
        "embedding, observed_at, metadata) VALUES (%s, %s, %s, %s, %s, 'fact', %s, "
        "%s::vector, now(), %s)",
        (
            app,
            user,
            scope,
            where.get("project_id", ""),
            where.get("session_id", ""),
            text,
            vector_text(_unit(random.Random(text))),
            Jsonb(metadata),
        ),
    )


def _texts(pool, scope: Scope, expression: dict, fusion: Fusion = FUSION) -> list[str]:
    with pool.connection() as conn:
        found, _ = run(
            conn,
            search_memories(
                scope,
                ["no words in common"],
                [_unit(random.Random(1))],
                20,
                fusion,
                matching=parse(expression),
            ),
        )
    return sorted(memory.text for memory, _ in found)


def test_a_selective_filter_finds_its_scopes_rows_only(pool, ids):
    app, user = ids["app"], ids["user_id"]
    with pool.connection() as conn:
        _insert(conn, app, user, "mine global", {"team": "t3", "level": 1})
        _insert(conn, app, user, "mine global level 2", {"team": "t3", "level": 2, "x": {"y": 1}})
        _insert(conn, app, user, "mine other team", {"team": "t4", "level": 1})
        _insert(conn, app, user, "mine in p1", {"team": "t3"}, project_id="p1")
        _insert(conn, app, user, "mine in p2", {"team": "t3"}, project_id="p2")
        _insert(conn, app, user, "mine in s1", {"team": "t3"}, session_id="s1")
        # Without the lengths in the key, app + user would read the same here.
        _insert(conn, app + user[:2], user[2:], "another app's", {"team": "t3"})
        _insert(conn, app, user + "x", "another user's", {"team": "t3"})
    scope = Scope(app, user)
    assert _texts(pool, scope, TEAM) == ["mine global", "mine global level 2"]
    assert _texts(pool, Scope(app, user, "p1"), TEAM) == [
        "mine global",
        "mine global level 2",
        "mine in p1",
    ]
    in_session = Scope(app, user, session_id="s1")
    assert _texts(pool, in_session, TEAM) == ["mine global", "mine global level 2", "mine in s1"]
    assert _texts(pool, Scope(app + user[:2], user[2:]), TEAM) == ["another app's"]
    # Two equalities, one nested, and a range: the same rows as written so that the
    # index cannot answer them (a double negation).
    for expression in (
        {"and": [TEAM, {"metadata.x.y": 1}, {"metadata.level": {"gte": 2}}]},
        {"and": [TEAM, {"metadata.level": 1}]},
        {"and": [TEAM, {"metadata.team": "t4"}]},  # the key twice: nothing
    ):
        double_negation = {"not": {"not": expression}}
        assert _texts(pool, scope, expression) == _texts(pool, scope, double_negation)
    assert _texts(pool, scope, {"and": [TEAM, {"metadata.x.y": 1}]}) == ["mine global level 2"]
    assert _texts(pool, scope, {"and": [TEAM, {"metadata.team": "t4"}]}) == []


def _statement(conn, scope: Scope, expression: dict) -> Statement:
    """The search statement of `expression`, as search_memories makes it (the
    planner's estimate of what the filter admits asked first, if not known)."""
    steps = search_memories(
        scope, ["words"], [_unit(random.Random(1))], 10, FUSION, matching=parse(expression)
    )
    statement = next(steps)
    while "WITH q AS" not in statement.sql:
        with conn.cursor(row_factory=statement.rows) as cur:
            statement = steps.send(cur.execute(statement.sql, statement.params).fetchall())
    return statement


def test_the_search_statement_can_read_the_scoped_index(pool, ids):
    app, user = ids["app"], ids["user_id"]
    contained = Jsonb({scope_key(app, user, "global"): {"team": "t3"}})
    with pool.connection() as conn, conn.transaction(force_rollback=True):
        statement = _statement(conn, Scope(app, user, "p1"), TEAM)
        # The test as the search writes it is the index's expression: among many
        # live rows of other users (rolled back), the planner answers it there.
        conn.execute(
            "INSERT INTO memories (app, user_id, scope, kind, text, observed_at, metadata) "
            "SELECT %s, 'filler-' || g, 'global', 'fact', 'filler', now(), %s "
            "FROM generate_series(1, 5000) g",
            (app, Jsonb({"team": "t3"})),
        )
        conn.execute("ANALYZE memories")
        (plan,) = conn.execute(
            "EXPLAIN (FORMAT JSON) SELECT m.id FROM memories m "
            f"WHERE m.valid_to IS NULL AND {SCOPED_METADATA} @> %s",
            (contained,),
        ).fetchone()
        assert "memories_scoped_metadata" in json.dumps(plan)
        # The sorted vector ranking and the full text, each for the global rows and p1's.
        assert statement.sql.count(f"{SCOPED_METADATA} @> ") == 4
        # Equalities alone: one plan for any user and value, made once per connection.
        assert statement.generic_plan is True
        ranged = {"and": [TEAM, {"metadata.level": {"gte": 2}}]}
        assert _statement(conn, Scope(app, user), ranged).generic_plan is False
        # A filter without an equality at its top level is read as before.
        plain = _statement(conn, Scope(app, user), {"metadata.level": {"gte": 2}})
        assert "jsonb_set" not in plain.sql
        assert plain.generic_plan is False
    # Not sorted (never selective): the HNSW walk's own filter.
    walked = replace(FUSION, exact_below=0)
    steps = search_memories(
        Scope(app, user), ["w"], [_unit(random.Random(1))], 10, walked, matching=parse(TEAM)
    )
    assert "jsonb_set" not in next(steps).sql


def test_a_filter_of_equalities_alone_is_planned_once_per_connection(pool, ids):
    app, user = ids["app"], ids["user_id"]
    with pool.connection() as conn:
        for n in range(3):
            _insert(conn, app, user, f"team t3 number {n}", {"team": "t3"})
        _insert(conn, app, user, "team t4", {"team": "t4"})
    scope = Scope(app, user)
    prepared = (
        "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements "
        "WHERE statement LIKE %s"
    )
    with pool.connection() as conn:
        # A pooled connection may hold the statement from an earlier search.
        before = {
            name: (generic, custom)
            for name, generic, custom in conn.execute(prepared, (f"%{SCOPED_METADATA}%",))
        }
        conn.commit()
        # As the API runs it: in the connection's transaction, then committed.
        texts = []
        for team in ("t3", "t4", "t3"):
            steps = search_memories(
                scope,
                ["w"],
                [_unit(random.Random(1))],
                10,
                FUSION,
                matching=parse({"metadata.team": team}),
            )
            found, _ = run(conn, steps)
            conn.commit()
            texts.append(sorted(memory.text for memory, _ in found))
        after = conn.execute(prepared, (f"%{SCOPED_METADATA}%",)).fetchall()
    plans = [
        (generic - before.get(name, (0, 0))[0], custom - before.get(name, (0, 0))[1])
        for name, generic, custom in after
        if (generic, custom) != before.get(name)
    ]
    assert texts == [
        ["team t3 number 0", "team t3 number 1", "team t3 number 2"],
        ["team t4"],
        ["team t3 number 0", "team t3 number 1", "team t3 number 2"],
    ]
    assert plans == [(3, 0)]
