"""The dispatcher's decisions, with fakes (`tests.runtime_fakes`): how messages
are taken (one, or every waiting one for a batch handler), routed, handled and
settled, held for a dependency, and handed back at a stop. No Pub/Sub: the fake
messages are handed to `receive` as a delivery would."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from shared.bus.attributes import REPLAYED_FOR
from shared.bus.contract import BatchHandler, Continue, Outcome
from shared.bus.dependencies import Dependencies
from shared.errors import DependencyError
from shared.events import CompactionRequested, ExtractionRequested, TurnRecorded
from tests.bus_helpers import make_turn
from tests.runtime_fakes import (
    SETTINGS,
    SUBSCRIPTION,
    FakeMessage,
    FakePublisher,
    dispatcher_of,
    settler_of,
)
from tests.support import wait_for

IDS = {"app": "app-1", "user_id": "user-1", "session_id": "sess-1"}


def settled(*messages: FakeMessage) -> None:
    for message in messages:
        assert message.settled.wait(10), "the message was never settled"


def turns(count: int) -> list[FakeMessage]:
    return [FakeMessage.of(make_turn(IDS, n, session_id=f"sess-{n}")) for n in range(1, count + 1)]


def compaction_request(n: int) -> CompactionRequested:
    """An event of another type than the turns the tables here handle."""
    return CompactionRequested(
        event_id=f"6f1c1a52-0000-4000-8000-{n:012d}",
        app="a",
        user_id="u",
        retention_days=30,
        batch_limit=10,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_a_batch_handler_takes_every_waiting_message_in_one_call_and_each_is_settled_alone():
    sizes, thens = [], []

    def first(items):
        sizes.append(len(items))
        return [
            Outcome.APPLIED
            if e.turn_id == "turn-0001"
            else RuntimeError("turn 2 failed")
            if e.turn_id == "turn-0002"
            else Continue(e.turn_id)
            for e, _d in items
        ]

    def then(event, delivery, value):
        thens.append(value)
        return Outcome.DUPLICATE

    messages = turns(3)
    dispatcher = dispatcher_of({TurnRecorded: BatchHandler(first, then)})
    dispatcher.receive(messages)  # waiting before any thread runs
    dispatcher.start()
    settled(*messages)
    dispatcher.stop(5)
    assert sizes == [3] and thens == ["turn-0003"]
    assert [m.done for m in messages] == [[("ack", 0.0)], [("nack", 1.0)], [("ack", 0.0)]]


def test_a_plain_handler_takes_one_message_per_call():
    seen = []

    def handle(event, delivery):
        seen.append((event.turn_id, delivery.subscription, delivery.delivery_attempt))
        return Outcome.APPLIED

    messages = turns(3)
    dispatcher = dispatcher_of({TurnRecorded: handle})
    dispatcher.receive(messages)
    dispatcher.start()
    settled(*messages)
    dispatcher.stop(5)
    assert sorted(seen) == [(f"turn-000{n}", SUBSCRIPTION, 1) for n in (1, 2, 3)]
    assert all(m.done == [("ack", 0.0)] for m in messages)


def test_a_table_mixing_batch_and_plain_handlers_is_refused():
    table = {TurnRecorded: BatchHandler(lambda items: []), ExtractionRequested: lambda e, d: None}
    with pytest.raises(ValueError, match="all batch handlers or none"):
        dispatcher_of(table)


@pytest.mark.parametrize(
    "message, reason",
    [
        (
            FakeMessage.of(make_turn(IDS, 1), attempt=SETTINGS.max_delivery_attempts + 1),
            "delivered 6 times; attempt 5 ended without an outcome",
        ),
        (FakeMessage(b"not json", {"event_type": "turn.recorded.v1"}), "turn.recorded.v1"),
        (
            FakeMessage.of(compaction_request(1)),
            "no handler for compaction.requested.v1 on turns-summary",
        ),
    ],
    ids=["attempts spent", "undecodable", "no handler"],
)
def test_a_message_that_cannot_be_handled_is_dead_lettered_without_a_handler_call(message, reason):
    calls, publisher = [], FakePublisher()
    dispatcher = dispatcher_of({TurnRecorded: lambda e, d: calls.append(e)}, publisher=publisher)
    dispatcher.start()
    dispatcher.receive([message])
    settled(message)
    dispatcher.stop(5)
    assert calls == [] and message.done == [("ack", 0.0)]
    assert reason in publisher.published[0][2]["dead_letter_reason"]


def test_a_replay_meant_for_another_subscription_is_skipped():
    calls = []
    message = FakeMessage.of(make_turn(IDS, 1), **{REPLAYED_FOR: "turns-extraction"})
    dispatcher = dispatcher_of({TurnRecorded: lambda e, d: calls.append(e)})
    dispatcher.start()
    dispatcher.receive([message])
    settled(message)
    dispatcher.stop(5)
    assert calls == [] and message.done == [("ack", 0.0)]


def test_a_message_held_for_a_dependency_is_handled_again_once_it_answers_on_the_same_attempt():
    attempts = []

    def handle(event, delivery):
        attempts.append(delivery.delivery_attempt)
        if len(attempts) == 1:
            raise DependencyError("valkey", "connection refused")
        return Outcome.APPLIED

    # Without a probe, a dependency counts as back once its backoff has passed.
    dependencies = Dependencies(retry_min=0.05, retry_max=0.05)
    dependencies.start()
    message = FakeMessage.of(make_turn(IDS, 1))
    dispatcher = dispatcher_of({TurnRecorded: handle}, dependencies)
    dispatcher.start()
    dispatcher.receive([message])
    try:
        settled(message)
    finally:
        dispatcher.stop(5)
        dependencies.close()
    assert attempts == [1, 1]  # not a delivery attempt spent
    assert message.done == [("ack", 0.0)]


def test_what_waits_in_the_queue_behind_a_held_message_is_extended_with_it():
    calls = []

    def handle(event, delivery):
        calls.append(event.turn_id)
        raise DependencyError("valkey", "connection refused")

    # No probe and a long backoff: the dependency stays down for the whole test.
    dependencies = Dependencies(retry_min=60, retry_max=60)
    held, queued = turns(2)
    dispatcher = dispatcher_of({TurnRecorded: handle}, dependencies, concurrency=1)
    dispatcher.hold_check_seconds = 0.05
    dispatcher.receive([held, queued])  # one thread: the second waits in the queue
    dispatcher.start()
    try:
        wait_for(
            lambda: all(m.done.count(("extend", 0.0)) >= 2 for m in (held, queued)),
            10,
            "both leases renewed twice",
        )
    finally:
        assert dispatcher.stop(5)
        dependencies.close()
    assert calls == ["turn-0001"]
    assert [m.done[-1] for m in (held, queued)] == [("nack", 0.0)] * 2  # handed back
    assert {op for m in (held, queued) for op, _delay in m.done} == {"extend", "nack"}


def test_a_stop_hands_back_what_waits_and_nothing_new_is_handled():
    started, release = threading.Event(), threading.Event()
    calls = []

    def handle(event, delivery):
        calls.append(event.turn_id)
        started.set()
        release.wait(10)
        return Outcome.APPLIED

    busy, *waiting = turns(3)
    dispatcher = dispatcher_of({TurnRecorded: handle}, concurrency=1)
    dispatcher.start()
    dispatcher.receive([busy])
    assert started.wait(10)
    dispatcher.receive(waiting)
    dispatcher.request_stop()
    late = FakeMessage.of(make_turn(IDS, 4))
    dispatcher.receive([late])
    release.set()
    assert dispatcher.stop(5)
    assert calls == ["turn-0001"]
    assert busy.done == [("ack", 0.0)]
    assert [m.done for m in (*waiting, late)] == [[("nack", 0.0)]] * 3


def test_a_handler_thread_outlives_a_base_exception_and_hands_its_message_back():
    calls = []

    def handle(event, delivery):
        calls.append(event.turn_id)
        if event.turn_id == "turn-0001":
            raise SystemExit("a library gave up")  # not an Exception: escapes the handler's
        return Outcome.APPLIED

    first, second = turns(2)
    dispatcher = dispatcher_of({TurnRecorded: handle}, concurrency=1)
    dispatcher.start()
    dispatcher.receive([first])
    settled(first)
    dispatcher.receive([second])  # the one thread is still there to take it
    settled(second)
    dispatcher.stop(5)
    assert calls == ["turn-0001", "turn-0002"]
    assert (first.done, second.done) == ([("nack", 0.0)], [("ack", 0.0)])


def test_a_message_is_settled_once_whatever_asks_twice():
    from shared.bus.settling import Pending

    settler = settler_of()
    p = Pending.of(turns(1)[0])
    assert settler.settle(p, Outcome.APPLIED) is Outcome.APPLIED
    settler.settle(p, error=RuntimeError("late"))
    settler.hand_back(p, "stopping")
    assert p.message.done == [("ack", 0.0)]


def test_each_batch_handler_takes_the_events_of_its_own_type():
    seen = {}

    def batch(name):
        def first(items):
            seen.setdefault(name, []).extend(type(e).__name__ for e, _d in items)
            return [Outcome.APPLIED] * len(items)

        return BatchHandler(first)

    messages = [*turns(2), FakeMessage.of(compaction_request(2))]
    dispatcher = dispatcher_of(
        {TurnRecorded: batch("turns"), CompactionRequested: batch("compaction")}
    )
    dispatcher.receive(messages)
    dispatcher.start()
    settled(*messages)
    dispatcher.stop(5)
    assert seen == {"turns": ["TurnRecorded"] * 2, "compaction": ["CompactionRequested"]}
