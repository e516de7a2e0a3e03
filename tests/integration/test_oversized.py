"""Nothing is silently dropped: an event the bus would not take is refused with
413 before anything is written, a worker receives any message the topic takes,
and a generate request whose event is dead-lettered ends its operation."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.extraction_worker.handlers import dead_letter_hooks
from shared.bootstrap import Resources
from shared.bus.worker import Outcome, SubscriberRuntime
from shared.errors import PermanentError
from shared.events import MemoriesGenerate
from tests.support import wait_for

TEXT_CHARS = 32_000  # the most one text of a generate request may hold


@pytest.fixture
def big_client(app_settings, topology):
    with TestClient(create_app(app_settings), raise_server_exceptions=False) as c:
        yield c


def _generate(client, ids, events):
    return client.post("/v1/memories:generate", json={"user_id": ids["user_id"], "events": events})


def test_a_generate_request_whose_event_would_exceed_the_bus_limit_is_413_naming_events(
    big_client, ids, pool
):
    # 200 texts of the largest size, each character one that JSON escapes: the
    # event would be about 12.8 MB, over Pub/Sub's 10 MB.
    events = [{"role": "user", "text": '"' * TEXT_CHARS} for _ in range(200)]
    answer = _generate(big_client, ids, events)
    assert answer.status_code == 413, answer.text
    error = answer.json()["error"]
    assert error["code"] == "too_large"
    assert error["fields"] == [{"field": "events", "message": error["message"][len("events: ") :]}]
    assert error["message"].startswith("events: the event would be 128")
    assert error["message"].endswith("over the limit of 9934464 bytes (AM_MAX_EVENT_BYTES)")
    with pool.connection() as conn:  # no operation was left waiting for it
        count = conn.execute(
            "SELECT count(*) FROM operations WHERE user_id = %s", (ids["user_id"],)
        ).fetchone()[0]
    assert count == 0


def test_a_turn_over_a_lower_configured_limit_is_413_naming_its_largest_field(
    app_settings, topology, ids
):
    settings = app_settings.model_copy(update={"max_event_bytes": 4096})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        body = {"user_id": ids["user_id"], "user": "hi", "assistant": "x" * 5000}
        answer = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=body)
        assert answer.status_code == 413, answer.text
        assert answer.json()["error"]["fields"][0]["field"] == "assistant"
        view = client.get(f"/v1/sessions/{ids['session_id']}", params={"user_id": ids["user_id"]})
    assert view.json()["turn_count"] == 0  # refused before it was buffered


def test_a_worker_receives_a_message_of_several_megabytes(big_client, app_settings, publisher, ids):
    # About 6.5 MB: over gRPC's default 4 MB a received message may have.
    events = [{"role": "user", "text": f"fact {n} " + "x" * (TEXT_CHARS - 20)} for n in range(200)]
    answer = _generate(big_client, ids, events)
    assert answer.status_code == 202, answer.text
    received = []

    def record(event, delivery):
        received.append(event)
        return Outcome.APPLIED

    runtime = SubscriberRuntime(
        app_settings,
        "memory-generate-extraction",
        {MemoriesGenerate: record},
        publisher,
        concurrency=2,
    )
    runtime.start()
    try:
        wait_for(lambda: received, 60, "the large message to be handled")
    finally:
        runtime.stop(timeout=10)
    (event,) = received
    assert [e.text for e in event.events] == [e["text"] for e in events]
    assert event.operation == answer.json()["name"]


def test_a_generate_request_whose_event_is_dead_lettered_ends_its_operation(
    big_client, app_settings, publisher, ids, pool
):
    answer = _generate(big_client, ids, [{"role": "user", "text": "I like tea."}])
    assert answer.status_code == 202, answer.text
    name = answer.json()["name"]

    def broken(event, delivery):
        raise PermanentError("this request can never be applied")

    hooks = dead_letter_hooks(Resources(settings=app_settings, pool=pool, publisher=publisher))
    runtime = SubscriberRuntime(
        app_settings,
        "memory-generate-extraction",
        {MemoriesGenerate: broken},
        publisher,
        concurrency=2,
        on_dead_letter=hooks[MemoriesGenerate],
    )
    runtime.start()

    def operation() -> dict:
        got = big_client.get(f"/v1/{name}", params={"user_id": ids["user_id"]})
        assert got.status_code == 200, got.text
        return got.json()

    try:
        done = wait_for(lambda: (op := operation())["done"] and op, 60, "the operation to end")
    finally:
        runtime.stop(timeout=10)
    assert done == {
        "name": name,
        "done": True,
        "generated_memories": None,
        "error": "dead-lettered: this request can never be applied",
    }


def test_a_message_no_worker_settled_on_its_last_attempt_is_dead_lettered_with_a_reason(
    settings, topology, publisher, ids
):
    # Five deliveries that end without an outcome, as when a worker crashes on a
    # message each time: handed back unsettled (deadline 0), not nacked by a handler.
    from shared.bus.clients import subscriber_client
    from shared.bus.dlq import DeadLetterQueues
    from shared.events import TurnRecorded
    from tests.bus_helpers import Recorder, make_turn

    turn = make_turn(ids, 1)
    publisher.publish(turn).result(timeout=10)
    subscriber = subscriber_client()
    path = topology.subscription_path("turns-summary")
    for attempt in range(1, 6):
        received = wait_for(
            lambda: (
                subscriber.pull(
                    request={"subscription": path, "max_messages": 1}, timeout=5
                ).received_messages
            ),
            30,
            f"delivery {attempt}",
        )
        assert received[0].delivery_attempt == attempt
        subscriber.modify_ack_deadline(
            request={
                "subscription": path,
                "ack_ids": [received[0].ack_id],
                "ack_deadline_seconds": 0,
            }
        )
    recorder = Recorder()
    table = {TurnRecorded: recorder.wrap(lambda event, delivery: Outcome.APPLIED)}
    runtime = SubscriberRuntime(settings, "turns-summary", table, publisher, concurrency=2)
    runtime.start()
    try:
        (letter,) = wait_for(
            lambda: DeadLetterQueues(settings).peek("turns-summary"), 60, "the dead letter"
        )
    finally:
        runtime.stop(timeout=10)
    assert letter.event_id == turn.event_id
    assert letter.reason == (
        "delivered 6 times; attempt 5 ended without an outcome "
        "(a worker crashed or was stopped while handling it)"
    )
    assert recorder.count() == 0  # not run again
