"""Profiles filled by a model: the `gemini` provider (the real google-genai client)
and the `openai` one (the real openai client) against the fake endpoints, whose
model answers as the `offline` provider would. The request carries the app's
fields and the task's response schema; an answer naming a field the app does not
have is asked again; a window's profile values are written with its memories."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.embeddings import make_embedder
from shared.llm import ExtractionInput, make_llm
from shared.llm.base import ExtractionTurn, ProfileFound
from shared.llm.gemini import GeminiLLM
from shared.llm.profile_prompts import PROFILE_INSTRUCTION, profile_prompt, profile_schema
from shared.profiles.schema import ProfileField
from tests.bus_helpers import inline_extraction, make_turn
from tests.fake_gemini import json_reply
from tests.fake_gemini_model import offline_chat
from tests.fake_openai import FakeOpenAI
from tests.integration.test_openai_provider import _settings as openai_settings
from tests.window_helpers import gemini, rules_fake

FIELDS = (
    ProfileField("name", "string", "what to call them"),
    ProfileField("preferred_language", "enum", "", ("English", "French")),
)
INP = ExtractionInput(
    "s1",
    "",
    (
        ExtractionTurn("turn-1", "", datetime(2026, 2, 1, tzinfo=UTC), "Call me Ada.", "Hi Ada."),
        ExtractionTurn(
            "turn-2", "", datetime(2026, 2, 1, 0, 1, tzinfo=UTC), "Reply in French.", "D'accord."
        ),
    ),
    profile=FIELDS,
)
EXPECTED = [
    ProfileFound("turn-1", "name", "Ada"),
    ProfileFound("turn-2", "preferred_language", "French"),
]


@pytest.fixture
def fake():
    with rules_fake() as server:
        yield server


def test_gemini_is_asked_with_the_fields_and_the_schema(fake, gemini_llm):
    assert gemini_llm.fill_profile(INP).value == EXPECTED
    (call,) = fake.calls("generateContent")
    config = call.body["generationConfig"]
    assert config["responseJsonSchema"] == profile_schema(INP)
    assert call.body["systemInstruction"]["parts"][0]["text"] == PROFILE_INSTRUCTION
    assert call.prompt_text() == profile_prompt(INP)
    assert "- preferred_language (enum: English, French)" in call.prompt_text()
    schema = config["responseJsonSchema"]["properties"]["profile"]["items"]["properties"]
    assert schema["field"]["enum"] == ["name", "preferred_language"]


def test_an_answer_naming_another_field_is_asked_again(fake, gemini_llm):
    wrong = {"profile": [{"turn": "t1", "field": "shoe_size", "value": "42"}]}
    fake.script("generateContent", json_reply(wrong))
    completion = gemini_llm.fill_profile(INP)
    assert completion.value == EXPECTED and completion.attempts == 2
    retry = fake.calls("generateContent")[1].prompt_text()
    assert "shoe_size" in retry


def test_openai_fills_the_profile_with_its_schema_as_the_response_format():
    with FakeOpenAI() as server:
        server.defaults["chat"] = offline_chat
        settings = openai_settings(server)
        assert make_llm(settings).fill_profile(INP).value == EXPECTED
        (call,) = server.calls("chat")
        assert call.body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "profile", "schema": profile_schema(INP)},
        }


def test_a_window_extracted_by_gemini_fills_the_profile(client, settings, ids, fake, pool):
    schema = {"fields": [{"name": "name", "type": "string"}, {"name": "role", "type": "string"}]}
    assert client.put("/v1/config/profile", json=schema).status_code == 200
    local = gemini(settings.model_copy(update={"default_app": ids["app"]}), fake)
    extraction = inline_extraction(pool, GeminiLLM(local), make_embedder(local), local, window=2)
    said = ["My name is Grace Hopper.", "I work as a compiler engineer at the Navy."]
    for n, text in enumerate(said, start=1):
        extraction.handle_turn(make_turn(ids, n, user=text, assistant="Noted."), None)
    profile = client.get(f"/v1/users/{ids['user_id']}/profile").json()
    assert profile["values"] == {"name": "Grace Hopper", "role": "compiler engineer"}
    asked = fake.calls("generateContent")
    tasks = [c for c in asked if 'Answer with JSON: {"profile"' in c.prompt_text()]
    assert len(tasks) == 1  # one call for the window's two turns
