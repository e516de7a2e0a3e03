"""The `gemini` provider through the real google-genai client against the fake Gemini
endpoint, inside the summary worker on the real Valkey and Pub/Sub emulator."""

from datetime import UTC, datetime

import pytest
from prometheus_client import REGISTRY

from shared.bus.dlq import DeadLetterQueues
from shared.events import ToolEvent, TurnRecorded
from shared.llm import DialogueTurn, LLMError
from shared.llm.accounting import worker
from shared.llm.gemini import GeminiLLM
from shared.session_buffer import SessionBuffer, SessionKey
from tests.bus_helpers import (
    Recorder,
    fill_then_cross,
    make_turn,
    running,
    summary_handler,
    watched_model,
)
from tests.fake_gemini import Reply, error_reply, json_reply
from tests.support import stays, wait_for
from tests.window_helpers import gemini


@pytest.fixture
def gemini_settings(settings, fake):
    return gemini(settings, fake, llm_retry_seconds=5.0, llm_timeout_seconds=1.0)


def _turns(ids, count):
    return [
        make_turn(
            ids,
            n,
            user=f"I prefer option {n}.",
            tool_events=(ToolEvent("shell", '{"cmd": "ls"}', f"secret tool output {n}"),),
        )
        for n in range(1, count + 1)
    ]


def _tokens(app, task="summarize"):
    """Tokens this process counted for `app`'s `task` (the runtime sets the app)."""
    return sum(
        REGISTRY.get_sample_value(
            "agent_memory_llm_tokens_total",
            {"app": app, "worker": worker(), "purpose": task, "direction": direction},
        )
        or 0.0
        for direction in ("input", "output")
    )


def _calls(app, result, task="summarize"):
    labels = {"app": app, "worker": worker(), "purpose": task, "result": result}
    return REGISTRY.get_sample_value("agent_memory_llm_calls_total", labels) or 0.0


@pytest.mark.parametrize(
    "failures",
    [
        [error_reply(429), error_reply(429)],
        [Reply(raw=b'{"candidates": [{"content": {"parts": [{"text": "{oops"}]}}]}')],
        [json_reply({"summary": ""})],
    ],
    ids=["429-twice", "malformed", "empty"],
)
def test_a_fold_survives_retryable_replies_and_stores_one_summary(
    gemini_settings, topology, publisher, valkey_client, fake, ids, failures
):
    good = json_reply({"summary": "The user prefers option 7."})
    fake.script("generateContent", *failures, good)
    buffer = SessionBuffer(valkey_client, 3600)
    handler = summary_handler(gemini_settings, buffer, GeminiLLM(gemini_settings))
    tokens_before = _tokens(ids["app"])
    ok_before = _calls(ids["app"], "ok")
    turns = _turns(ids, 11)
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    with running(gemini_settings, "turns-summary", {TurnRecorded: handler}, publisher):
        fill_then_cross(publisher, buffer, key, turns)
        wait_for(lambda: buffer.read(key).summary.version == 1, 30, "the summary")
        stays(lambda: buffer.read(key).summary.version == 1, 1.0, "one summary version")
    view = buffer.read(key, with_folds=True)
    assert view.summary.text == "The user prefers option 7."
    assert view.folds == {1: [t.turn_id for t in turns[:7]]}
    calls = fake.calls("generateContent")
    assert len(calls) == len(failures) + 1
    prompt = calls[-1].prompt_text()
    # The turns' texts, oldest first; never tool calls or their outputs.
    assert prompt.index("I prefer option 1.") < prompt.index("I prefer option 7.")
    assert "option 8." not in prompt and "secret tool output" not in prompt
    system = calls[-1].body["systemInstruction"]["parts"][0]["text"]
    assert "Retain key constraints, user choices, technical decisions and ongoing goals" in system
    assert calls[-1].body["generationConfig"]["responseMimeType"] == "application/json"
    assert calls[-1].api_key == "test-key"
    # Every call that answered counted its tokens, as the reply reported them
    # (the request's own input tokens, as Gemini reports them), for the turns' app.
    assert calls[-1].reply.body["usageMetadata"]["promptTokenCount"] == calls[-1].input_tokens()
    assert _tokens(ids["app"]) - tokens_before == sum(_reported(call.reply) for call in calls)
    assert _calls(ids["app"], "ok") - ok_before == 1


def _reported(reply):
    usage = (reply.body or {}).get("usageMetadata", {}) if reply.raw is None else {}
    return usage.get("promptTokenCount", 0) + usage.get("candidatesTokenCount", 0)


def test_a_model_that_stays_overloaded_holds_the_fold_until_it_answers(
    gemini_settings, topology, publisher, valkey_client, fake, ids
):
    # The model answers 503 past the retry window: not the event's fault. The
    # worker holds the turn that crossed the trigger (its delivery attempts
    # untouched, the buffer as it was), probes the model with a one-token
    # request, and folds once the model answers again.
    failing = gemini_settings.model_copy(update={"llm_retry_seconds": 0.3})
    fake.defaults["generateContent"] = lambda request: error_reply(503, "overloaded")
    buffer = SessionBuffer(valkey_client, 3600)
    recorder = Recorder()
    handler = recorder.wrap(summary_handler(failing, buffer, GeminiLLM(failing)))
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    dependencies = watched_model(failing, retry_min=0.2, retry_max=0.5)
    table = {TurnRecorded: handler}
    with running(failing, "turns-summary", table, publisher, dependencies) as runtime:
        turns = _turns(ids, 11)
        fill_then_cross(publisher, buffer, key, turns)
        wait_for(lambda: "llm" in dependencies.down(), 60, "the worker to see the model down")
        probes = len(fake.calls("generateContent"))
        wait_for(lambda: len(fake.calls("generateContent")) > probes + 1, 30, "probes of the model")
        view = buffer.read(key, with_folds=True)
        assert [t.turn_id for t in view.turns] == [t.turn_id for t in turns]
        assert (view.summary.version, view.folds) == (0, {})

        fake.defaults["generateContent"] = lambda request: json_reply({"summary": "Options."})
        wait_for(lambda: buffer.read(key).summary.version == 1, 60, "the fold once it answers")
        wait_for(lambda: runtime.in_flight() == 0, 30, "every message settled")
    failed = [label for (label, _a, outcome) in recorder.calls if outcome.startswith("error")]
    assert set(failed) == {"turn-0011"}
    assert {attempt for (_label, attempt, _o) in recorder.calls} == {1}
    assert DeadLetterQueues(failing).peek("turns-summary") == []


def test_a_timeout_is_retried_and_a_refused_request_is_not(gemini_settings, fake):
    llm = GeminiLLM(gemini_settings)
    turn = DialogueTurn("t1", datetime(2026, 1, 1, tzinfo=UTC), "I prefer tea.", "Noted.")
    fake.script(
        "generateContent",
        Reply(body=json_reply({"summary": "late"}).body, delay=2.0),  # past the 1 s timeout
        json_reply({"summary": "The user prefers tea."}),
    )
    completion = llm.summarize("", [turn], 600)
    assert (completion.value, completion.attempts) == ("The user prefers tea.", 2)
    fake.script("generateContent", error_reply(400, "bad request"))
    with pytest.raises(LLMError, match="HTTP 400"):
        llm.summarize("", [turn], 600)
    assert len(fake.calls("generateContent")) == 3
