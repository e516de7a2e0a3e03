"""The archive's search keys (an episode with its session's neighbouring turns and
its date) and the full-text weighting that depends on the searching scope's rows
only, on the real Postgres with the `hash` embeddings."""

import dataclasses
import random
import shutil
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.rows import dict_row

from shared.db.archive_search import search_episodes
from shared.db.episodes import EPISODE_TSV, Episode, Episodes
from shared.db.migrate import discover, migrate
from shared.db.run import run
from shared.embeddings import HashEmbedder
from shared.memory.episode_keys import when_in_words
from shared.memory.ranking import Fusion, Scope
from tests.support import run_cli

SAID_AT = datetime(2023, 5, 9, 14, 0, tzinfo=UTC)  # a Tuesday afternoon
DIALOGUE = [
    ("I finally went to that pottery class on Saturday.", "Oh nice, how was it?"),
    ("Loved it, the clay was so calming.", "That sounds lovely."),
    ("My sister wants to join next time.", "You two should go together."),
    ("Maybe. The teacher was patient with us.", "Good teachers make all the difference."),
    ("Anyway, work is busy this week.", "Hang in there."),
    ("Thanks, talk soon.", "Bye!"),
]


def _episode(ids, n, user_id=None, session_id=None):
    user, assistant = DIALOGUE[n]
    return Episode(
        app=ids["app"],
        user_id=user_id or ids["user_id"],
        project_id="",
        session_id=session_id or ids["session_id"],
        turn_id=f"t{n}",
        event_id=str(uuid.uuid4()),
        user_text=user,
        assistant_text=assistant,
        tool_events=[],
        created_at=SAID_AT + timedelta(minutes=n),
    )


def _floats(vector_text: str) -> list[float]:
    return [float(x) for x in vector_text.strip("[]").split(",")]


def _stored(connect, ids, session_id=None):
    """The session's episodes as stored; `connect` gives a connection to read them."""
    with connect() as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            "SELECT turn_id, text, context, embedding::text AS embedding FROM episodes "
            "WHERE app = %s AND user_id = %s AND session_id = %s ORDER BY turn_id",
            (ids["app"], ids["user_id"], session_id or ids["session_id"]),
        )
        return cur.fetchall()


def test_each_turn_is_keyed_with_its_neighbours_and_date_whatever_order_they_arrive(pool, ids):
    embedder = HashEmbedder(768)
    order = list(range(len(DIALOGUE)))
    random.Random(7).shuffle(order)
    with pool.connection() as conn:
        for n in order:  # a late turn goes between its neighbours
            assert Episodes(conn).archive_locally(
                _episode(ids, n), embedder.embed, neighbours=2, dated=True
            )
    stored = _stored(pool.connection, ids)
    texts = [row["text"] for row in stored]
    when = when_in_words(SAID_AT)
    assert when == "Tuesday 9 May 2023, afternoon"
    for n, row in enumerate(stored):
        before, after = texts[max(0, n - 2) : n], texts[n + 1 : n + 3]
        assert row["context"] == "\n".join([when, *before, *after]), n
        key = "\n".join([when, *before, texts[n], *after])
        assert _floats(row["embedding"]) == pytest.approx(embedder.embed([key])[0], abs=1e-6), n
    assert stored[1]["text"] == (
        "User: Loved it, the clay was so calming.\nAssistant: That sounds lovely."
    )

    # A redelivered turn is archived once and changes no key.
    with pool.connection() as conn:
        assert not Episodes(conn).archive_locally(
            _episode(ids, 3), embedder.embed, neighbours=2, dated=True
        )
    assert _stored(pool.connection, ids) == stored


def test_turn_only_keys_hold_the_text_alone(pool, ids):
    embedder = HashEmbedder(768)
    with pool.connection() as conn:
        for n in range(3):
            Episodes(conn).archive_locally(
                _episode(ids, n), embedder.embed, neighbours=0, dated=False
            )
    for row in _stored(pool.connection, ids):
        assert row["context"] == ""
        expected = embedder.embed([row["text"]])[0]
        assert _floats(row["embedding"]) == pytest.approx(expected, abs=1e-6)


def _search(pool, ids, query, embedder, fusion=None):
    scope = Scope(ids["app"], ids["user_id"])
    fusion = fusion or Fusion(text_scan=50)
    with pool.connection() as conn:
        found = run(
            conn, search_episodes(scope, query, embedder.embed_queries([query])[0], 10, fusion)
        )
    return [(fields["turn_id"], ranked) for fields, ranked in found]


