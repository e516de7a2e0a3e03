"""Extraction windows under faults and limits, through the extraction worker's own
subscriptions: a window that never gets a valid reply, a model outage, chatter,
a window over the input limit, and no transaction or lock held while the model
answers."""

from __future__ import annotations

import uuid

import pytest

from services.extraction_worker.handlers import REQUESTS, TURNS_SUBSCRIPTION
from shared.bus.dlq import DeadLetterQueues
from shared.embeddings import make_embedder
from shared.llm.gemini import GeminiLLM
from tests.bus_helpers import Recorder, extraction_worker, make_turn
from tests.fake_gemini import json_reply
from tests.fake_gemini_model import offline_model
from tests.support import run_cli, wait_for
from tests.window_helpers import (
    STATEMENTS,
    a_tool,
    extracted,
    fields_of,
    gemini,
    ledgered,
    live_texts,
    query,
    rules_fake,
    system_of,
    waiting,
)


@pytest.fixture
def fake():
    """The fake Gemini endpoint answering as the `offline` provider would."""
    with rules_fake() as server:
        yield server


def test_a_window_that_never_gets_a_valid_reply_dead_letters_each_turn_to_replay_alone(
    settings, topology, publisher, pool, ids, fake
):
    local = gemini(settings, fake, extraction_window_turns=2, extraction_window_seconds=1.0)
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
            lambda: (found := queues.peek(TURNS_SUBSCRIPTION)) and len(found) == 2 and found,
            120,
            "both turns' dead letters",
        )
        wait_for(lambda: queues.peek(REQUESTS), 30, "the request's own dead letter")
    assert sorted(letter.event_id for letter in letters) == sorted(t.event_id for t in turns)
    for letter in letters:
        assert "extraction window (2 turns) failed" in letter.reason
        assert "extract: 3 invalid answers from the model, the last unknown_value" in letter.reason
        assert letter.event_type == "turn.recorded.v1"
    requests = [(a, o) for label, a, o in recorder.calls if not label.startswith("turn-")]
    # The answers stayed invalid after the model was asked again twice: dead-lettered on
    # the first delivery. (A turn redelivered meanwhile publishes the request again: its
    # copy finds the window gone once the first is dead-lettered, a duplicate.)
    assert [a for a, o in requests if o.startswith("error:")] == [1]
    assert all(o.startswith("error:") or o == "duplicate" for _a, o in requests)
    # The turns were archived on arrival; nothing else of them was written.
    assert query(pool, "SELECT count(*) FROM episodes WHERE user_id = %s", ids["user_id"]) == [(2,)]
    assert live_texts(pool, ids) == []
    assert waiting(pool, ids) == []
    assert ledgered(pool, turns) == []

    # Replayed one by one, with a model that answers: each turn is extracted once.
    fake.defaults["generateContent"] = offline_model
    with extraction_worker(local, pool, llm, embedder, publisher):
        for n, turn in enumerate(turns, start=1):
            replay = run_cli(
                local, "dlq", "replay", TURNS_SUBSCRIPTION, "--event-id", turn.event_id
            )
            assert replay.returncode == 0, replay.stderr
            # Alone in its window, it closes when no other turn comes.
            wait_for(lambda n=n: len(live_texts(pool, ids)) == n, 60, f"turn {n}'s memory")
    assert ledgered(pool, turns) == sorted(t.event_id for t in turns)
    assert len(live_texts(pool, ids)) == 2
    assert query(pool, "SELECT count(*) FROM episodes WHERE user_id = %s", ids["user_id"]) == [(2,)]


def test_chatter_is_archived_and_counted_without_a_model_call(
    settings, topology, publisher, pool, ids, fake
):
    from prometheus_client import REGISTRY

    def skipped(reason):
        value = REGISTRY.get_sample_value(
            "agent_memory_extraction_skipped_total", {"reason": reason}
        )
        return value or 0.0

    local = gemini(settings, fake, extraction_window_turns=1, extraction_window_seconds=60.0)
    chatter = [
        make_turn(ids, 1, user="Thanks!", assistant="You're welcome, happy to help."),
        make_turn(ids, 2, user="Hi there", assistant="Hello! How can I help today?"),
        make_turn(ids, 3, user="", assistant="", tool_events=(a_tool(),)),
    ]
    before = {r: skipped(r) for r in ("acknowledgement", "greeting", "tool_output")}
    with extraction_worker(local, pool, GeminiLLM(local), make_embedder(local), publisher):
        for turn in chatter:
            publisher.publish(turn).result(timeout=10)
        wait_for(lambda: extracted(pool, chatter), 30, "the chatter ledgered")
    archived = query(pool, "SELECT count(*) FROM episodes WHERE user_id = %s", ids["user_id"])
    assert archived == [(3,)]
    assert fake.calls("generateContent") == []
    assert {r: skipped(r) - before[r] for r in before} == {
        "acknowledgement": 1.0,
        "greeting": 1.0,
        "tool_output": 1.0,
    }


def test_a_window_over_the_input_limit_is_split_never_cut(
    settings, topology, publisher, pool, ids, fake
):
    local = gemini(
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
        wait_for(lambda: extracted(pool, turns), 60, "the window extracted")
    extractions = [c for c in fake.calls("generateContent") if "memories" in fields_of(c)]
    assert len(extractions) >= 2
    prompts = "\n".join(c.prompt_text() for c in extractions)
    for turn in turns:  # every turn went to the model whole, and once
        assert prompts.count(f"User: {turn.user}\n") == 1
    for call in extractions:
        assert len(call.prompt_text()) + len(system_of(call)) <= 4 * 4100
    assert len(live_texts(pool, ids)) == 5  # the sixth turn repeats the first's fact


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
        # A transaction that spanned the call would take over 2 s; a loaded
        # machine keeps the others well under 1 s.
        time.sleep(2.0)  # noqa: sleep-ok - the model's latency, as the fake plays it
        return offline_model(request)

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
    local = gemini(
        settings,
        fake,
        extraction_window_turns=10,
        extraction_window_seconds=60.0,
        llm_timeout_seconds=10.0,
    )
    turns = [make_turn(ids, n, user=text) for n, text in enumerate(STATEMENTS[:4], start=1)]
    before = transactions("1.0")
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
    after = transactions("1.0")
    assert seen == [(0, 0), (0, 0)]  # the extraction call and the consolidation call
    # Every transaction of the worker took less than half a model call.
    assert after[0] - before[0] >= 6 and after[0] - before[0] == after[1] - before[1]
    assert ledgered(pool, turns) == sorted(t.event_id for t in turns)


def test_an_llm_outage_holds_the_window_without_spending_its_attempts(
    settings, topology, publisher, pool, ids, fake
):
    from tests.fake_gemini import error_reply

    down = {"on": True}
    fake.defaults["generateContent"] = lambda r: (
        error_reply(503) if down["on"] else offline_model(r)
    )
    local = gemini(
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
        assert ledgered(pool, turns) == []
        down["on"] = False
        wait_for(lambda: extracted(pool, turns), 60, "the window extracted after the outage")
    requests = [(a, o) for label, a, o in recorder.calls if not label.startswith("turn-")]
    assert requests[-1] == (1, "applied")
    assert {attempt for attempt, _outcome in requests} == {1}  # held, never redelivered
    assert DeadLetterQueues(local).peek(REQUESTS) == []
