"""How every model provider (`gemini`, `openai`) meets a model that misbehaves, through
its real client against its fake endpoint: an invalid answer (off the schema, an
unknown enum value, an invented id, not JSON, empty, cut at the token limit) is
asked again with what was wrong, a bounded number of times, then ends in a
permanent error that names the fault and holds the answer's start; a slow first
token, 429s and 503s in bursts are retried, honouring `Retry-After`."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from prometheus_client import REGISTRY

from shared.errors import dependency_of, is_permanent
from shared.llm import (
    Candidate,
    Decision,
    ExistingMemory,
    ExtractionInput,
    Fault,
    Found,
    InvalidAnswer,
    Weighing,
)
from shared.llm.accounting import worker
from shared.llm.base import LLMRateLimited, LLMUnavailable
from shared.llm.extraction_prompts import extraction_prompt
from tests.model_endpoints import PROVIDERS, as_json, model_endpoint

INP = ExtractionInput.single(
    session_id="sess_2",
    project_id="",
    prev_session_id="",
    observed_at=datetime(2026, 2, 1, 9, 30, tzinfo=UTC),
    user="I prefer Light Mode.",
    assistant="Noted.",
    turn_id="turn-7",
)
MEMORY = {
    "turn": "t1",
    "entity_name": "ui theme",
    "kind": "preference",
    "scope": "global",
    "project_id": "",
    "text": "User prefers Light Mode.",
    "topic": "preferences",
}
GOOD = {"memories": [MEMORY]}
FOUND = [
    Found(
        "turn-7", Candidate("ui theme", "preference", "global", "", MEMORY["text"], "preferences")
    )
]
PROMPT = extraction_prompt(INP)
# Each fault: the model's bad answer (a value written as JSON, or raw text) and the
# error it is told of.
FAULTS = {
    Fault.OFF_SCHEMA: ({"memory": [MEMORY]}, "the reply has no 'memories'"),
    Fault.UNKNOWN_VALUE: (
        {"memories": [{**MEMORY, "kind": "opinion"}]},
        "memories[0]: 'kind' is 'opinion', not one of preference, fact, rule, event",
    ),
    Fault.UNKNOWN_ID: (
        {"memories": [{**MEMORY, "turn": "t9"}]},
        "memories[0]: 'turn' is 't9', not one of t1",
    ),
    Fault.NOT_JSON: (
        "{oops",
        "not JSON (Expecting property name enclosed in double quotes at character 1)",
    ),
    Fault.EMPTY: (None, "the answer was empty"),
    Fault.TRUNCATED: ('{"memories": [{"turn": "t1", "entity_', ""),
}
TOLD = (
    "Your answer is not usable: {error}. Answer again with JSON only, exactly as the schema "
    "says, using only the values and labels given."
)
SHORTER = (
    "Your answer was cut off at the output limit. Answer again with the same JSON, shorter: "
    "fewer and shorter texts."
)


@pytest.fixture(params=PROVIDERS)
def endpoint(request):
    with model_endpoint(request.param) as found:
        yield found


def _bad(endpoint, fault):
    """The fault's reply, and the text the model answered with."""
    value, _error = FAULTS[fault]
    if fault is Fault.EMPTY:
        return endpoint.empty(), ""
    if fault is Fault.TRUNCATED:
        return endpoint.truncated(value), value
    if isinstance(value, str):
        return endpoint.text(value), value
    return endpoint.answer(value), as_json(value)


def _invalid(provider, task, fault):
    labels = {"provider": provider, "purpose": task, "fault": str(fault)}
    return REGISTRY.get_sample_value("agent_memory_llm_invalid_answers_total", labels) or 0.0


def _calls(task, result):
    labels = {"app": "", "worker": worker(), "purpose": task, "result": result}
    return REGISTRY.get_sample_value("agent_memory_llm_calls_total", labels) or 0.0