def test_the_reply_that_answers_is_found_by_the_words_of_the_turn_before(pool, ids):
    embedder = HashEmbedder(768)
    question = "What did I think of the pottery class?"
    with pool.connection() as conn:
        for n in range(len(DIALOGUE)):
            Episodes(conn).archive_locally(
                _episode(ids, n), embedder.embed, neighbours=2, dated=True
            )
            other = _episode(ids, n, session_id=ids["session_id"] + "-turn-only")
            Episodes(conn).archive_locally(other, embedder.embed, neighbours=0, dated=False)
    text_only = Fusion(vector_weight=0.0, text_weight=1.0, text_scan=50)
    both = _search(pool, ids, question, embedder, text_only)
    # The reply ("Loved it, the clay was so calming") shares no word with the
    # question: only its key, holding the turn before, finds it.
    found = [turn for turn, ranked in both if ranked.text_rank is not None]
    assert found.count("t1") == 1
    assert found[:2] == ["t0", "t0"]


def _bulk_load(pool, app, user_id, rows, words):
    """Another tenant's archive, loaded in one statement: every row holds `words`."""
    tsv = EPISODE_TSV.format(text="x.text", context="''")
    with pool.connection() as conn:
        conn.execute(
            "INSERT INTO episodes (app, user_id, session_id, turn_id, event_id, user_text, "
            f"assistant_text, text, context, tsv, created_at) SELECT %s, %s, 's', 't' || i, "
            f"gen_random_uuid(), x.text, '', x.text, '', {tsv}, now() "
            "FROM generate_series(1, %s) i, LATERAL (SELECT %s || ' ' || i AS text) x",
            (app, user_id, rows, words),
        )


def test_a_ranking_is_the_same_across_analyze_and_another_tenants_bulk_load(pool, ids):
    embedder = HashEmbedder(768)
    with pool.connection() as conn:
        for n in range(len(DIALOGUE)):
            Episodes(conn).archive_locally(
                _episode(ids, n), embedder.embed, neighbours=2, dated=True
            )
    question = "Was the teacher patient with my sister?"
    first = _search(pool, ids, question, embedder)
    assert [turn for turn, ranked in first if ranked.text_rank == 1] == ["t3"]
    # Another app's user writes 3,000 turns full of the question's words, and the
    # table's statistics are read again: neither moves this user's ranking.
    _bulk_load(pool, f"{ids['app']}-other", "bulk", 3000, "pottery teacher patient sister")
    with pool.connection() as conn:
        conn.execute("ANALYZE episodes")
    assert _search(pool, ids, question, embedder) == first


def test_a_word_in_more_than_the_stop_share_of_the_users_rows_selects_none(pool, ids):
    # 60 turns of this user say "pottery"; one says "kiln" as well.
    _bulk_load(pool, ids["app"], ids["user_id"], 60, "pottery")
    with pool.connection() as conn:
        conn.execute(
            "UPDATE episodes SET text = text || ' kiln', tsv = tsv || to_tsvector('english', "
            "'kiln') WHERE app = %s AND user_id = %s AND turn_id = 't7'",
            (ids["app"], ids["user_id"]),
        )
    text_only = Fusion(vector_weight=0.0, text_weight=1.0, text_scan=100, max_frequency=0.5)
    found = _search(pool, ids, "pottery kiln", HashEmbedder(768), text_only)
    # "pottery" is in all 60 of the user's rows, more than half (and more than a
    # tenth of the scan limit): only "kiln" selects.
    assert [turn for turn, ranked in found if ranked.text_rank is not None] == ["t7"]
    every = Fusion(vector_weight=0.0, text_weight=1.0, text_scan=100, max_frequency=1.0)
    wider = _search(pool, ids, "pottery kiln", HashEmbedder(768), every)
    texts = [turn for turn, ranked in wider if ranked.text_rank is not None]
    assert texts[0] == "t7" and len(texts) == 10


