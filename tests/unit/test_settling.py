"""The settler's decisions, with fakes (`tests.runtime_fakes`): which outcome an
error or a handler's result gets, and what is done to the message."""

from __future__ import annotations

import pytest

from shared.bus.attributes import DEAD_LETTER_REASON
from shared.bus.contract import Outcome
from shared.bus.dependencies import Dependencies, Probe
from shared.bus.settling import SETBACKS_ALLOWED, Pending, retry_backoff
from shared.errors import DependencyError, PermanentError
from shared.llm.base import LLMRateLimited, LLMUnavailable
from tests.runtime_fakes import DEAD_LETTER_TOPIC, SETTINGS, FakeMessage, FakePublisher, settler_of


def pending(attempt: int = 1, **attributes: str) -> Pending:
    message = FakeMessage(b"{}", {"event_id": "e-1", **attributes}, attempt)
    return Pending.of(message)


@pytest.mark.parametrize(
    "outcome", [Outcome.APPLIED, Outcome.DUPLICATE, Outcome.DROPPED, Outcome.SKIPPED]
)
def test_a_handlers_outcome_acknowledges_the_message(outcome):
    p = pending()
    assert settler_of().settle(p, outcome) is outcome
    assert p.message.done == [("ack", 0.0)]
    assert p.settled


@pytest.mark.parametrize("result", [None, "applied", Outcome.RETRIED, Outcome.HELD])
def test_what_a_handler_may_not_return_is_an_error_of_the_event(result):
    p = pending()
    assert settler_of().settle(p, result) is Outcome.RETRIED
    assert p.message.done == [("nack", 1.0)]


@pytest.mark.parametrize("attempt, delay", [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0)])
def test_an_events_error_is_nacked_with_the_retry_backoff_of_its_attempt(attempt, delay):
    p = pending(attempt)
    assert settler_of().settle(p, error=RuntimeError("boom")) is Outcome.RETRIED
    assert p.message.done == [("nack", delay)]


def test_the_backoff_stops_growing_at_its_maximum():
    assert [retry_backoff(SETTINGS, n) for n in (6, 7, 20)] == [32.0, 60, 60]


def test_the_last_attempts_error_is_dead_lettered_with_its_reason_then_acknowledged():
    publisher = FakePublisher()
    p = pending(SETTINGS.max_delivery_attempts)
    assert settler_of(publisher).settle(p, error=RuntimeError("boom")) is Outcome.DEAD_LETTERED
    assert p.message.done == [("ack", 0.0)]
    ((topic, data, attributes),) = publisher.published
    assert (topic, data) == (DEAD_LETTER_TOPIC, b"{}")
    assert attributes[DEAD_LETTER_REASON] == "failed 5 attempts; last error RuntimeError: boom"


def test_a_permanent_error_is_dead_lettered_at_the_first_attempt():
    publisher = FakePublisher()
    p = pending(1)
    assert settler_of(publisher).settle(p, error=PermanentError("never")) is Outcome.DEAD_LETTERED
    assert publisher.published[0][2][DEAD_LETTER_REASON] == "never"
    assert p.message.done == [("ack", 0.0)]


def test_a_dead_letter_that_is_not_published_is_nacked_not_lost():
    p = pending(SETTINGS.max_delivery_attempts)
    assert settler_of(FakePublisher(fail=True)).settle(p, error=PermanentError("x")) is (
        Outcome.RETRIED
    )
    assert p.message.done == [("nack", 16.0)]  # after the backoff, as a retry


def test_a_dependency_error_holds_the_message_and_marks_the_dependency_down():
    dependencies = Dependencies(retry_min=60, retry_max=60)
    p = pending(SETTINGS.max_delivery_attempts)  # attempts do not matter while held
    try:
        outcome = settler_of(dependencies=dependencies).settle(
            p, error=DependencyError("postgres", "connection refused")
        )
        assert outcome is Outcome.HELD
        assert p.message.done == [] and not p.settled
        assert p.dependency == "postgres"
        assert set(dependencies.down()) == {"postgres"}
    finally:
        dependencies.close()


def test_a_dependency_that_answers_its_probe_yet_fails_the_event_again_is_the_events_fault():
    dependencies = Dependencies({"llm": Probe(lambda: None)}, retry_min=60, retry_max=60)
    settler = settler_of(dependencies=dependencies)
    message = FakeMessage(b"{}", {}, 1)
    try:
        outcomes = [
            settler.settle(Pending.of(message), error=LLMUnavailable("503"))
            for _ in range(SETBACKS_ALLOWED + 2)
        ]
    finally:
        dependencies.close()
    assert outcomes == [Outcome.HELD] * (SETBACKS_ALLOWED + 1) + [Outcome.RETRIED]
    assert message.done == [("nack", 1.0)]


def test_a_providers_quota_holds_the_message_however_often_it_comes_back():
    dependencies = Dependencies({"llm": Probe(lambda: None)}, retry_min=60, retry_max=60)
    settler = settler_of(dependencies=dependencies)
    message = FakeMessage(b"{}", {}, 1)
    try:
        outcomes = {
            settler.settle(Pending.of(message), error=LLMRateLimited("429"))
            for _ in range(SETBACKS_ALLOWED + 5)
        }
    finally:
        dependencies.close()
    assert outcomes == {Outcome.HELD}
    assert message.done == []


def test_a_dead_letter_hook_is_told_first_and_its_dependency_error_holds_the_message():
    told = []
    dependencies = Dependencies(retry_min=60, retry_max=60)

    def hook(notice):
        told.append(notice.reason)
        raise DependencyError("postgres", "down")

    p = pending(1)
    try:
        outcome = settler_of(dependencies=dependencies, hook=hook).settle(
            p, error=PermanentError("bad request")
        )
    finally:
        dependencies.close()
    assert (outcome, told, p.message.done) == (Outcome.HELD, ["bad request"], [])


def test_a_dead_letter_hook_that_fails_otherwise_does_not_stop_the_dead_letter():
    def hook(notice):
        raise ValueError("a bug in the hook")

    publisher = FakePublisher()
    p = pending(1)
    assert settler_of(publisher, hook=hook).settle(p, error=PermanentError("x")) is (
        Outcome.DEAD_LETTERED
    )
    assert len(publisher.published) == 1 and p.message.done == [("ack", 0.0)]


def test_a_message_handed_back_is_nacked_at_once():
    p = pending(3)
    settler_of().hand_back(p, "the worker stopped before handling it")
    assert p.message.done == [("nack", 0.0)] and p.settled
