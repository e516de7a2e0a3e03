"""The memory tasks of the `gemini` provider through the real google-genai client
against the fake Gemini endpoint: exact parsing, retries of malformed replies,
the retry window, what the extraction prompt holds."""

from datetime import UTC, datetime

import pytest
from prometheus_client import REGISTRY

from shared.errors import dependency_of
from shared.llm import (
    Candidate,
    Decision,
    ExistingMemory,
    ExtractionInput,
    Found,
    InvalidAnswer,
    LLMError,
    Weighing,
)
from shared.llm.accounting import worker
from shared.llm.base import LLMRateLimited, LLMUnavailable
from shared.llm.gemini import GeminiLLM
from tests.fake_gemini import error_reply, json_reply, text_reply

INP = ExtractionInput.single(
    session_id="sess_2026_02",
    project_id="CloudRetail",
    prev_session_id="sess_2026_01",
    observed_at=datetime(2026, 2, 1, 9, 30, tzinfo=UTC),
    user="I've switched to Light Mode now, and the region is us-east1.",
    assistant="Noted: Light Mode, region us-east1.",
    turn_id="turn-7",
)
USER, ASSISTANT = INP.turns[0].user, INP.turns[0].assistant
MEMORIES = {
    "memories": [
        {
            "turn": "t1",
            "entity_name": "ui theme",
            "kind": "preference",
            "scope": "global",
            "project_id": "",
            "text": "User prefers Light Mode in session sess_2026_02.",
            "topic": "preferences",
        },
        {
            "turn": "t1",
            "entity_name": "region",
            "kind": "fact",
            "scope": "project",
            "project_id": "CloudRetail",
            "text": "For project CloudRetail, the region is us-east1.",
            "topic": "key_conversation_details",
        },
    ]
}
CANDIDATE = Candidate("ui theme", "preference", "global", "", "User prefers Light Mode.")
EXISTING = (
    ExistingMemory("mem-1", "ui theme", "preference", "global", "", "User prefers Dark Mode UI."),
    ExistingMemory("mem-2", "editor", "preference", "global", "", "User's editor is vim."),
)


def _run(gemini_llm, task):
    if task == "extract":
        return gemini_llm.extract(INP)
    if task == "consolidate":
        return gemini_llm.consolidate([Weighing(CANDIDATE, EXISTING)])
    return gemini_llm.decompose(
        "What is my theme and which region do I use now?", "sess_2", "sess_1"
    )


GOOD = {
    "extract": (
        MEMORIES,
        [
            Found(
                "turn-7",
                Candidate(
                    "ui theme",
                    "preference",
                    "global",
                    "",
                    "User prefers Light Mode in session sess_2026_02.",
                    "preferences",
                ),
            ),
            Found(
                "turn-7",
                Candidate(
                    "region",
                    "fact",
                    "project",
                    "CloudRetail",
                    "For project CloudRetail, the region is us-east1.",
                    "key_conversation_details",
                ),
            ),
        ],
    ),
    "consolidate": (
        {
            "decisions": [
                {
                    "candidate": "c1",
                    "action": "UPDATED",
                    "target": "m1",
                    "text": "User prefers Light Mode.",
                }
            ]
        },
        [Decision("UPDATED", "mem-1", "User prefers Light Mode.")],
    ),
    "decompose": (
        {"queries": ["What is my UI theme?", "Which region do I use in session sess_2?"]},
        ["What is my UI theme?", "Which region do I use in session sess_2?"],
    ),
}
# For each task, a reply that is JSON but not what the task needs.
MALFORMED = {
    "extract": {"memories": [{**MEMORIES["memories"][0], "kind": "opinion"}]},
    "consolidate": {
        "decisions": [
            {"candidate": "c1", "action": "UPDATED", "target": "m9", "text": "Light Mode."}
        ]
    },
    "decompose": {"queries": []},
}
TASKS = ["extract", "consolidate", "decompose"]


def _calls(task, outcome):
    """Model calls of this process for `task` with no app (none is set here)."""
    labels = {"app": "", "worker": worker(), "purpose": task, "result": outcome}
    return REGISTRY.get_sample_value("agent_memory_llm_calls_total", labels) or 0.0


@pytest.mark.parametrize("task", TASKS)
def test_each_task_reads_a_good_reply_exactly(gemini_llm, fake, task):
    reply, expected = GOOD[task]
    fake.script("generateContent", json_reply(reply, prompt_tokens=40))
    ok_before = _calls(task, "ok")
    completion = _run(gemini_llm, task)
    assert completion.value == expected
    assert completion.attempts == 1
    assert completion.usage.input_tokens == 40 and completion.usage.output_tokens > 0
    assert _calls(task, "ok") - ok_before == 1
    (call,) = fake.calls("generateContent")
    config = call.body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert "responseJsonSchema" in config


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("bad", ["schema", "not-json"])
def test_a_malformed_reply_is_retried(gemini_llm, fake, task, bad):
    reply, expected = GOOD[task]
    first = json_reply(MALFORMED[task]) if bad == "schema" else text_reply("{oops")
    fake.script("generateContent", first, json_reply(reply))
    retried_before = _calls(task, "retried")
    completion = _run(gemini_llm, task)
    assert (completion.value, completion.attempts) == (expected, 2)
    assert _calls(task, "retried") - retried_before == 1
    assert len(fake.calls("generateContent")) == 2


