"""Extraction windows through the extraction worker's own subscriptions (turns,
extraction requests, their dead-letter hooks and the idle sweep), with the real
google-genai client against the fake Gemini endpoint answering as the `rules`
provider would (`tests.fake_gemini_model`)."""

from __future__ import annotations

import uuid

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


def _extracted(pool, events):
    return len(_ledgered(pool, events)) == len(events)


def test_a_window_closes_after_its_idle_time(settings, topology, publisher, pool, ids, fake):
    local = _gemini(settings, fake, extraction_window_turns=4, extraction_window_seconds=1.0)
    turns = [make_turn(ids, n, user=text) for n, text in enumerate(STATEMENTS[:2], start=1)]
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in turns:
            publisher.publish(turn).result(timeout=10)
        wait_for(lambda: _extracted(pool, turns), 30, "the idle window extracted")
    assert _tasks(fake) == ["extract", "consolidate"]
    assert len(_live_texts(pool, ids)) == 2


def test_a_window_of_one_extracts_every_turn_on_its_own(
    settings, topology, publisher, pool, ids, fake
):
    local = _gemini(settings, fake, extraction_window_turns=1, extraction_window_seconds=60.0)
    turns = [make_turn(ids, n, user=text) for n, text in enumerate(STATEMENTS[:3], start=1)]
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in turns:
            publisher.publish(turn).result(timeout=10)
        wait_for(lambda: _extracted(pool, turns), 30, "every turn extracted")
    assert _tasks(fake).count("extract") == 3


def _recorder(client, ids):
    def record(n):
        body = {"user_id": ids["user_id"], "turn_id": f"turn-{n:04d}", "user": STATEMENTS[n - 1]}
        answer = client.post(
            f"/v1/sessions/{ids['session_id']}/turns", json={**body, "assistant": "Ok."}
        )
        assert answer.status_code == 202, answer.text
        return answer.json()["event_id"]

    return record


