"""A profile field's values, as the API takes them and as the extraction reads them,
and the `offline` provider's reading of the user's own words."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.llm.base import ExtractionInput, ExtractionTurn, MalformedReply, ProfileFound
from shared.llm.offline import OfflineLLM
from shared.llm.profile_prompts import parse_profile, profile_prompt
from shared.profiles.schema import ProfileField, of_setting

NAME = ProfileField("name", "string")
LANGUAGE = ProfileField("preferred_language", "enum", "", ("English", "French", "German"))
SIZE = ProfileField("team_size", "number")
ON_CALL = ProfileField("on_call", "boolean")
ZONE = ProfileField("timezone", "string")
ROLE = ProfileField("role", "string")
FIELDS = (NAME, ZONE, LANGUAGE, ROLE, SIZE, ON_CALL)


@pytest.mark.parametrize(
    ("field", "text", "value"),
    [
        (LANGUAGE, "french", "French"),
        (SIZE, "12", 12),
        (SIZE, "1,200", 1200),
        (SIZE, "2.5.", 2.5),
        (ON_CALL, "Yes", True),
        (ON_CALL, "off", False),
        (NAME, "  Ada   Lovelace. ", "Ada Lovelace"),
    ],
)
def test_the_extraction_reads_a_value_as_its_fields_type(field, text, value):
    read = field.read(text)
    assert read == value and type(read) is type(value)


@pytest.mark.parametrize(
    ("field", "text", "message"),
    [
        (LANGUAGE, "Klingon", "'Klingon' is not one of English, French, German"),
        (SIZE, "twelve", "'twelve' is not a number"),
        (ON_CALL, "sometimes", "'sometimes' is not a boolean"),
        (NAME, " . ", "must not be empty"),
        (NAME, "x" * 201, "is 201 characters, over 200"),
    ],
)
def test_a_value_that_does_not_fit_is_refused_with_why(field, text, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        field.read(text)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (SIZE, "7", "must be a number"),
        (SIZE, True, "must be a number"),
        (SIZE, float("inf"), "must be a finite number"),
        (ON_CALL, 1, "must be true or false"),
        (NAME, 3, "must be a string"),
        (NAME, "a\x00b", "must not contain NUL"),
    ],
)
def test_the_api_takes_a_value_of_its_json_type_only(field, value, message):
    with pytest.raises(ValueError, match=message):
        field.checked(value)


def test_a_stored_schema_reads_back():
    stored = {"fields": [{"name": "tier", "type": "enum", "description": "d", "values": ["a"]}]}
    assert of_setting(stored).fields == (ProfileField("tier", "enum", "d", ("a",)),)
    assert of_setting(None).fields == ()


def _window(*texts: str) -> ExtractionInput:
    at = datetime(2026, 3, 1, tzinfo=UTC)
    turns = tuple(ExtractionTurn(f"t{n}", "", at, text, "ok") for n, text in enumerate(texts, 1))
    return ExtractionInput("s", "", turns, profile=FIELDS)


@pytest.mark.parametrize(
    ("said", "found"),
    [
        ("Hi, my name is Ada Lovelace and I'm based in the Europe/Berlin timezone.",
         [("name", "Ada Lovelace"), ("timezone", "Europe/Berlin")]),
        ("Call me Ada.", [("name", "Ada")]),
        ("Please answer in French from now on.", [("preferred_language", "French")]),
        ("I prefer to speak German, actually.", [("preferred_language", "German")]),
        ("I work as a data engineer at Acme.", [("role", "data engineer")]),
        ("I'm a backend engineer.", [("role", "backend engineer")]),
        ("My role is staff engineer, mostly infra.", [("role", "staff engineer")]),
        ("My team size is 12.", [("team_size", "12")]),
        ("My time zone is CET.", [("timezone", "CET")]),
        ("The weather is nice and my cat is called Tom.", []),
    ],
)  # fmt: skip
def test_the_offline_provider_reads_what_the_user_says_of_themselves(said, found):
    completion = OfflineLLM().fill_profile(_window(said))
    assert [(f.field, f.value) for f in completion.value] == found


def test_only_the_users_words_count_and_each_turn_answers_for_itself():
    inp = _window("My name is Ada.", "Call me Grace.")
    inp = ExtractionInput(
        inp.session_id,
        "",
        (*inp.turns, ExtractionTurn("t3", "", inp.turns[0].observed_at, "ok", "My name is Bot.")),
        profile=FIELDS,
    )
    assert OfflineLLM().fill_profile(inp).value == [
        ProfileFound("t1", "name", "Ada"),
        ProfileFound("t2", "name", "Grace"),
    ]


def test_a_models_answer_is_read_strictly():
    inp = _window("Call me Ada.")
    assert "- preferred_language (enum: English, French, German)" in profile_prompt(inp)
    good = {"profile": [{"turn": "t1", "field": "name", "value": " Ada "}]}
    assert parse_profile(good, inp) == [ProfileFound("t1", "name", "Ada")]
    for bad, message in [
        ({"profile": [{"turn": "t9", "field": "name", "value": "x"}]}, "turn"),
        ({"profile": [{"turn": "t1", "field": "shoe", "value": "x"}]}, "field"),
        ({"profile": [{"turn": "t1", "field": "name", "value": ""}]}, "'value' is empty"),
        ({"memories": []}, "no 'profile'"),
    ]:
        with pytest.raises(MalformedReply, match=message):
            parse_profile(bad, inp)
