"""The Prometheus counters of the worker runtime and the read API move with what
happens (read from this process's registry, which the runtime and the API under
test share; `test_up` scrapes the processes over HTTP)."""

import json
import threading
import time
import uuid

from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from services.api.app import create_app
from shared.bus.contract import Outcome
from shared.bus.dlq import DeadLetterQueues
from shared.events import TurnRecorded, encode
from shared.session_buffer import SessionBuffer
from tests.bus_helpers import Recorder, failing, make_turn, running, summary_handler
from tests.support import wait_for

SUB = "turns-summary"


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _snapshot() -> dict[str, float]:
    found = {
        outcome: _value("agent_memory_messages_total", subscription=SUB, outcome=outcome)
        for outcome in ("applied", "duplicate", "retried", "dead_lettered")
    }
    found["handled"] = _value("agent_memory_handler_seconds_count", subscription=SUB)
    found["dead_letter_publishes"] = _value(
        "agent_memory_dead_letter_publishes_total", subscription=SUB, result="ok"
    )
    return found


def test_counters_move_as_messages_are_acked_retried_duplicated_and_dead_lettered(
    settings, topology, publisher, valkey_client, ids
):
    buffer = SessionBuffer(valkey_client, 3600)
    recorder = Recorder()
    flaky, steady = make_turn(ids, 1), make_turn(ids, 2, session_id=ids["session_id"] + "-b")
    handler = failing(2, summary_handler(settings, buffer), lambda e: e.event_id == flaky.event_id)
    good = encode(make_turn(ids, 3))
    broken = dict(json.loads(good.data), user_id="bad\x07id", event_id=str(uuid.uuid4()))
    before = _snapshot()
    with running(settings, SUB, {TurnRecorded: recorder.wrap(handler)}, publisher):
        publisher.publish(flaky).result(timeout=10)
        publisher.publish(steady).result(timeout=10)
        publisher.publish_raw(
            topology.topic_path("turns"),
            json.dumps(broken).encode(),
            dict(good.attributes, event_id=broken["event_id"]),
            good.ordering_key,
        ).result(timeout=10)
        wait_for(lambda: recorder.outcomes(steady.turn_id) == ["applied"], 30, "the steady turn")
        publisher.publish(steady).result(timeout=10)  # the same event again
        wait_for(lambda: len(recorder.outcomes(steady.turn_id)) == 2, 30, "the duplicate")
        wait_for(lambda: "applied" in recorder.outcomes(flaky.turn_id), 60, "the third attempt")
        wait_for(lambda: DeadLetterQueues(settings).peek(SUB), 30, "the dead letter")
        moved = wait_for(
            lambda: (after := _snapshot())["handled"] - before["handled"] == 6 and after,
            10,
            "six messages settled",
        )

    delta = {name: moved[name] - before[name] for name in before}
    assert delta == {
        "applied": 2,  # the flaky turn at its third attempt, the steady one the first time
        "duplicate": 1,
        "retried": 2,
        "dead_lettered": 1,
        "handled": 6,
        "dead_letter_publishes": 1,
    }


def test_an_unknown_http_method_is_counted_as_other(settings, topology):
    labels = {"method": "OTHER", "route": "/healthz", "status": "405"}
    name = "agent_memory_api_request_seconds_count"
    before = _value(name, **labels)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.request("BREW", "/healthz").status_code == 405
    assert _value(name, **labels) - before == 1
    assert REGISTRY.get_sample_value(name, dict(labels, method="BREW")) is None


def test_the_autoscaling_signals_follow_the_work_in_flight(settings, topology, publisher, ids):
    """In flight, concurrency and delivery lag: what an autoscaler reads from a worker.
    Three turns of three sessions (so none waits on another's order) meet handlers
    that block until released."""
    release = threading.Event()
    entered: list[str] = []

    def blocking(event, delivery):
        entered.append(event.event_id)
        release.wait(30)
        return Outcome.APPLIED

    events = [make_turn(ids, n, session_id=f"{ids['session_id']}-{n}") for n in range(3)]
    lag = "agent_memory_delivery_lag_seconds"
    count_before = _value(f"{lag}_count", subscription=SUB)
    sum_before = _value(f"{lag}_sum", subscription=SUB)
    first_publish = time.time()
    for event in events:
        publisher.publish(event).result(timeout=10)
    published = time.time()
    started = time.time()
    with running(settings, SUB, {TurnRecorded: blocking}, publisher) as runtime:
        wait_for(lambda: len(entered) == 3, 30, "three handlers to block")
        handed_over = time.time()
        assert _value("agent_memory_messages_in_flight", subscription=SUB) == 3
        assert _value("agent_memory_worker_concurrency", subscription=SUB) == runtime.concurrency
        release.set()
        wait_for(
            lambda: _value("agent_memory_messages_in_flight", subscription=SUB) == 0,
            10,
            "the three to settle",
        )
    assert _value(f"{lag}_count", subscription=SUB) - count_before == 3
    # Each waited at least from the last publish to the runtime's start, at most from
    # the first publish to the last hand-over (50 ms for the clocks' rounding).
    lags = _value(f"{lag}_sum", subscription=SUB) - sum_before
    assert 3 * (started - published) - 0.05 <= lags <= 3 * (handed_over - first_publish) + 0.05
