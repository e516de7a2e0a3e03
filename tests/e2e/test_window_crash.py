"""The extraction worker as a user runs it (`agent-memory worker extraction`), killed
with SIGKILL three times while its windows are being extracted (the model takes a
second to answer, so each kill lands with requests in the middle of their model
calls), and restarted each time: every turn of every window is extracted exactly
once: one ledger row, one memory and one revision each, nothing left waiting,
nothing dead-lettered."""

import signal
import time

import pytest
from pydantic import SecretStr

from services.extraction_worker.handlers import REQUESTS, TURNS_SUBSCRIPTION
from shared.bus.dlq import DeadLetterQueues
from tests.bus_helpers import make_turn
from tests.fake_gemini import FakeGemini, Request
from tests.fake_gemini_model import offline_model
from tests.support import WorkerProcess, wait_for

SESSIONS = 6
TURNS_PER_SESSION = 12
KILLS = 3


def _slow_model(request: Request):
    time.sleep(1.0)  # noqa: sleep-ok - the model's latency, as the fake plays it
    return offline_model(request)


def _state(pool, ids, event_ids):
    with pool.connection() as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM processed_events WHERE consumer = %(c)s "
            "        AND event_id = ANY(%(e)s::uuid[])), "
            "(SELECT count(*) FROM extraction_pending WHERE app = %(a)s AND user_id = %(u)s)",
            {"c": TURNS_SUBSCRIPTION, "e": event_ids, "a": ids["app"], "u": ids["user_id"]},
        ).fetchone()


@pytest.mark.slow
def test_a_worker_killed_while_it_extracts_windows_extracts_each_turn_once(
    settings, topology, publisher, pool, ids, tmp_path
):
    events = [
        make_turn(
            {**ids, "session_id": f"{ids['session_id']}-{n % SESSIONS}"},
            n,
            user=f"My locker code {n} is {1000 + n}.",
        )
        for n in range(SESSIONS * TURNS_PER_SESSION)
    ]
    event_ids = [e.event_id for e in events]
    with FakeGemini() as fake:
        fake.defaults["generateContent"] = _slow_model
        local = settings.model_copy(
            update={
                "llm_provider": "gemini",
                "gemini_api_key": SecretStr("test-key"),
                "gemini_base_url": fake.url,
                "extraction_window_turns": 4,
                "extraction_window_seconds": 1.0,
                "worker_concurrency": 4,
            }
        )
        workers = [WorkerProcess(local, "extraction", tmp_path / "extraction-0.log")]
        try:
            wait_for(lambda: "worker started" in workers[0].log_text(), 60, "the worker")
            for event in events:
                publisher.publish(event).result(timeout=10)
            for kill in range(1, KILLS + 1):
                calls = len(fake.calls("generateContent"))
                # Model calls in flight now: windows between their reads and their writes.
                wait_for(
                    lambda c=calls: len(fake.calls("generateContent")) >= c + 2,
                    120,
                    f"extraction calls before kill {kill}",
                )
                workers[-1].signal(signal.SIGKILL)
                assert workers[-1].wait(timeout=30) == -signal.SIGKILL
                workers.append(
                    WorkerProcess(local, "extraction", tmp_path / f"extraction-{kill}.log")
                )
            # The killed worker's leased messages come back when their leases end.
            wait_for(
                lambda: _state(pool, ids, event_ids) == (len(events), 0),
                240,
                "every turn extracted and no window waiting",
                interval=0.5,
            )
        finally:
            for worker in workers:
                worker.stop()

    with pool.connection() as conn:
        memories = conn.execute(
            "SELECT text FROM memories WHERE app = %s AND user_id = %s AND valid_to IS NULL",
            (ids["app"], ids["user_id"]),
        ).fetchall()
        revisions = conn.execute(
            "SELECT r.event_id::text, count(*) FROM memory_revisions r "
            "JOIN memories m ON m.id = r.memory_id WHERE m.app = %s AND m.user_id = %s "
            "GROUP BY r.event_id",
            (ids["app"], ids["user_id"]),
        ).fetchall()
    assert sorted(t for (t,) in memories) == sorted(
        f"User's locker code {n} is {1000 + n}." for n in range(len(events))
    )
    assert dict(revisions) == dict.fromkeys(event_ids, 1)
    queues = DeadLetterQueues(local)
    assert queues.peek(TURNS_SUBSCRIPTION) == [] and queues.peek(REQUESTS) == []
    # The kills interrupted windows: requests a killed worker had taken were redelivered
    # and extracted by its successor.
    redone = [
        r
        for w in workers[1:]
        for r in w.log_records()
        if r.get("message") == "message handled"
        and r.get("subscription") == REQUESTS
        and r.get("delivery_attempt", 1) > 1
    ]
    assert redone
