"""Every model call counted and limited: the calls and tokens of each app and
worker, the per-app limit of the workers' calls shared through Valkey by every
replica, and a provider's quota (429) held without spending delivery attempts.
The real google-genai client against the fake Gemini endpoint, the real Valkey
and Pub/Sub emulator."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime

import pytest
import valkey
from prometheus_client import REGISTRY

from services.dev.localstack.process import free_port
from shared.bootstrap import bootstrap, make_valkey
from shared.bus.dlq import DeadLetterQueues
from shared.bus.settling import SETBACKS_ALLOWED
from shared.errors import dependency_of
from shared.events import TurnRecorded
from shared.llm import ExtractionInput, OfflineLLM, Usage
from shared.llm.accounting import for_app, set_worker, worker
from shared.llm.gemini import GeminiLLM
from shared.llm.throttle import KEY_PREFIX, Throttle
from shared.session_buffer import SessionBuffer, SessionKey
from shared.tokens import estimate_tokens
from tests.bus_helpers import (
    Recorder,
    attempts_spent,
    fill_then_cross,
    make_turn,
    running,
    summary_handler,
    watched_model,
)
from tests.fake_gemini import error_reply, json_reply, text_reply
from tests.support import stays, wait_for
from tests.window_helpers import gemini as gemini_settings

INP = ExtractionInput.single(
    session_id="sess-1",
    project_id="atlas",
    prev_session_id="",
    observed_at=datetime(2026, 2, 1, 9, 30, tzinfo=UTC),
    user="I prefer Python 3.11 across all my projects.",
    assistant="Noted.",
    turn_id="turn-1",
)
MEMORIES = {
    "memories": [
        {
            "turn": "t1",
            "entity_name": "python version",
            "kind": "preference",
            "scope": "global",
            "project_id": "",
            "text": "User prefers Python 3.11 across all their projects.",
            "topic": "preferences",
        }
    ]
}


def _gemini(settings, fake, **updates):
    # A longer retry budget than window_helpers' 0.2 s: these calls wait out rate limits.
    return gemini_settings(settings, fake, **{"llm_retry_seconds": 5.0, **updates})


def _calls(app: str, purpose: str, result: str) -> float:
    labels = {"app": app, "worker": worker(), "purpose": purpose, "result": result}
    return REGISTRY.get_sample_value("agent_memory_llm_calls_total", labels) or 0.0


def _tokens(app: str, purpose: str, direction: str) -> float:
    labels = {"app": app, "worker": worker(), "purpose": purpose, "direction": direction}
    return REGISTRY.get_sample_value("agent_memory_llm_tokens_total", labels) or 0.0


def _throttled(app: str) -> float:
    labels = {"app": app, "worker": worker()}
    return REGISTRY.get_sample_value("agent_memory_llm_throttled_seconds_total", labels) or 0.0


@pytest.fixture
def name_worker():
    """`set_worker` for one test: this process's name is restored after it."""
    previous = worker()
    yield set_worker
    set_worker(previous)


def test_a_gemini_call_counts_one_call_and_its_tokens_for_its_app_and_worker(
    gemini_llm, fake, ids, name_worker
):
    name_worker("extraction")
    app = ids["app"]
    fake.script("generateContent", json_reply(MEMORIES))
    counted = [
        (app, "extract", "ok"),
        ("", "extract", "ok"),
        (app, "extract", "retried"),
        (app, "extract", "rate_limited"),
    ]
    before = {labels: _calls(*labels) for labels in counted}
    tokens_before = {d: _tokens(app, "extract", d) for d in ("input", "output")}
    with for_app(app):
        completion = gemini_llm.extract(INP)
    (call,) = fake.calls("generateContent")
    # The fake reports what Gemini would: the request's own input, the reply's output.
    sent = estimate_tokens(call.system_text() + call.prompt_text())
    received = estimate_tokens(json.dumps(MEMORIES))
    assert completion.usage == Usage(sent, received)
    after = {labels: _calls(*labels) - before[labels] for labels in counted}
    assert after == {
        (app, "extract", "ok"): 1,
        ("", "extract", "ok"): 0,
        (app, "extract", "retried"): 0,
        (app, "extract", "rate_limited"): 0,
    }
    assert _tokens(app, "extract", "input") - tokens_before["input"] == sent
    assert _tokens(app, "extract", "output") - tokens_before["output"] == received


