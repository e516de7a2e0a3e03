"""The runtime's batch handlers: one call per pull, each event settled on its own."""

import threading

from prometheus_client import REGISTRY

from services.summary_worker.folding import FoldPolicy
from services.summary_worker.handlers import record_turns
from shared.bus.dlq import DeadLetterQueues
from shared.bus.worker import BatchHandler, Continue, Outcome
from shared.errors import PermanentError
from shared.events import TurnRecorded
from shared.session_buffer import SessionBuffer, SessionKey, tombstone_key
from tests.bus_helpers import make_turn, running, summary_handler
from tests.conftest import both_pull_modes
from tests.support import wait_for


class ScriptedBatch:
    """A batch handler whose result for each turn is set by the turn's number."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sizes: list[int] = []
        self.attempts: dict[int, list[int]] = {}  # turn number -> delivery attempts seen
        self.done: dict[int, int] = {}  # turn number -> times it succeeded
        self.batch_threads: set[str] = set()
        self.then_threads: set[str] = set()

    def first(self, items):
        with self.lock:
            self.sizes.append(len(items))
            self.batch_threads.add(threading.current_thread().name)
        return [self._one(event, delivery) for event, delivery in items]

    def _one(self, event, delivery):
        n = int(event.turn_id.removeprefix("turn-"))
        with self.lock:
            self.attempts.setdefault(n, []).append(delivery.delivery_attempt)
        if n == 3 and delivery.delivery_attempt == 1:
            return RuntimeError("injected failure of turn 3")
        if n == 5:
            return PermanentError("turn 5 can never be applied")
        if n in (7, 9):
            return Continue(n)
        if n == 11:
            return Continue()  # a continuation needs no value
        return self._succeed(n)

    def then(self, event, delivery, n) -> Outcome:
        with self.lock:
            self.then_threads.add(threading.current_thread().name)
        if n == 9 and delivery.delivery_attempt == 1:
            raise RuntimeError("injected failure while finishing turn 9")
        return self._succeed(n or int(event.turn_id.removeprefix("turn-")))

    def _succeed(self, n: int) -> Outcome:
        with self.lock:
            self.done[n] = self.done.get(n, 0) + 1
        return Outcome.APPLIED


@both_pull_modes
def test_each_result_of_a_batch_is_acked_retried_dead_lettered_or_finished_alone(
    settings, topology, publisher, ids
):
    handler = ScriptedBatch()
    # Twelve sessions (ordering keys), all queued before the worker starts.
    turns = [make_turn(ids, n, session_id=f"{ids['session_id']}-{n}") for n in range(1, 13)]
    for turn in turns:
        publisher.publish(turn).result(timeout=10)
    table = {TurnRecorded: BatchHandler(handler.first, handler.then)}
    with running(settings, "turns-summary", table, publisher):
        expected = {n: 1 for n in range(1, 13) if n != 5}
        wait_for(lambda: dict(handler.done) == expected, 60, "every turn but 5 applied")
        letters = wait_for(
            lambda: DeadLetterQueues(settings).peek("turns-summary"), 30, "the dead letter"
        )

    assert handler.done == expected  # once each: no second success after the retries
    assert [(letter.reason, letter.attempts) for letter in letters] == [
        ("turn 5 can never be applied", 1)
    ]
    assert handler.attempts[3] == [1, 2] and handler.attempts[9] == [1, 2]
    assert handler.attempts[5] == [1] and handler.attempts[7] == [1]
    assert sum(handler.sizes) == 12 + 2  # twelve first deliveries and two retries
    assert handler.then_threads  # each `then` ran (on whichever handler thread was free)
    if settings.pull_mode == "unary":
        # A pull reaches the handler threads in one piece: its messages are one batch.
        # (Streaming pull hands them over one by one; how many wait together varies.)
        assert max(handler.sizes) > 1


def test_the_summary_workers_batch_appends_every_turn_once_and_folds(
    settings, topology, publisher, valkey_client, ids
):
    buffer = SessionBuffer(valkey_client, settings.session_ttl_seconds)
    table = {TurnRecorded: summary_handler(settings, buffer)}
    turns = [make_turn(ids, n) for n in range(30)]
    for turn in turns:
        publisher.publish(turn).result(timeout=10)
    publisher.publish(turns[4]).result(timeout=10)  # a duplicate, under the same event_id
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])

    def settled():
        view = buffer.read(key, with_folds=True)
        return view.turns_total == 30 and len(view.turns) <= 10 and view

    with running(settings, "turns-summary", table, publisher):
        view = wait_for(settled, 60, "30 turns appended and folded down to the trigger")

    in_buffer = [t.turn_id for t in view.turns]
    folded = [turn_id for version in sorted(view.folds) for turn_id in view.folds[version]]
    # Every turn in exactly one place: the buffer, or one summary version.
    assert sorted(in_buffer + folded) == sorted(t.turn_id for t in turns)
    assert sorted(view.folds) == list(range(1, view.summary.version + 1))
    assert view.summary.version >= 1 and view.summary.text
    # The buffer keeps the newest turns, in created_at order.
    assert in_buffer == [t.turn_id for t in turns[-len(in_buffer) :]]


def test_a_turn_that_fails_alone_leaves_the_rest_of_its_batch_applied(valkey_client, ids):
    buffer = SessionBuffer(valkey_client, 3600)
    broken_user = ids["user_id"] + "-broken"
    # A tombstone that is not a time: reading it fails for this user's turn only.
    valkey_client.set(tombstone_key(ids["app"], broken_user), "not a time")
    turns = [make_turn(ids, 1), make_turn(ids, 2, user_id=broken_user), make_turn(ids, 3)]
    results = record_turns([(t, None) for t in turns], buffer=buffer, policy=FoldPolicy())
    assert results[0] == results[2] == Outcome.APPLIED
    assert isinstance(results[1], ValueError)
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    assert [t.turn_id for t in buffer.read(key).turns] == ["turn-0001", "turn-0003"]


def test_work_left_for_a_handler_thread_when_the_worker_stops_is_nacked_and_counted(
    settings, topology, publisher, ids
):
    one_thread = settings.model_copy(update={"worker_concurrency": 1, "pull_mode": "unary"})
    runtime: dict = {}
    finished: list[str] = []

    def first(items):
        # The batch holds the only handler thread; its `then` waits behind it, and
        # the worker is told to stop before that thread is free.
        runtime["it"].request_stop()
        return [Continue() for _item in items]

    def then(event, _delivery, _value):
        finished.append(event.turn_id)
        return Outcome.APPLIED

    retried = (
        "agent_memory_messages_total",
        {"subscription": "turns-summary", "outcome": "retried"},
    )
    before = REGISTRY.get_sample_value(*retried) or 0.0
    publisher.publish(make_turn(ids, 1)).result(timeout=10)
    table = {TurnRecorded: BatchHandler(first, then)}
    with running(one_thread, "turns-summary", table, publisher) as r:
        runtime["it"] = r
        wait_for(lambda: (REGISTRY.get_sample_value(*retried) or 0.0) > before, 30, "the nack")
    assert finished == []
    assert REGISTRY.get_sample_value(*retried) - before == 1


def test_a_batch_result_that_is_not_an_outcome_fails_its_event(settings, topology, publisher, ids):
    # None, or a Continue where the entry has no `then`, is no outcome: the
    # event fails like a handler's error and ends in the dead letters.
    def first(items):
        return [None if event.turn_id == "turn-0001" else Continue() for event, _d in items]

    turns = [make_turn(ids, n, session_id=f"{ids['session_id']}-{n}") for n in (1, 2)]
    for turn in turns:
        publisher.publish(turn).result(timeout=10)
    with running(settings, "turns-summary", {TurnRecorded: BatchHandler(first)}, publisher):
        letters = wait_for(
            lambda: len(found := DeadLetterQueues(settings).peek("turns-summary")) == 2 and found,
            60,
            "both dead letters",
        )
    assert sorted(letter.reason for letter in letters) == [
        "failed 5 attempts; last error TypeError: a batch handler without `then` returned Continue",
        "failed 5 attempts; last error TypeError: a handler returned NoneType, not an Outcome",
    ]


def test_a_plain_handler_that_returns_no_outcome_fails_its_event(
    settings, topology, publisher, ids
):
    turn = make_turn(ids, 1)
    publisher.publish(turn).result(timeout=10)
    with running(settings, "turns-summary", {TurnRecorded: lambda e, d: None}, publisher):
        (letter,) = wait_for(
            lambda: DeadLetterQueues(settings).peek("turns-summary"), 60, "the dead letter"
        )
    assert letter.reason == (
        "failed 5 attempts; last error TypeError: a handler returned NoneType, not an Outcome"
    )