@pytest.mark.parametrize("fault", list(FAULTS))
def test_an_invalid_answer_is_asked_again_with_what_was_wrong(endpoint, fault):
    llm = endpoint.llm(endpoint.settings(llm_retry_seconds=5.0))
    bad, said = _bad(endpoint, fault)
    endpoint.script(bad, endpoint.answer(GOOD))
    before = (_invalid(endpoint.provider, "extract", fault), _calls("extract", "retried"))
    completion = llm.extract(INP)
    assert (completion.value, completion.attempts) == (FOUND, 2)
    after = (_invalid(endpoint.provider, "extract", fault), _calls("extract", "retried"))
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
    assert endpoint.messages(0) == [("user", PROMPT)]
    if fault is Fault.TRUNCATED:
        told = SHORTER
        # Asked again with twice the room.
        assert endpoint.max_output_tokens(1) == 2 * endpoint.max_output_tokens(0)
    else:
        told = TOLD.format(error=FAULTS[fault][1])
        assert endpoint.max_output_tokens(1) == endpoint.max_output_tokens(0)
    if fault is Fault.EMPTY:  # no empty message of the model's: the prompt says it
        assert endpoint.messages(1) == [("user", f"{PROMPT}\n\n{told}")]
    else:
        assert endpoint.messages(1) == [("user", PROMPT), ("assistant", said), ("user", told)]


def test_answers_that_stay_invalid_end_in_a_permanent_error_with_the_fault_and_the_answer(
    endpoint,
):
    llm = endpoint.llm(endpoint.settings(llm_retry_seconds=5.0))
    value, error = FAULTS[Fault.UNKNOWN_VALUE]
    endpoint.answer_always(endpoint.answer(value))
    fault = Fault.UNKNOWN_VALUE
    counted = ("retried", "failed", "ok")
    before = [_invalid(endpoint.provider, "extract", fault)] + [
        _calls("extract", r) for r in counted
    ]
    with pytest.raises(InvalidAnswer) as raised:
        llm.extract(INP)
    assert str(raised.value) == (
        f"extract: 3 invalid answers from the model, the last unknown_value: {error}; "
        f"it began: {as_json(value)}"
    )
    assert raised.value.fault is Fault.UNKNOWN_VALUE
    # Dead-lettered at once by a worker: neither retried nor held.
    assert is_permanent(raised.value) and dependency_of(raised.value) is None
    # The first answer and AM_LLM_ANSWER_RETRIES (2) more.
    assert len(endpoint.calls()) == 3
    after = [_invalid(endpoint.provider, "extract", fault)] + [
        _calls("extract", r) for r in counted
    ]
    assert [a - b for a, b in zip(after, before, strict=True)] == [3, 2, 1, 0]


def test_the_error_holds_only_the_start_of_a_long_answer(endpoint):
    llm = endpoint.llm(endpoint.settings(llm_answer_retries=0))
    answer = "Sure! Here are the memories:\n\n" + "la " * 400
    endpoint.script(endpoint.text(answer))
    with pytest.raises(InvalidAnswer) as raised:
        llm.extract(INP)
    flat = " ".join(answer.split())
    message = str(raised.value)
    assert message.startswith("extract: 1 invalid answers from the model, the last not_json: ")
    assert message.endswith(f"; it began: {flat[:300]}… ({len(flat)} characters)")
    assert len(endpoint.calls()) == 1


@pytest.mark.parametrize("target", ["mem-2", "m3"], ids=["another-memorys-id", "an-invented-label"])
def test_a_decision_on_a_memory_the_candidate_was_not_given_is_never_taken(endpoint, target):
    llm = endpoint.llm(endpoint.settings(llm_answer_retries=1))
    theme = ExistingMemory(
        "mem-1", "ui theme", "preference", "global", "", "User prefers Dark Mode."
    )
    editor = ExistingMemory("mem-2", "editor", "preference", "global", "", "User's editor is vim.")
    candidate = Candidate("ui theme", "preference", "global", "", "User prefers Light Mode.")
    # Two candidates: the second may change mem-2 (m2), the first only mem-1 (m1).
    other = Candidate("editor", "preference", "global", "", "User's editor is helix.")
    weighings = [Weighing(candidate, (theme,)), Weighing(other, (editor,))]
    wrong = {"candidate": "c1", "action": "UPDATED", "target": target, "text": "x"}
    fine = {"candidate": "c2", "action": "NONE", "target": None, "text": ""}
    endpoint.answer_always(endpoint.answer({"decisions": [wrong, fine]}))
    with pytest.raises(InvalidAnswer) as raised:
        llm.consolidate(weighings)
    assert raised.value.fault is Fault.UNKNOWN_ID
    assert f"decisions[0]: 'target' {target!r} is not one the candidate may change" in str(
        raised.value
    )
    assert len(endpoint.calls()) == 2
    # A target of its own is taken.
    endpoint.script(
        endpoint.answer({"decisions": [{**wrong, "target": "m1", "text": "Light."}, fine]})
    )
    assert llm.consolidate(weighings).value == [
        Decision("UPDATED", "mem-1", "Light."),
        Decision("NONE", None, ""),
    ]


