"""What the extraction worker does when the model misbehaves, for every model
provider (`gemini`, `openai`), through the worker's own subscriptions against the
provider's fake endpoint: answers that stay invalid dead-letter the window at once
with the fault and the answer, and write nothing (no window is taken for "no
memories", an invented id touches no memory); a quota, an outage or a model too
slow for its timeout hold the window without spending a delivery attempt, and it
is extracted once the model answers."""

from __future__ import annotations

import threading

import pytest

from services.extraction_worker.handlers import REQUESTS, TURNS_SUBSCRIPTION
from shared.bus.dlq import DeadLetterQueues
from shared.embeddings import make_embedder
from shared.llm import OfflineLLM
from tests.bus_helpers import Recorder, extraction_worker, inline_extraction, make_turn
from tests.fake_gemini_model import offline_chat, offline_model
from tests.model_endpoints import PROVIDERS, model_endpoint
from tests.support import wait_for
from tests.window_helpers import ledgered, query, waiting

SEEDED = ["My editor is vim.", "I prefer tabs over spaces."]


class AppRecorder(Recorder):
    """Records the events of one app only: the worker's check of idle windows also
    closes windows other tests left in the shared database, and this worker then
    extracts them too."""

    def __init__(self, app: str) -> None:
        super().__init__()
        self.app = app

    def _record(self, event, delivery, result) -> None:
        if getattr(event, "app", None) == self.app:
            super()._record(event, delivery, result)


def _letters(queues, subscription, app):
    return [letter for letter in queues.peek(subscription) if letter.attributes["app"] == app]


@pytest.fixture(params=PROVIDERS)
def endpoint(request):
    with model_endpoint(request.param) as found:
        yield found


def _prompt(request) -> str:
    messages = request.messages()
    return messages[0][1] if messages else ""


def _answering(endpoint, bad_for: str, bad):
    """The fake's default: `bad` for requests of the task whose answer field is
    `bad_for` (memories, decisions), the `offline` provider's answer for the rest."""
    rules = offline_model if endpoint.provider == "gemini" else offline_chat

    def answer(request):
        if f'Answer with JSON: {{"{bad_for}"' in _prompt(request):
            return bad
        return rules(request)

    return answer


def _memories(pool, ids):
    """Every memory of the user, as it is: id, text, last change, end of validity."""
    return query(
        pool,
        "SELECT id::text, text, updated_at, valid_to FROM memories "
        "WHERE app = %s AND user_id = %s ORDER BY text",
        ids["app"],
        ids["user_id"],
    )


def _seed(settings, pool, ids):
    """Two memories of the user, written by the offline provider."""
    extraction = inline_extraction(pool, OfflineLLM(), make_embedder(settings), settings)
    for n, text in enumerate(SEEDED, start=1):
        extraction.handle_turn(make_turn(ids, n, user=text, session_id="sess-seed"), None)
    return wait_for(lambda: len(found := _memories(pool, ids)) == 2 and found, 30, "the seed")


