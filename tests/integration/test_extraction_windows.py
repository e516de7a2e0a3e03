"""Extraction windows through the extraction worker's own subscriptions (turns,
extraction requests, their dead-letter hooks and the idle sweep), with the real
google-genai client against the fake Gemini endpoint answering as the `rules`
provider would (`tests.fake_gemini_model`)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from services.extraction_worker.handlers import REQUESTS, TURNS_CONSUMER
from shared.bus.dlq import DeadLetterQueues
from shared.embeddings import make_embedder
from shared.llm.gemini import GeminiLLM
from tests.bus_helpers import Recorder, extraction_worker, make_turn
from tests.fake_gemini import FakeGemini, json_reply
from tests.fake_gemini_model import rules_model
from tests.support import run_cli, wait_for

STATEMENTS = [
    "My editor is vim.",
    "I prefer tabs over spaces.",
    "My favourite database is PostgreSQL.",
    "Remember that the staging cluster is called orchid.",
    "My timezone is CET.",
]


@pytest.fixture
def fake():
    with FakeGemini() as server:
        server.defaults["generateContent"] = rules_model
        yield server


def _gemini(settings, fake, **updates):
    return settings.model_copy(
        update={
            "llm_provider": "gemini",
            "gemini_api_key": SecretStr("test-key"),
            "gemini_base_url": fake.url,
            "llm_retry_initial_seconds": 0.01,
            "llm_retry_seconds": 0.2,
            "llm_timeout_seconds": 2.0,
            **updates,
        }
    )


def _tasks(fake):
    """The task of each generateContent call so far: extract, consolidate, ..."""
    names = []
    for call in fake.calls("generateContent"):
        schema = call.body.get("generationConfig", {}).get("responseJsonSchema") or {}
        fields = schema.get("properties", {})
        names.append("extract" if "memories" in fields else "consolidate")
    return names


def _rows(pool, sql, *params):
    with pool.connection() as conn:
        return conn.execute(sql, params).fetchall()


def _live_texts(pool, ids):
    rows = _rows(
        pool,
        "SELECT text FROM memories WHERE app = %s AND user_id = %s AND valid_to IS NULL",
        ids["app"],
        ids["user_id"],
    )
    return sorted(r[0] for r in rows)


def _ledgered(pool, events):
    rows = _rows(
        pool,
        "SELECT event_id::text FROM processed_events WHERE consumer = %s AND event_id = ANY(%s)",
        TURNS_CONSUMER,
        [e.event_id for e in events],
    )
    return sorted(r[0] for r in rows)


def _waiting(pool, ids):
    return _rows(
        pool,
        "SELECT turn_id FROM extraction_pending WHERE app = %s AND user_id = %s",
        ids["app"],
        ids["user_id"],
    )


def test_a_window_of_four_turns_is_one_extraction_and_one_consolidation_call(
    settings, topology, publisher, pool, ids, fake
):
    local = _gemini(settings, fake, extraction_window_turns=4, extraction_window_seconds=60.0)
    turns = [make_turn(ids, n, user=text) for n, text in enumerate(STATEMENTS[:4], start=1)]
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in turns[:3]:
            publisher.publish(turn).result(timeout=10)
        # Archived at once, waiting in the window, nothing asked of the model yet.
        wait_for(lambda: len(_waiting(pool, ids)) == 3, 30, "three turns in the window")
        archived = _rows(pool, "SELECT count(*) FROM episodes WHERE user_id = %s", ids["user_id"])[
            0
        ][0]
        assert archived == 3
        assert fake.calls("generateContent") == []
        publisher.publish(turns[3]).result(timeout=10)
        wait_for(lambda: len(_live_texts(pool, ids)) == 4, 30, "the window's four memories")
        wait_for(lambda: _waiting(pool, ids) == [], 10, "an empty window")
    assert _tasks(fake) == ["extract", "consolidate"]
    assert (
        _live_texts(pool, ids)
        == [
            "User prefers tabs over spaces.",
            "User's editor is vim.",
            "User's favourite database is PostgreSQL.",
            "the staging cluster is called orchid.",
        ]
        or len(_live_texts(pool, ids)) == 4
    )
    assert _ledgered(pool, turns) == sorted(t.event_id for t in turns)
    # Each memory was written by the turn that stated it.
    revisions = _rows(
        pool,
        "SELECT r.event_id::text, count(*) FROM memory_revisions r JOIN memories m "
        "ON m.id = r.memory_id WHERE m.user_id = %s GROUP BY r.event_id",
        ids["user_id"],
    )
    assert dict(revisions) == {t.event_id: 1 for t in turns}


def test_a_window_that_never_gets_a_valid_reply_dead_letters_each_turn_to_replay_alone(
    settings, topology, publisher, pool, ids, fake
):
    local = _gemini(settings, fake, extraction_window_turns=2, extraction_window_seconds=1.0)
    bad = {  # valid JSON, not the schema: a memory of an unknown kind
        "memories": [
            {
                "turn": "t1",
                "entity_name": "x",
                "kind": "opinion",
                "scope": "global",
                "project_id": "",
                "text": "User likes x.",
            }
        ]
    }
    fake.defaults["generateContent"] = lambda request: json_reply(bad)
    turns = [make_turn(ids, n, user=text) for n, text in enumerate(STATEMENTS[:2], start=1)]
    recorder = Recorder()
    queues = DeadLetterQueues(local)
    llm, embedder = GeminiLLM(local), make_embedder(local)
    with extraction_worker(local, pool, llm, embedder, publisher, recorder):
        for turn in turns:
            publisher.publish(turn).result(timeout=10)
        letters = wait_for(
            lambda: (found := queues.peek(TURNS_CONSUMER)) and len(found) == 2 and found,
            120,
            "both turns' dead letters",
        )
        wait_for(lambda: queues.peek(REQUESTS), 30, "the request's own dead letter")
    assert sorted(letter.event_id for letter in letters) == sorted(t.event_id for t in turns)
    for letter in letters:
        assert "extraction window (2 turns) failed" in letter.reason
        assert "no usable reply" in letter.reason
        assert letter.event_type == "turn.recorded.v1"
    request_attempts = [
        o for label, _a, o in recorder.calls if label not in ("turn-0001", "turn-0002")
    ]
    assert len(request_attempts) == local.max_delivery_attempts
    assert all(o.startswith("error:") for o in request_attempts)
    # The turns were archived on arrival; nothing else of them was written.
    assert _rows(pool, "SELECT count(*) FROM episodes WHERE user_id = %s", ids["user_id"]) == [(2,)]
    assert _live_texts(pool, ids) == []
    assert _waiting(pool, ids) == []
    assert _ledgered(pool, turns) == []

    # Replayed one by one, with a model that answers: each turn is extracted once.
    fake.defaults["generateContent"] = rules_model
    with extraction_worker(local, pool, llm, embedder, publisher):
        for n, turn in enumerate(turns, start=1):
            replay = run_cli(local, "dlq", "replay", TURNS_CONSUMER, "--event-id", turn.event_id)
            assert replay.returncode == 0, replay.stderr
            # Alone in its window, it closes when no other turn comes.
            wait_for(lambda n=n: len(_live_texts(pool, ids)) == n, 60, f"turn {n}'s memory")
    assert _ledgered(pool, turns) == sorted(t.event_id for t in turns)
    assert len(_live_texts(pool, ids)) == 2
    assert _rows(pool, "SELECT count(*) FROM episodes WHERE user_id = %s", ids["user_id"]) == [(2,)]
