"""Compaction by the `gemini` provider through the real google-genai client against
the fake Gemini endpoint: the scripted summary comes back, 429s and unusable replies
are retried, and the prompt asks to keep every fact of the previous summary."""

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

from shared.llm import DialogueTurn, LLMError
from shared.llm.accounting import worker
from shared.llm.task_prompts import NOTHING_KEPT
from shared.tokens import estimate_tokens
from tests.fake_gemini import error_reply, json_reply, text_reply

T0 = datetime(2025, 11, 1, tzinfo=UTC)
PREVIOUS = "The user prefers Python for scripts. The API timeout must be 30 seconds."
EPISODES = [
    DialogueTurn("s1/t1", T0, "Never deploy on Fridays.", "Understood."),
    DialogueTurn("s1/t2", T0 + timedelta(hours=1), "We picked Postgres.", "Good choice."),
]
ADDITIONS = "The user never deploys on Fridays and picked Postgres (November 2025)."
# The previous summary is kept verbatim; the model only adds.
SUMMARY = f"{PREVIOUS}\n{ADDITIONS}"


def _calls(outcome):
    labels = {"app": "", "worker": worker(), "purpose": "compact", "result": outcome}
    return REGISTRY.get_sample_value("agent_memory_llm_calls_total", labels) or 0.0


def test_compact_keeps_the_previous_summary_and_adds_the_scripted_facts(gemini_llm, fake):
    fake.script("generateContent", json_reply({"additions": ADDITIONS}, prompt_tokens=50))
    completion = gemini_llm.compact(PREVIOUS, EPISODES, 1500)
    assert (completion.value, completion.attempts) == (SUMMARY, 1)
    assert completion.usage.input_tokens == 50 and completion.usage.output_tokens > 0
    (call,) = fake.calls("generateContent")
    prompt = call.prompt_text()
    assert f"Previous summary (kept as it is):\n{PREVIOUS}" in prompt
    assert "User: Never deploy on Fridays." in prompt and "User: We picked Postgres." in prompt
    system = call.body["systemInstruction"]["parts"][0]["text"]
    assert "Write only what the episodes ADD to the previous summary" in system
    assert f"Stay within {1500 - estimate_tokens(PREVIOUS)} tokens." in system
    config = call.body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"]["required"] == ["additions"]


@pytest.mark.parametrize(
    ("failure", "quota"),
    [
        (error_reply(429), 1),
        (text_reply("{oops"), 0),
        (json_reply({"additions": 5}), 0),
        (json_reply({}), 0),
    ],
    ids=["429", "not-json", "not-a-string", "no-additions"],
)
def test_a_429_or_an_unusable_reply_is_retried(gemini_llm, fake, failure, quota):
    fake.script("generateContent", failure, json_reply({"additions": ADDITIONS}))
    results = ("ok", "retried", "rate_limited", "failed")
    before = {result: _calls(result) for result in results}
    completion = gemini_llm.compact(PREVIOUS, EPISODES, 1500)
    assert (completion.value, completion.attempts) == (SUMMARY, 2)
    # Each of the two HTTP attempts counted once, with its own result; a 429 also
    # as rate_limited.
    expected = {"ok": 1, "retried": 1, "rate_limited": quota, "failed": 0}
    assert {result: _calls(result) - before[result] for result in results} == expected
    assert len(fake.calls("generateContent")) == 2


def test_a_refused_request_is_not_retried(gemini_llm, fake):
    fake.script("generateContent", error_reply(400))
    with pytest.raises(LLMError, match="^compact: HTTP 400"):
        gemini_llm.compact(PREVIOUS, EPISODES, 1500)
    assert len(fake.calls("generateContent")) == 1


def test_a_long_previous_summary_is_never_cut_and_the_episodes_still_add(gemini_llm, fake):
    previous = "The user keeps many facts. " * 100  # about 675 tokens
    fake.script("generateContent", json_reply({"additions": "The user likes tea. " * 50}))
    # 100 tokens asked: the previous summary stays whole, the additions get a quarter.
    value = gemini_llm.compact(previous, EPISODES, 100).value
    assert value.startswith(previous.strip() + "\nThe user likes tea.")
    assert estimate_tokens(value[len(previous.strip()) + 1 :]) <= 25
    system = fake.calls("generateContent")[0].body["systemInstruction"]["parts"][0]["text"]
    assert "Stay within 25 tokens." in system


def test_nothing_worth_keeping_and_no_previous_summary_says_so(gemini_llm, fake):
    fake.script("generateContent", json_reply({"additions": "  "}))
    assert gemini_llm.compact("", EPISODES, 1500).value == NOTHING_KEPT
    fake.script("generateContent", json_reply({"additions": ""}))
    assert gemini_llm.compact(PREVIOUS, EPISODES, 1500).value == PREVIOUS