@pytest.mark.parametrize("task", TASKS)
def test_a_task_that_stays_malformed_fails_for_good_after_the_answer_retries(
    gemini_llm, fake, task
):
    fake.defaults["generateContent"] = lambda request: json_reply(MALFORMED[task])
    failed_before = _calls(task, "failed")
    with pytest.raises(InvalidAnswer, match=f"^{task}: 3 invalid answers from the model") as raised:
        _run(gemini_llm, task)
    # Replies came back, just not usable ones: the event is dead-lettered, not held.
    assert not isinstance(raised.value, LLMUnavailable)
    assert _calls(task, "failed") - failed_before == 1
    assert len(fake.calls("generateContent")) == 3


@pytest.mark.parametrize("status", [429, 503])
def test_an_endpoint_that_stays_down_until_the_window_is_over_is_unavailable(
    gemini_llm, fake, status
):
    short = GeminiLLM(gemini_llm.settings.model_copy(update={"llm_retry_seconds": 0.3}))
    fake.defaults["generateContent"] = lambda request: error_reply(status)
    before = {result: _calls("extract", result) for result in ("rate_limited", "retried", "failed")}
    with pytest.raises(
        LLMUnavailable, match=f"^extract: no usable reply after .*HTTP {status}"
    ) as raised:
        _run(short, "extract")
    assert dependency_of(raised.value) == "llm"
    # Only a quota is rate-limited (the worker holds it without counting setbacks).
    assert isinstance(raised.value, LLMRateLimited) is (status == 429)
    # Every HTTP attempt counted once, retried but the last, which failed; each
    # 429 also as rate_limited.
    sent = len(fake.calls("generateContent"))
    assert sent >= 2
    counted = {result: _calls("extract", result) - before[result] for result in before}
    quota = sent if status == 429 else 0
    assert counted == {"rate_limited": quota, "retried": sent - 1, "failed": 1}


@pytest.mark.parametrize(("status", "unavailable"), [(400, False), (401, True), (403, True)])
def test_refused_credentials_are_the_endpoints_fault_a_bad_request_the_events(
    gemini_llm, fake, status, unavailable
):
    fake.script("generateContent", error_reply(status))
    with pytest.raises(LLMError) as raised:
        _run(gemini_llm, "extract")
    assert isinstance(raised.value, LLMUnavailable) is unavailable
    assert len(fake.calls("generateContent")) == 1


def test_an_unknown_target_is_retried_until_a_known_one(gemini_llm, fake):
    def deleting(target):
        decision = {"candidate": "c1", "action": "DELETED", "target": target, "text": ""}
        return json_reply({"decisions": [decision]})

    fake.script("generateContent", deleting("mem-2"), deleting("m2"))
    revocation = Candidate("editor", "preference", "global", "", "User's editor is no longer vim.")
    completion = gemini_llm.consolidate([Weighing(revocation, EXISTING)])
    assert (completion.value, completion.attempts) == ([Decision("DELETED", "mem-2", "")], 2)
    prompt = fake.calls("generateContent")[0].prompt_text()
    # The model sees every memory it may name, by label, never by id.
    assert "- m1: entity: ui theme;" in prompt and "- m2: entity: editor;" in prompt
    assert "mem-1" not in prompt and "mem-2" not in prompt
    assert "User's editor is no longer vim.; may change: m1, m2" in prompt


def test_the_extraction_prompt_holds_the_turns_and_the_session_ids(gemini_llm, fake):
    fake.script("generateContent", json_reply(MEMORIES))
    gemini_llm.extract(INP)
    (call,) = fake.calls("generateContent")
    prompt = call.prompt_text()
    assert f"User: {USER}" in prompt
    assert f"Assistant: {ASSISTANT}" in prompt
    assert "Session: sess_2026_02" in prompt and "Previous session: sess_2026_01" in prompt
    assert "[t1] 2026-02-01T09:30:00+00:00, project CloudRetail" in prompt
    # The input has no tool calls or outputs, so none can be sent.
    assert "tool" not in prompt.lower()
    system = call.body["systemInstruction"]["parts"][0]["text"]
    assert '"this session" → "in session sess_2026_02"' in system
    assert '"previous session" → "in session sess_2026_01"' in system
    assert "ignore tool calls and tool outputs" in system
    assert call.api_key == "test-key"
    schema = call.body["generationConfig"]["responseJsonSchema"]
    item = schema["properties"]["memories"]["items"]
    assert item["properties"]["kind"]["enum"] == ["preference", "fact", "rule", "event"]
    assert item["properties"]["scope"]["enum"] == ["global", "project", "session"]
    assert item["properties"]["turn"]["enum"] == ["t1"]
    # What to keep: the managed topics, each described; every memory names one.
    assert item["properties"]["topic"]["enum"] == [
        "personal_info",
        "preferences",
        "key_conversation_details",
        "explicit_instructions",
        "rules",
    ]
    assert "- rules: constraints and vetoes to follow always" in system


def test_the_decomposition_instruction_names_both_sessions(gemini_llm, fake):
    fake.script("generateContent", json_reply({"queries": ["What is my theme?"]}))
    assert gemini_llm.decompose("What is my theme now?", "sess_2", "sess_1").value == [
        "What is my theme?"
    ]
    (call,) = fake.calls("generateContent")
    assert "Query: What is my theme now?" in call.prompt_text()
    system = call.body["systemInstruction"]["parts"][0]["text"]
    assert '"in session sess_2"' in system and '"in session sess_1"' in system
    assert (
        call.body["generationConfig"]["responseJsonSchema"]["properties"]["queries"]["maxItems"]
        == 4
    )