def _flush(client, ids):
    answer = client.post(
        f"/v1/sessions/{ids['session_id']}:flush", json={"user_id": ids["user_id"]}
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["session_id"] == ids["session_id"]


def test_a_flush_extracts_every_waiting_turn_now(
    app_settings, topology, client, publisher, pool, ids, fake
):
    local = _gemini(app_settings, fake, extraction_window_turns=4, extraction_window_seconds=60.0)
    record = _recorder(client, ids)
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        first = [record(1), record(2)]
        wait_for(lambda: len(_waiting(pool, ids)) == 2, 30, "two turns waiting")
        _flush(client, ids)
        # Not after the minute the window may wait: now.
        wait_for(lambda: len(_live_texts(pool, ids)) == 2, 20, "the flushed window's memories")
    ledgered = _rows(
        pool,
        "SELECT event_id::text FROM processed_events WHERE consumer = %s AND event_id = ANY(%s)",
        TURNS_CONSUMER,
        first,
    )
    assert sorted(r[0] for r in ledgered) == sorted(first)
    assert _tasks(fake) == ["extract", "consolidate"]


def test_a_flush_before_the_last_turn_arrived_leaves_the_window_to_that_turn(
    app_settings, topology, client, publisher, pool, ids, fake
):
    local = _gemini(app_settings, fake, extraction_window_turns=4, extraction_window_seconds=60.0)
    llm, embedder = GeminiLLM(local), make_embedder(local)
    record = _recorder(client, ids)
    with extraction_worker(local, pool, llm, embedder, publisher):
        record(1), record(2)
        wait_for(lambda: len(_waiting(pool, ids)) == 2, 30, "two turns waiting")
    # The third turn is recorded and the session flushed at once; the worker sees the
    # flush first and the turn only afterwards, as when the turn's delivery is late.
    record(3)
    _flush(client, ids)
    flushes = "SELECT count(*) FROM extraction_flushes WHERE user_id = %s"
    with extraction_worker(local, pool, llm, embedder, publisher, only={REQUESTS}):
        wait_for(lambda: _rows(pool, flushes, ids["user_id"]) == [(1,)], 30, "the flush handled")
    # Three turns recorded, two archived: the flush left the window to the third.
    assert len(_waiting(pool, ids)) == 2 and fake.calls("generateContent") == []
    with extraction_worker(local, pool, llm, embedder, publisher):
        # Not after the minute a window may wait: at once, published before the flush.
        wait_for(lambda: len(_live_texts(pool, ids)) == 3, 20, "the window's memories")
    assert _tasks(fake) == ["extract", "consolidate"]  # one window of the three turns
    (extraction,) = [c for c in fake.calls("generateContent") if "memories" in _fields(c)]
    assert all(f"User: {text}" in extraction.prompt_text() for text in STATEMENTS[:3])


def test_the_next_session_closes_the_previous_sessions_window(
    settings, topology, publisher, pool, ids, fake
):
    local = _gemini(settings, fake, extraction_window_turns=4, extraction_window_seconds=60.0)
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
        wait_for(lambda: len(_waiting(pool, ids)) == 2, 30, "the first session's window")
        publisher.publish(later).result(timeout=10)
        wait_for(lambda: _extracted(pool, earlier), 20, "the first session's window extracted")
        # The new session's own turn waits in its window.
        assert [r[0] for r in _waiting(pool, ids)] == ["turn-0003"]
    assert _ledgered(pool, [later]) == []


def test_chatter_is_archived_and_counted_without_a_model_call(
    settings, topology, publisher, pool, ids, fake
):
    from prometheus_client import REGISTRY

    def skipped(reason):
        value = REGISTRY.get_sample_value(
            "agent_memory_extraction_skipped_total", {"reason": reason}
        )
        return value or 0.0

    local = _gemini(settings, fake, extraction_window_turns=1, extraction_window_seconds=60.0)
    chatter = [
        make_turn(ids, 1, user="Thanks!", assistant="You're welcome, happy to help."),
        make_turn(ids, 2, user="Hi there", assistant="Hello! How can I help today?"),
        make_turn(ids, 3, user="", assistant="", tool_events=(_tool(),)),
    ]
    before = {r: skipped(r) for r in ("acknowledgement", "greeting", "tool_output")}
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in chatter:
            publisher.publish(turn).result(timeout=10)
        wait_for(lambda: _extracted(pool, chatter), 30, "the chatter ledgered")
    archived = _rows(pool, "SELECT count(*) FROM episodes WHERE user_id = %s", ids["user_id"])
    assert archived == [(3,)]
    assert fake.calls("generateContent") == []
    assert {r: skipped(r) - before[r] for r in before} == {
        "acknowledgement": 1.0,
        "greeting": 1.0,
        "tool_output": 1.0,
    }


def _tool():
    from shared.events import ToolEvent

    return ToolEvent("run_shell", '{"command": "ls"}', "README.md\nsrc\n")


def test_a_window_over_the_input_limit_is_split_never_cut(
    settings, topology, publisher, pool, ids, fake
):
    local = _gemini(
        settings,
        fake,
        extraction_window_turns=6,
        extraction_window_seconds=60.0,
        max_message_bytes=4096,
        llm_max_input_tokens=4100,
    )
    filler = " ".join(["The weather talk went on for a while."] * 80)  # ~3,000 characters
    texts = [f"{STATEMENTS[n]} {filler}" for n in range(5)] + [STATEMENTS[0]]
    turns = [make_turn(ids, n, user=text) for n, text in enumerate(texts, start=1)]
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in turns:
            publisher.publish(turn).result(timeout=10)
        wait_for(lambda: _extracted(pool, turns), 60, "the window extracted")
    extractions = [c for c in fake.calls("generateContent") if "memories" in _fields(c)]
    assert len(extractions) >= 2
    prompts = "\n".join(c.prompt_text() for c in extractions)
    for turn in turns:  # every turn went to the model whole, and once
        assert prompts.count(f"User: {turn.user}\n") == 1
    for call in extractions:
        assert len(call.prompt_text()) + len(_system(call)) <= 4 * 4100
    assert len(_live_texts(pool, ids)) == 5  # the sixth turn repeats the first's fact


def _fields(call):
    schema = call.body.get("generationConfig", {}).get("responseJsonSchema") or {}
    return schema.get("properties", {})


def _system(call):
    return "\n".join(p.get("text", "") for p in call.body["systemInstruction"]["parts"])


def test_no_transaction_or_lock_is_open_while_the_model_answers(
    settings, topology, publisher, pool, ids, fake
):
    import time

    import psycopg
    from prometheus_client import REGISTRY

    from shared.events import ExtractionRequested, utcnow

    seen = []

    def watched(request):
        # The worker waits on this call right now: what does it hold meanwhile?
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            seen.append(
                conn.execute(
                    "SELECT (SELECT count(*) FROM pg_stat_activity WHERE state LIKE "
                    "'idle in transaction%%' AND datname = current_database()), "
                    "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory')"
                ).fetchone()
            )
        time.sleep(0.5)  # noqa: sleep-ok - the model's latency, as the fake plays it
        return rules_model(request)

    def transactions(bound):
        labels = {"worker": "extraction"}
        total = REGISTRY.get_sample_value("agent_memory_db_transaction_seconds_count", labels)
        within = REGISTRY.get_sample_value(
            "agent_memory_db_transaction_seconds_bucket", {**labels, "le": bound}
        )
        return total or 0.0, within or 0.0

    def waiting():  # polled with no transaction of its own
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            return conn.execute(
                "SELECT count(*) FROM extraction_pending WHERE user_id = %s", (ids["user_id"],)
            ).fetchone()[0]

    fake.defaults["generateContent"] = watched
    local = _gemini(settings, fake, extraction_window_turns=10, extraction_window_seconds=60.0)
    turns = [make_turn(ids, n, user=text) for n, text in enumerate(STATEMENTS[:4], start=1)]
    before = transactions("0.25")
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in turns:
            publisher.publish(turn).result(timeout=10)
        wait_for(lambda: waiting() == 4, 30, "four turns waiting")
        flush = ExtractionRequested(
            event_id=str(uuid.uuid4()),
            app=ids["app"],
            user_id=ids["user_id"],
            session_id=ids["session_id"],
            reason="flush",
            created_at=utcnow(),
        )
        publisher.publish(flush).result(timeout=10)
        wait_for(lambda: waiting() == 0, 30, "the window extracted")
    after = transactions("0.25")
    assert seen == [(0, 0), (0, 0)]  # the extraction call and the consolidation call
    # Every transaction of the worker took less than half a model call.
    assert after[0] - before[0] >= 6 and after[0] - before[0] == after[1] - before[1]
    assert _ledgered(pool, turns) == sorted(t.event_id for t in turns)


def test_an_llm_outage_holds_the_window_without_spending_its_attempts(
    settings, topology, publisher, pool, ids, fake
):
    from tests.fake_gemini import error_reply

    down = {"on": True}
    fake.defaults["generateContent"] = lambda r: error_reply(503) if down["on"] else rules_model(r)
    local = _gemini(
        settings,
        fake,
        extraction_window_turns=2,
        extraction_window_seconds=60.0,
        dependency_retry_min_seconds=0.2,
        dependency_retry_max_seconds=0.5,
    )
    turns = [make_turn(ids, n, user=text) for n, text in enumerate(STATEMENTS[:2], start=1)]
    recorder = Recorder()
    with extraction_worker(
        local, pool, GeminiLLM(local), make_embedder(local), publisher, recorder
    ):
        for turn in turns:
            publisher.publish(turn).result(timeout=10)
        wait_for(lambda: len(fake.calls("generateContent")) >= 10, 30, "the outage seen")
        assert _ledgered(pool, turns) == []
        down["on"] = False
        wait_for(lambda: _extracted(pool, turns), 60, "the window extracted after the outage")
    requests = [(a, o) for label, a, o in recorder.calls if not label.startswith("turn-")]
    assert requests[-1] == (1, "applied")
    assert {attempt for attempt, _outcome in requests} == {1}  # held, never redelivered
    assert DeadLetterQueues(local).peek(REQUESTS) == []