def test_the_backfill_keys_an_archive_from_before_the_keys_session_by_session(
    settings, fresh_database, tmp_path
):
    # A database at migration 0007, with turns of two sessions archived then.
    older = tmp_path / "migrations"
    older.mkdir()
    for migration in discover():
        if migration.version < 8:
            shutil.copy(migration.path, older / migration.path.name)
    migrate(fresh_database, 768, directory=older)
    with psycopg.connect(fresh_database) as conn:
        for session in ("s1", "s2"):
            for n, (user, assistant) in enumerate(DIALOGUE):
                conn.execute(
                    "INSERT INTO episodes (app, user_id, session_id, turn_id, event_id, "
                    "user_text, assistant_text, text, created_at) "
                    "VALUES ('a', 'u', %s, %s, gen_random_uuid(), %s, %s, %s, %s)",
                    (
                        session,
                        f"t{n}",
                        user,
                        assistant,
                        f"User: {user}\nAssistant: {assistant}",
                        SAID_AT + timedelta(minutes=n),
                    ),
                )
    on_it = settings.model_copy(update={"database_url": fresh_database})
    refused = run_cli(on_it, "archive", "backfill-keys")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        "agent-memory archive: the database has no episode keys yet: run `agent-memory "
        "migrate` first (migration 0008_episode_keys.sql)\n"
    )

    migrate(fresh_database, 768)
    done = run_cli(on_it, "archive", "backfill-keys", "--batch", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("keyed 12 episodes in ")
    assert done.stderr.splitlines() == [
        "keyed 6 of 12 episodes",
        "keyed 12 of 12 episodes",
    ]
    ids = {"app": "a", "user_id": "u"}

    def connect():
        return psycopg.connect(fresh_database)

    first = _stored(connect, ids, "s1")
    texts = [row["text"] for row in first]
    assert first[3]["context"] == "\n".join([when_in_words(SAID_AT), *texts[1:3], *texts[4:6]])
    assert _stored(connect, ids, "s2") == first

    # Turns archived without a key meanwhile (a worker of the release before): a
    # second run keys those, and only those.
    with psycopg.connect(fresh_database) as conn:
        conn.execute(
            "UPDATE episodes SET context = NULL WHERE session_id = 's2' AND turn_id = 't5'"
        )
    again = run_cli(on_it, "archive", "backfill-keys")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("keyed 1 episode in ")
    assert _stored(connect, ids, "s2") == first


def test_an_archive_search_returns_each_hit_with_the_turns_around_it_once(client, pool, ids):
    embedder = HashEmbedder(768)
    with pool.connection() as conn:
        for n in range(len(DIALOGUE)):
            Episodes(conn).archive_locally(
                _episode(ids, n), embedder.embed, neighbours=2, dated=True
            )
    body = {"user_id": ids["user_id"], "query": "patient teacher sister", "k": 2}
    plain = client.post("/v1/archive:search", json=body)
    assert plain.status_code == 200, plain.text
    hits = plain.json()["episodes"]
    # "sister" (t2) and "patient teacher" (t3): two adjacent turns.
    assert sorted(h["turn_id"] for h in hits) == ["t2", "t3"]
    assert [h["context"] for h in hits] == [[], []]

    found = client.post("/v1/archive:search", json={**body, "context_turns": 2})
    assert found.status_code == 200, found.text
    first, second = found.json()["episodes"]
    assert [h["turn_id"] for h in (first, second)] == [h["turn_id"] for h in hits]
    around = {
        h["turn_id"]: [(t["turn_id"], t["offset"]) for t in h["context"]] for h in (first, second)
    }
    # Each hit's neighbours within two turns, in order, none of them a hit, and a
    # turn two hits share listed with the better one only.
    assert [first["turn_id"], second["turn_id"]] == ["t3", "t2"]
    assert around == {"t3": [("t1", -2), ("t4", 1), ("t5", 2)], "t2": [("t0", -2)]}
    texts = {row["turn_id"]: row["text"] for row in _stored(pool.connection, ids)}
    assert [t["text"] for t in first["context"]] == [texts["t1"], texts["t4"], texts["t5"]]


def test_a_period_the_question_names_is_searched_first(client, pool, ids):
    embedder = HashEmbedder(768)
    sessions = {
        "may": datetime(2023, 5, 20, 18, tzinfo=UTC),
        "june": datetime(2023, 6, 3, 9, tzinfo=UTC),
    }
    with pool.connection() as conn:
        for name, at in sessions.items():
            for n in range(2):
                episode = _episode(ids, n, session_id=f"{ids['session_id']}-{name}")
                episode = dataclasses.replace(episode, created_at=at + timedelta(minutes=n))
                Episodes(conn).archive_locally(episode, embedder.embed, neighbours=2, dated=True)
    body = {"user_id": ids["user_id"], "query": "What did I do last month?", "k": 3}
    asked = {**body, "asked_at": "2023-06-10T12:00:00Z"}
    found = client.post("/v1/archive:search", json=asked)
    assert found.status_code == 200, found.text
    answer = found.json()
    assert answer["period"] == {
        "phrase": "last month",
        "start": "2023-05-01T00:00:00.000000Z",
        "end": "2023-06-01T00:00:00.000000Z",
    }
    # May's two turns first, then the best of the rest up to k.
    sessions_found = [e["session_id"].rsplit("-", 1)[1] for e in answer["episodes"]]
    assert sessions_found == ["may", "may", "june"]
    # Read against the asking time; turned off, or given bounds, no period is read.
    for other in ({**asked, "read_period": False}, {**asked, "after": "2023-06-01T00:00:00Z"}):
        plain = client.post("/v1/archive:search", json=other).json()
        assert plain["period"] is None
    now = client.post("/v1/archive:search", json=body).json()["period"]
    assert now["phrase"] == "last month" and now["start"] > "2023-05-01"


RECOUNT = """
SELECT tbl, lexeme, count(*)::integer FROM (
    SELECT 'memories' AS tbl, l.lexeme FROM memories m, unnest(tsvector_to_array(m.tsv)) l(lexeme)
    WHERE m.app = %(app)s AND m.user_id = %(user_id)s AND m.valid_to IS NULL
    UNION ALL
    SELECT 'episodes', l.lexeme FROM episodes e, unnest(tsvector_to_array(e.tsv)) l(lexeme)
    WHERE e.app = %(app)s AND e.user_id = %(user_id)s
    UNION ALL  -- the rows themselves, under the empty lexeme
    SELECT 'memories', '' FROM memories m
    WHERE m.app = %(app)s AND m.user_id = %(user_id)s AND m.valid_to IS NULL
    UNION ALL
    SELECT 'episodes', '' FROM episodes e WHERE e.app = %(app)s AND e.user_id = %(user_id)s
) x GROUP BY tbl, lexeme ORDER BY tbl, lexeme"""
KEPT = """SELECT tbl, lexeme, rows FROM lexeme_counts
WHERE app = %(app)s AND user_id = %(user_id)s ORDER BY tbl, lexeme"""


def _counts(pool, ids):
    """The user's kept lexeme counts, and the same counted from their rows now."""
    with pool.connection() as conn:
        return conn.execute(KEPT, ids).fetchall(), conn.execute(RECOUNT, ids).fetchall()


def test_the_lexeme_counts_follow_every_write_and_go_with_the_user(client, pool, ids):
    embedder = HashEmbedder(768)
    with pool.connection() as conn:
        for n in range(len(DIALOGUE)):  # inserts, then the neighbours' keys updated
            Episodes(conn).archive_locally(
                _episode(ids, n), embedder.embed, neighbours=2, dated=True
            )
    kept, counted = _counts(pool, ids)
    assert kept == counted and ("episodes", "potteri", 3) in kept
    with pool.connection() as conn:
        first = conn.execute(
            "SELECT id::text FROM episodes WHERE app = %s AND user_id = %s AND turn_id = 't0'",
            (ids["app"], ids["user_id"]),
        ).fetchone()
        Episodes(conn).delete(ids["app"], ids["user_id"], [first[0]])  # as compaction does
    body = {
        "user_id": ids["user_id"],
        "scope": "global",
        "kind": "preference",
        "entity_name": "kiln",
    }
    created = client.post("/v1/memories", json={**body, "text": "Prefers a kiln at cone six."})
    assert created.status_code == 201, created.text
    memory_id = created.json()["memory"]["id"]
    updated = client.post("/v1/memories", json={**body, "text": "Prefers a kiln at cone ten."})
    assert updated.status_code == 201, updated.text
    assert updated.json()["action"] == "UPDATED"
    kept, counted = _counts(pool, ids)
    assert kept == counted and ("memories", "ten", 1) in kept
    assert client.delete(f"/v1/memories/{memory_id}", params={"user_id": ids["user_id"]}).json()[
        "deleted"
    ]
    kept, counted = _counts(pool, ids)
    # The memory deleted: its words are gone from the counts; then the user's are.
    assert kept == counted and not [row for row in kept if row[0] == "memories"]
    assert client.delete(f"/v1/users/{ids['user_id']}").status_code == 200
    assert _counts(pool, ids) == ([], [])