@pytest.mark.parametrize("fault", ["invented-id", "truncated", "empty"])
def test_answers_that_stay_invalid_dead_letter_the_window_at_once_and_write_nothing(
    settings, topology, publisher, pool, ids, endpoint, fault
):
    local = endpoint.settings(settings, extraction_window_turns=1)
    before = _seed(local, pool, ids)
    tabs = next(row[0] for row in before if "tabs" in row[1])
    if fault == "invented-id":
        # The model names a memory it was not given (the user's other one) to update.
        decision = {"candidate": "c1", "action": "UPDATED", "target": tabs, "text": "Gone."}
        task, bad = "decisions", endpoint.answer({"decisions": [decision]})
        said = f"decisions[0]: 'target' '{tabs}' is not one the candidate may change"
        expected = f"unknown_id: {said}"
    elif fault == "truncated":
        task, bad = "memories", endpoint.truncated('{"memories": [')
        expected = "truncated: the answer was cut off at the output token limit"
    else:
        task, bad = "memories", endpoint.empty()
        expected = "empty: the answer was empty"
    endpoint.fake.defaults[endpoint.method] = _answering(endpoint, task, bad)
    turn = make_turn(ids, 3, user="My editor is helix.")
    recorder = AppRecorder(ids["app"])
    queues = DeadLetterQueues(local)
    llm, embedder = endpoint.llm(local), make_embedder(local)
    with extraction_worker(local, pool, llm, embedder, publisher, recorder):
        publisher.publish(turn).result(timeout=10)
        (letter,) = wait_for(
            lambda: _letters(queues, TURNS_SUBSCRIPTION, ids["app"]), 60, "the turn's dead letter"
        )
        (request,) = wait_for(
            lambda: _letters(queues, REQUESTS, ids["app"]), 30, "the request's own dead letter"
        )
    assert request.attributes["dead_letter_delivery_attempt"] == "1"
    task_name = "consolidate" if task == "decisions" else "extract"
    reason = letter.attributes["dead_letter_reason"]
    assert reason.startswith(
        f"its extraction window (1 turns) failed: {task_name}: 3 invalid answers from the "
        f"model, the last {expected}; it began: "
    )
    assert letter.event_id == turn.event_id
    # Dead-lettered on its first delivery: asking the model again twice was the retry.
    # (A turn redelivered meanwhile publishes its request again: that copy finds the
    # window gone, a duplicate.)
    requests = [(a, o) for label, a, o in recorder.calls if not label.startswith("turn-")]
    assert [a for a, o in requests if o.startswith("error:")] == [1]
    assert all(o.startswith("error:") or o == "duplicate" for _a, o in requests)
    # Nothing written: no memory changed, the turn neither extracted nor waiting.
    assert _memories(pool, ids) == before
    assert ledgered(pool, [turn]) == []
    assert waiting(pool, ids) == []


@pytest.mark.parametrize("trouble", ["quota", "outage", "slow"])
def test_a_model_that_cannot_answer_for_a_while_holds_the_window_without_spending_attempts(
    settings, topology, publisher, pool, ids, endpoint, trouble
):
    local = endpoint.settings(
        settings,
        extraction_window_turns=1,
        llm_timeout_seconds=0.5,
        dependency_retry_min_seconds=0.2,
        dependency_retry_max_seconds=0.5,
    )
    rules = offline_model if endpoint.provider == "gemini" else offline_chat
    down = threading.Event()
    down.set()

    def answer(request):
        if not down.is_set():
            return rules(request)
        if trouble == "quota":  # asks for longer than AM_LLM_RETRY_SECONDS allows
            return endpoint.error(429, retry_after=30)
        if trouble == "outage":
            return endpoint.error(503)
        reply = rules(request)  # its first token after the call's timeout
        reply.delay = 1.0
        return reply

    endpoint.fake.defaults[endpoint.method] = answer
    turn = make_turn(ids, 1, user="My editor is helix.")
    recorder = AppRecorder(ids["app"])
    llm, embedder = endpoint.llm(local), make_embedder(local)
    with extraction_worker(local, pool, llm, embedder, publisher, recorder):
        publisher.publish(turn).result(timeout=10)
        # The window's request failed on the model and was held, then ran again.
        wait_for(
            lambda: (
                sum(1 for label, _a, _o in recorder.calls if not label.startswith("turn-")) >= 2
            ),
            60,
            "the request held and run again",
        )
        down.clear()
        wait_for(lambda: ledgered(pool, [turn]) == [turn.event_id], 60, "the turn extracted")
        assert _letters(DeadLetterQueues(local), TURNS_SUBSCRIPTION, ids["app"]) == []
    requests = [(a, o) for label, a, o in recorder.calls if not label.startswith("turn-")]
    assert {a for a, _o in requests} == {1}  # no delivery attempt was spent
    outcomes = [o for _a, o in requests]
    # Failed (held) until the model answered, then applied once; a copy of the request
    # that a redelivered turn published finds the window extracted, a duplicate.
    first = outcomes.index("applied")
    assert first >= 1 and all(o.startswith("error:") for o in outcomes[:first])
    assert set(outcomes[first + 1 :]) <= {"duplicate"}
    texts = [row[1] for row in _memories(pool, ids)]
    assert texts == ["User's editor is helix."]