def test_the_offline_provider_counts_one_call_per_task_like_gemini(ids, name_worker):
    name_worker("extraction")
    app = ids["app"]
    before = (_calls(app, "extract", "ok"), _tokens(app, "extract", "input"))
    with for_app(app):
        completion = OfflineLLM().extract(INP)
    assert _calls(app, "extract", "ok") - before[0] == 1
    assert _tokens(app, "extract", "input") - before[1] == completion.usage.input_tokens > 0


def test_the_apis_calls_count_for_the_keys_app_and_the_api(name_worker, client, ids):
    # The API names its process at start-up (`name_worker` restores it after).
    app = ids["app"]
    before = _calls(app, "decompose", "ok")
    answer = client.post(
        "/v1/memories:search",
        json={
            "user_id": ids["user_id"],
            "query": "Which editor? And which theme?",
            "decompose": True,
        },
    )
    assert answer.status_code == 200, answer.text
    assert worker() == "api"
    assert _calls(app, "decompose", "ok") - before == 1


def test_the_limit_holds_across_two_replicas_sharing_one_valkey(settings, fake, ids, valkey_client):
    limit, extra, window = 3, 2, 2.0
    app = ids["app"]
    arrivals: list[float] = []

    def answer(request):
        arrivals.append(time.monotonic())
        return json_reply({"queries": ["Which Python version?"]})

    fake.defaults["generateContent"] = answer
    gemini = _gemini(settings, fake)
    # Two replicas: each its own provider, throttle and Valkey client.
    replicas = [
        GeminiLLM(gemini, throttle=Throttle(make_valkey(gemini), limit, window_seconds=window))
        for _ in range(2)
    ]
    done: list[float] = []
    errors: list[BaseException] = []

    def call(llm: GeminiLLM) -> None:
        try:
            with for_app(app):
                llm.decompose("Which Python version?", "", "")
            done.append(time.monotonic())
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    waits_before, throttled_before = _calls(app, "decompose", "rate_limited"), _throttled(app)
    # Every call asks at once, so exactly `extra` of them find the window full.
    threads = [threading.Thread(target=call, args=(replicas[n % 2],)) for n in range(limit + extra)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(arrivals) == limit, 10, "the calls within the limit")
    stays(lambda: len(arrivals) == limit, window * 0.6, "no call past the limit in the window")
    wait_for(lambda: len(done) + len(errors) == limit + extra, 10 + window, "the waiting calls")
    for thread in threads:
        thread.join(timeout=5)
    assert errors == []
    assert len(fake.calls("generateContent")) == limit + extra
    first = min(arrivals)
    later = sorted(arrivals)[limit:]
    assert all(at - first >= window - 0.05 for at in later), (arrivals, window)
    assert _calls(app, "decompose", "rate_limited") - waits_before == extra
    waited = _throttled(app) - throttled_before
    assert extra * (window - 0.5) <= waited < extra * (window + 2)
    # The window's key goes away by itself.
    assert 0 < valkey_client.pttl(KEY_PREFIX + app) <= window * 1000 + 1000


def test_a_valkey_outage_while_throttling_is_a_valkey_dependency_error(settings, fake):
    gemini = _gemini(settings, fake, valkey_url=f"redis://127.0.0.1:{free_port()}/0")
    llm = GeminiLLM(gemini, throttle=Throttle(make_valkey(gemini), 5))
    with pytest.raises(valkey.exceptions.ValkeyError) as raised:
        llm.decompose("Which Python version?", "", "")
    assert dependency_of(raised.value) == "valkey"
    assert fake.calls("generateContent") == []  # nothing sent past a limit it cannot see