def test_a_first_token_after_the_calls_timeout_is_asked_again(endpoint):
    llm = endpoint.llm(endpoint.settings(llm_timeout_seconds=0.3, llm_retry_seconds=5.0))
    endpoint.script(endpoint.answer(GOOD, delay=0.8), endpoint.answer(GOOD))
    before = _calls("extract", "retried")
    completion = llm.extract(INP)
    assert (completion.value, completion.attempts) == (FOUND, 2)
    assert _calls("extract", "retried") - before == 1


@pytest.mark.parametrize("retry_after", [None, 0.2], ids=["no-retry-after", "retry-after"])
@pytest.mark.parametrize("status", [429, 503])
def test_a_burst_of_refusals_is_waited_out(endpoint, status, retry_after):
    llm = endpoint.llm(endpoint.settings(llm_retry_seconds=5.0))
    burst = [endpoint.error(status, retry_after=retry_after) for _ in range(3)]
    endpoint.script(*burst, endpoint.answer(GOOD))
    before = _calls("extract", "rate_limited")
    completion = llm.extract(INP)
    assert (completion.value, completion.attempts) == (FOUND, 4)
    assert _calls("extract", "rate_limited") - before == (3 if status == 429 else 0)
    arrivals = [call.at for call in endpoint.calls()]
    gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:], strict=False)]
    if retry_after is not None:
        assert min(gaps) >= retry_after, gaps


@pytest.mark.parametrize("status", [429, 503])
def test_a_wait_asked_beyond_the_retry_window_gives_up_at_once(endpoint, status):
    llm = endpoint.llm(endpoint.settings(llm_retry_seconds=5.0))
    endpoint.script(endpoint.error(status, retry_after=30))
    with pytest.raises(LLMUnavailable) as raised:
        llm.extract(INP)
    # The worker holds the message for the endpoint, never spending its attempts; only
    # a quota is held however long it lasts.
    assert isinstance(raised.value, LLMRateLimited) is (status == 429)
    assert dependency_of(raised.value) == "llm"
    assert re.fullmatch(
        rf"extract: no usable reply after 1 attempts in \d+\.\d s \(asked to wait 30 s more\); "
        rf"last: HTTP {status}.*",
        str(raised.value),
    )
    assert len(endpoint.calls()) == 1


def test_the_workers_calls_count_against_the_apps_limit_for_every_provider(
    endpoint, valkey_client, stack
):
    from shared.bootstrap import bootstrap
    from shared.llm.accounting import for_app
    from shared.llm.throttle import KEY_PREFIX

    app = f"app-{endpoint.provider}-{id(endpoint)}"
    local = endpoint.settings(valkey_url=stack.valkey_url, llm_max_calls_per_minute=2)
    resources = bootstrap(local, use_valkey=True, llm=True, llm_throttle=True)
    try:
        endpoint.answer_always(endpoint.answer(GOOD))
        with for_app(app):
            for _ in range(2):
                resources.llm.extract(INP)
        # Both calls took a slot of the app's window in Valkey: a third would wait.
        assert valkey_client.zcard(KEY_PREFIX + app) == 2
        assert len(endpoint.calls()) == 2
        wait = resources.llm.throttle._admit(keys=[KEY_PREFIX + app], args=[2, 60_000_000, "probe"])
        assert 0 < int(wait) <= 60_000_000
    finally:
        resources.close()
