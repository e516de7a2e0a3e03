"""The per-query weights of hybrid search's fusion (`Fusion`, `shared.db.search`)
on the real Postgres/pgvector: each ranking's weight scaled by how far its 1st
row stands out from its 5th, the vector ranking's also by how many of its top 5
the full-text ranking found; the same order and scores whenever asked."""

import math

import pytest

from shared.db.run import run
from shared.db.search import search_memories, vector_text
from shared.memory.ranking import Fusion, Scope
from tests.conftest import EMBEDDING_DIM

QUERY = "quartz zircon"
K = 20


def _at_cosine(cosine: float, axis: int) -> list[float]:
    """A unit vector whose cosine with the query's (the first basis vector) is `cosine`."""
    vector = [0.0] * EMBEDDING_DIM
    vector[0], vector[axis] = cosine, math.sqrt(1 - cosine * cosine)
    return vector


def _idf(rows_with_word: int, rows: int) -> float:
    """BM25's weight of a word, as the full-text ranking computes it."""
    return math.log(1 + (rows - rows_with_word + 0.5) / (rows_with_word + 0.5))


def _store(pool, ids, rows: dict[str, tuple[str, float]]) -> dict[str, str]:
    """Global memories of the test's user: name -> (text, cosine with the query);
    returns id -> name."""
    names = {}
    with pool.connection() as conn:
        for axis, (name, (text, cosine)) in enumerate(rows.items(), start=1):
            row = conn.execute(
                "INSERT INTO memories (app, user_id, scope, kind, text, embedding, observed_at) "
                "VALUES (%s, %s, 'global', 'fact', %s, %s::vector, now()) RETURNING id::text",
                (ids["app"], ids["user_id"], text, vector_text(_at_cosine(cosine, axis))),
            ).fetchone()
            names[row[0]] = name
    return names


def _search(pool, ids, names, fusion) -> list[tuple[str, float, int | None, int | None]]:
    """(name, score, vector rank, text rank) of every row, best first."""
    query = [1.0] + [0.0] * (EMBEDDING_DIM - 1)
    scope = Scope(ids["app"], ids["user_id"])
    with pool.connection() as conn:
        found, _ = run(conn, search_memories(scope, [QUERY], [query], 10, fusion))
    return [(names[m.id], r.score, r.vector_rank, r.text_rank) for m, r in found]


def _expected_scores(found, wv: float, wt: float) -> list[float]:
    return [
        (wv / (K + vrank) if vrank else 0.0) + (wt / (K + trank) if trank else 0.0)
        for _, _, vrank, trank in found
    ]


def test_a_vector_top_that_full_text_does_not_confirm_gives_way_to_a_text_top_that_stands_out(
    pool, ids
):
    # The vector ranking's top 5 share no word with the query; the full text's 1st
    # row holds both words, its 2nd to 5th only "quartz" (fewer times, lower).
    rows = {f"v{i}": (f"unrelated note {i}", 0.9 - 0.1 * (i - 1)) for i in range(1, 6)}
    rows["t1"] = ("quartz zircon", 0.2)
    rows |= {f"t{i}": (" ".join(["quartz"] * (6 - i)), 0.25 - 0.05 * i) for i in range(2, 6)}
    names = _store(pool, ids, rows)
    fusion = Fusion(vector_weight=6.0)
    found = _search(pool, ids, names, fusion)

    assert [name for name, *_ in found] == [f"t{i}" for i in range(1, 6)] + [
        f"v{i}" for i in range(1, 6)
    ]
    assert [(vrank, trank) for _, _, vrank, trank in found][:1] == [(6, 1)]
    # None of the vector's top 5 in the text ranking: its weight is the floor, 1%.
    wv = 6.0 * 0.01
    # The text ranking: 1 - r5 / r1, r5 "quartz" alone and r1 both words, of 10 rows.
    quartz, zircon = _idf(5, 10), _idf(1, 10)
    wt = 0.6 * (1 - quartz / (quartz + zircon))
    assert [score for _, score, *_ in found] == pytest.approx(
        _expected_scores(found, wv, wt), rel=1e-6
    )
    # The same weights for every query (`top` 0) put the vector's rows first.
    fixed = _search(pool, ids, names, Fusion(vector_weight=6.0, top=0))
    assert [name for name, *_ in fixed][:5] == ["v1", "v2", "v3", "t1", "v4"]
    assert [score for _, score, *_ in fixed] == pytest.approx(
        _expected_scores(fixed, 6.0, 0.6), rel=1e-6
    )


def test_a_flat_text_ranking_gives_way_to_a_vector_top_that_stands_out_and_agrees(pool, ids):
    # Every row says "quartz" once: the text ranking's 1st and 5th weigh the same.
    # The vector's top 5 (distances 0.1 to 0.5) are all in the text ranking.
    rows = {f"a{i}": (f"quartz alpha {i}", 0.9 - 0.1 * (i - 1)) for i in range(1, 6)}
    rows |= {f"b{i}": (f"quartz beta {i}", 0.3 - 0.05 * i) for i in range(1, 6)}
    names = _store(pool, ids, rows)
    found = _search(pool, ids, names, Fusion(vector_weight=0.4))

    assert [name for name, *_ in found] == [f"a{i}" for i in range(1, 6)] + [
        f"b{i}" for i in range(1, 6)
    ]
    wv = 0.4 * 1.0 * (1 - 0.1 / 0.5)  # all of its top 5 agree; 1 - d1 / d5
    wt = 0.6 * 0.01  # no gap: the floor
    assert [score for _, score, *_ in found] == pytest.approx(
        _expected_scores(found, wv, wt), rel=1e-5
    )


def test_the_same_query_on_the_same_rows_gives_the_same_order_and_scores(pool, ids):
    rows = {f"r{i}": (f"quartz note {i}" + " zircon" * (i % 2), 0.95 - 0.07 * i) for i in range(12)}
    names = _store(pool, ids, rows)
    fusion = Fusion(vector_weight=0.4)
    first = _search(pool, ids, names, fusion)
    assert len(first) == 10
    assert _search(pool, ids, names, fusion) == first
