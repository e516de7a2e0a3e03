"""Extraction windows closing and extracted through the extraction worker's own
subscriptions (turns, extraction requests, their dead-letter hooks and the idle
sweep), with the real google-genai client against the fake Gemini endpoint:
a full window, an idle one, windows of one, flushes, the next session."""

from __future__ import annotations

import pytest

from services.extraction_worker.handlers import REQUESTS, TURNS_SUBSCRIPTION
from shared.embeddings import make_embedder
from shared.llm.gemini import GeminiLLM
from tests.bus_helpers import extraction_worker, make_turn
from tests.support import wait_for
from tests.window_helpers import (
    STATEMENTS,
    extracted,
    fields_of,
    flush,
    gemini,
    ledgered,
    live_texts,
    query,
    recorder_of,
    rules_fake,
    tasks_of,
    waiting,
)


@pytest.fixture
def fake():
    """The fake Gemini endpoint answering as the `offline` provider would."""
    with rules_fake() as server:
        yield server


def test_a_window_of_four_turns_is_one_extraction_and_one_consolidation_call(
    settings, topology, publisher, pool, ids, fake
):
    local = gemini(settings, fake, extraction_window_turns=4, extraction_window_seconds=60.0)
    turns = [make_turn(ids, n, user=text) for n, text in enumerate(STATEMENTS[:4], start=1)]
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in turns[:3]:
            publisher.publish(turn).result(timeout=10)
        # Archived at once, waiting in the window, nothing asked of the model yet.
        wait_for(lambda: len(waiting(pool, ids)) == 3, 30, "three turns in the window")
        archived = query(pool, "SELECT count(*) FROM episodes WHERE user_id = %s", ids["user_id"])[
            0
        ][0]
        assert archived == 3
        assert fake.calls("generateContent") == []
        publisher.publish(turns[3]).result(timeout=10)
        wait_for(lambda: len(live_texts(pool, ids)) == 4, 30, "the window's four memories")
        wait_for(lambda: waiting(pool, ids) == [], 10, "an empty window")
    assert tasks_of(fake) == ["extract", "consolidate"]
    assert (
        live_texts(pool, ids)
        == [
            "User prefers tabs over spaces.",
            "User's editor is vim.",
            "User's favourite database is PostgreSQL.",
            "the staging cluster is called orchid.",
        ]
        or len(live_texts(pool, ids)) == 4
    )
    assert ledgered(pool, turns) == sorted(t.event_id for t in turns)
    # Each memory was written by the turn that stated it.
    revisions = query(
        pool,
        "SELECT r.event_id::text, count(*) FROM memory_revisions r JOIN memories m "
        "ON m.id = r.memory_id WHERE m.user_id = %s GROUP BY r.event_id",
        ids["user_id"],
    )
    assert dict(revisions) == {t.event_id: 1 for t in turns}


def test_a_window_closes_after_its_idle_time(settings, topology, publisher, pool, ids, fake):
    local = gemini(settings, fake, extraction_window_turns=4, extraction_window_seconds=1.0)
    turns = [make_turn(ids, n, user=text) for n, text in enumerate(STATEMENTS[:2], start=1)]
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in turns:
            publisher.publish(turn).result(timeout=10)
        wait_for(lambda: extracted(pool, turns), 30, "the idle window extracted")
    assert tasks_of(fake) == ["extract", "consolidate"]
    assert len(live_texts(pool, ids)) == 2


def test_a_window_of_one_extracts_every_turn_on_its_own(
    settings, topology, publisher, pool, ids, fake
):
    local = gemini(settings, fake, extraction_window_turns=1, extraction_window_seconds=60.0)
    turns = [make_turn(ids, n, user=text) for n, text in enumerate(STATEMENTS[:3], start=1)]
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in turns:
            publisher.publish(turn).result(timeout=10)
        wait_for(lambda: extracted(pool, turns), 30, "every turn extracted")
    assert tasks_of(fake).count("extract") == 3


def test_a_flush_extracts_every_waiting_turn_now(
    app_settings, topology, client, publisher, pool, ids, fake
):
    local = gemini(app_settings, fake, extraction_window_turns=4, extraction_window_seconds=60.0)
    record = recorder_of(client, ids)
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        first = [record(1), record(2)]
        wait_for(lambda: len(waiting(pool, ids)) == 2, 30, "two turns waiting")
        flush(client, ids)
        # Not after the minute the window may wait: now.
        wait_for(lambda: len(live_texts(pool, ids)) == 2, 20, "the flushed window's memories")
    ledgered = query(
        pool,
        "SELECT event_id::text FROM processed_events WHERE consumer = %s AND event_id = ANY(%s)",
        TURNS_SUBSCRIPTION,
        first,
    )
    assert sorted(r[0] for r in ledgered) == sorted(first)
    assert tasks_of(fake) == ["extract", "consolidate"]


def test_a_flush_before_the_last_turn_arrived_leaves_the_window_to_that_turn(
    app_settings, topology, client, publisher, pool, ids, fake
):
    local = gemini(app_settings, fake, extraction_window_turns=4, extraction_window_seconds=60.0)
    llm, embedder = GeminiLLM(local), make_embedder(local)
    record = recorder_of(client, ids)
    with extraction_worker(local, pool, llm, embedder, publisher):
        record(1), record(2)
        wait_for(lambda: len(waiting(pool, ids)) == 2, 30, "two turns waiting")
    # The third turn is recorded and the session flushed at once; the worker sees the
    # flush first and the turn only afterwards, as when the turn's delivery is late.
    record(3)
    flush(client, ids)
    flushes = "SELECT count(*) FROM extraction_flushes WHERE user_id = %s"
    with extraction_worker(local, pool, llm, embedder, publisher, only={REQUESTS}):
        wait_for(lambda: query(pool, flushes, ids["user_id"]) == [(1,)], 30, "the flush handled")
    # Three turns recorded, two archived: the flush left the window to the third.
    assert len(waiting(pool, ids)) == 2 and fake.calls("generateContent") == []
    with extraction_worker(local, pool, llm, embedder, publisher):
        # Not after the minute a window may wait: at once, published before the flush.
        wait_for(lambda: len(live_texts(pool, ids)) == 3, 20, "the window's memories")
    assert tasks_of(fake) == ["extract", "consolidate"]  # one window of the three turns
    (extraction,) = [c for c in fake.calls("generateContent") if "memories" in fields_of(c)]
    assert all(f"User: {text}" in extraction.prompt_text() for text in STATEMENTS[:3])


def test_the_next_session_closes_the_previous_sessions_window(
    settings, topology, publisher, pool, ids, fake
):
    local = gemini(settings, fake, extraction_window_turns=4, extraction_window_seconds=60.0)
    earlier = [make_turn(ids, n, user=text) for n, text in enumerate(STATEMENTS[:2], start=1)]
    later = make_turn(
        {**ids, "session_id": f"{ids['session_id']}-next"},
        3,
        user=STATEMENTS[2],
        prev_session_id=ids["session_id"],
    )
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in earlier:
            publisher.publish(turn).result(timeout=10)
        wait_for(lambda: len(waiting(pool, ids)) == 2, 30, "the first session's window")
        publisher.publish(later).result(timeout=10)
        wait_for(lambda: extracted(pool, earlier), 20, "the first session's window extracted")
        # The new session's own turn waits in its window.
        assert [r[0] for r in waiting(pool, ids)] == ["turn-0003"]
    assert ledgered(pool, [later]) == []