def test_workers_get_the_throttle_when_the_limit_is_set(settings, fake):
    limited = _gemini(settings, fake, llm_max_calls_per_minute=10)
    worker_resources = bootstrap(limited, use_valkey=True, llm=True, llm_throttle=True)
    api_resources = bootstrap(limited, llm=True)
    unlimited = bootstrap(_gemini(settings, fake), use_valkey=True, llm=True, llm_throttle=True)
    try:
        assert isinstance(worker_resources.llm.throttle, Throttle)
        assert worker_resources.llm.throttle.limit == 10
        assert api_resources.llm.throttle is None  # the API's calls are not limited
        assert unlimited.llm.throttle is None
        with pytest.raises(RuntimeError, match="counted in Valkey"):
            bootstrap(limited, llm=True, llm_throttle=True)
    finally:
        for resources in (worker_resources, api_resources, unlimited):
            resources.close()


def test_a_quota_the_probe_passes_holds_the_message_without_spending_attempts(
    settings, topology, publisher, valkey_client, fake, ids
):
    # A tokens-per-minute quota: the one-token probe passes while every real call
    # gets 429. Before, the message failed "on a dependency that answers its probe"
    # a few times, then spent its attempts and went to the dead letters.
    gemini = _gemini(settings, fake, llm_retry_seconds=0.3)
    quota = {"exhausted": True}

    def answer(request):
        if "responseJsonSchema" not in request.body.get("generationConfig", {}):
            return text_reply("pong")  # the probe
        if quota["exhausted"]:
            return error_reply(429, "Resource has been exhausted (e.g. check quota).")
        return json_reply({"summary": "The user prefers options."})

    fake.defaults["generateContent"] = answer
    buffer = SessionBuffer(valkey_client, 3600)
    recorder = Recorder()
    handler = recorder.wrap(summary_handler(gemini, buffer, GeminiLLM(gemini)))
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    dependencies = watched_model(gemini, retry_min=0.05, retry_max=0.1)
    spent = attempts_spent("turns-summary")
    results = ("ok", "retried", "failed", "rate_limited")
    before = {r: _calls(ids["app"], "summarize", r) for r in results}

    def refused() -> list[int]:
        return [a for (_label, a, outcome) in recorder.calls if outcome.startswith("error")]

    table = {TurnRecorded: handler}
    with running(gemini, "turns-summary", table, publisher, dependencies) as runtime:
        turns = [make_turn(ids, n, user=f"I prefer option {n}.") for n in range(1, 12)]
        fill_then_cross(publisher, buffer, key, turns)
        wait_for(lambda: len(refused()) > SETBACKS_ALLOWED + 2, 60, "more refusals than setbacks")
        assert attempts_spent("turns-summary") == spent
        assert buffer.read(key).summary.version == 0

        quota["exhausted"] = False
        wait_for(lambda: buffer.read(key).summary.version == 1, 60, "the fold once it answers")
        wait_for(lambda: runtime.in_flight() == 0, 30, "every message settled")
    assert set(refused()) == {1}  # held every time: no delivery attempt spent
    assert attempts_spent("turns-summary") == spent
    assert DeadLetterQueues(gemini).peek("turns-summary") == []
    # Every attempt counted for the turns' app: each 429 (retried, or the last of
    # its task failed), and the one that answered.
    quota_replies = [
        c for c in fake.calls("generateContent") if c.reply is not None and c.reply.status == 429
    ]
    tasks_failed = len(refused())
    counted = {r: _calls(ids["app"], "summarize", r) - before[r] for r in before}
    assert counted == {
        "ok": 1,
        "retried": len(quota_replies) - tasks_failed,
        "failed": tasks_failed,
        "rate_limited": len(quota_replies),
    }
