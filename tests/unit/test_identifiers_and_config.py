import pytest

from shared.bus.dlq import parse_age
from shared.bus.topology import (
    SUBSCRIPTIONS,
    dead_letter_name,
    full_name,
    schema_name,
    subscription_spec,
)
from shared.config import ConfigError, load_settings
from shared.identifiers import identifier_problem, text_problem
from shared.session_buffer import SessionKey
from shared.tokens import estimate_tokens


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("user_dev_42", None),
        ("ünïcødé ok", None),
        ("x" * 256, None),
        ("", "must not be empty"),
        ("x" * 257, "must be at most 256 characters"),
        ("tab\there", "must not contain control characters"),
        ("del\x7f", "must not contain control characters"),
        (42, "must be a string"),
    ],
)
def test_identifier_rules(value, problem):
    assert identifier_problem(value) == problem


def test_text_limit_counts_utf8_bytes():
    assert text_problem("abc", 3) is None
    assert text_problem("abcd", 3) == "is 4 bytes, over the limit of 3 bytes"


def test_a_bad_setting_names_its_environment_variable(monkeypatch):
    monkeypatch.setenv("AM_API_PORT", "eighty")
    with pytest.raises(ConfigError, match="AM_API_PORT: Input should be a valid integer"):
        load_settings()


def test_a_bad_topic_prefix_is_refused(monkeypatch):
    monkeypatch.setenv("AM_TOPIC_PREFIX", "goog-")
    with pytest.raises(ConfigError, match="AM_TOPIC_PREFIX"):
        load_settings()


@pytest.mark.parametrize(("value", "disabled"), [("true", True), ("TRUE", True), ("false", False)])
def test_only_an_explicit_true_disables_authentication(monkeypatch, value, disabled):
    monkeypatch.setenv("AM_AUTH_DISABLED", value)
    assert load_settings().auth_disabled is disabled


@pytest.mark.parametrize("value", ["1", "yes", "on", ""])
def test_anything_but_true_or_false_for_auth_disabled_is_refused(monkeypatch, value):
    monkeypatch.setenv("AM_AUTH_DISABLED", value)
    with pytest.raises(ConfigError, match="AM_AUTH_DISABLED: must be true or false"):
        load_settings()


def test_authentication_is_on_unless_disabled(monkeypatch):
    monkeypatch.delenv("AM_AUTH_DISABLED", raising=False)
    assert load_settings().auth_disabled is False


def test_max_delivery_attempts_below_pubsubs_minimum_is_refused(monkeypatch):
    monkeypatch.setenv("AM_MAX_DELIVERY_ATTEMPTS", "3")
    with pytest.raises(ConfigError, match="AM_MAX_DELIVERY_ATTEMPTS"):
        load_settings()


def test_names_come_from_one_place():
    assert full_name("agent-memory-", "turns") == "agent-memory-turns"
    assert dead_letter_name("turns-summary") == "turns-summary-dlq"
    assert schema_name("agent-memory-", "turn.recorded.v1") == "agent-memory-turn-recorded-v1"
    assert [s.name for s in SUBSCRIPTIONS] == [
        "turns-summary",
        "turns-extraction",
        "memory-generate-extraction",
        "compaction-requests",
        "extraction-requests",
    ]
    assert [s.name for s in SUBSCRIPTIONS if s.ordered] == [
        "turns-summary",
        "turns-extraction",
        "extraction-requests",
    ]


@pytest.mark.parametrize(
    "given", ["turns-summary", "agent-memory-turns-summary", "agent-memory-turns-summary-dlq"]
)
def test_a_subscription_is_found_by_any_of_its_names(given):
    assert subscription_spec(given, "agent-memory-").name == "turns-summary"


def test_an_unknown_subscription_lists_the_known_ones():
    with pytest.raises(KeyError, match="known: turns-summary, turns-extraction"):
        subscription_spec("nope", "agent-memory-")


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("15m", 900), ("2h", 7200), ("7d", 604800), ("30", 30)]
)
def test_ages(text, seconds):
    assert parse_age(text).total_seconds() == seconds


def test_a_bad_age_is_refused():
    with pytest.raises(ValueError, match="not a duration"):
        parse_age("soon")


def test_session_keys_share_one_hash_tag_and_escape_separators():
    key = SessionKey("app", "user", "sess")
    assert key.keys == [
        "am:{app:user:sess}:turns",
        "am:{app:user:sess}:data",
        "am:{app:user:sess}:seen",
        "am:{app:user:sess}:meta",
        "am:{app:user:sess}:folds",
        "am:{app:user:sess}:fold-lock",
    ]
    assert SessionKey("a:b", "c", "d").tag != SessionKey("a", "b:c", "d").tag
    assert SessionKey("a}", "b", "c").tag == "{a%7D:b:c}"


def test_token_estimate():
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens("x" * 400) == 100


def test_a_missing_emulator_says_how_to_install_it(tmp_path):
    from services.dev.localstack.components import ComponentError
    from services.dev.localstack.emulator import find_emulator

    with pytest.raises(ComponentError) as caught:
        find_emulator(None, roots=[tmp_path])
    message = str(caught.value)
    assert message.startswith("the Pub/Sub emulator was not found")
    assert "gcloud components install pubsub-emulator" in message
    assert "AM_PUBSUB_EMULATOR_BIN" in message
    script = tmp_path / "platform/pubsub-emulator/bin/cloud-pubsub-emulator"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    assert find_emulator(None, roots=[tmp_path]) == script


def test_what_counts_as_permanent():
    import psycopg

    from shared.errors import InvalidEvent, PermanentError, is_permanent

    assert is_permanent(InvalidEvent("bad")) and is_permanent(PermanentError("x"))
    assert is_permanent(psycopg.DataError("cannot store NUL"))
    assert not is_permanent(psycopg.OperationalError("server closed the connection"))
    assert not is_permanent(ConnectionError("valkey down"))


def test_the_offline_providers_former_name_is_still_accepted(monkeypatch):
    monkeypatch.setenv("AM_LLM_PROVIDER", "rules")
    assert load_settings().llm_provider == "offline"


def test_the_windows_former_setting_names_are_still_read(monkeypatch):
    monkeypatch.setenv("AM_SUMMARY_WINDOW_TURNS", "7")
    monkeypatch.setenv("AM_EPISODE_KEY_WINDOW", "3")
    settings = load_settings()
    assert (settings.summary_kept_turns, settings.episode_key_neighbours) == (7, 3)
