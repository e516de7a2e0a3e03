import json
import uuid
from datetime import UTC, datetime

import pytest

from shared.errors import InvalidEvent, UnknownEventType
from shared.events import (
    CompactionRequested,
    Limits,
    ToolEvent,
    TurnRecorded,
    decode,
    derived_event_id,
    encode,
)
from shared.events.schemas import schema_problem


def make_turn(**overrides: object) -> TurnRecorded:
    values: dict[str, object] = {
        "event_id": str(uuid.uuid4()),
        "app": "app1",
        "user_id": "user_dev_42",
        "session_id": "sess_2026_01",
        "turn_id": "turn-1",
        "created_at": datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        "user": "I prefer Dark Mode.",
        "assistant": "Noted.",
        "project_id": "CloudRetail",
        "tool_events": (ToolEvent("pytest", '{"k": 1}', "42 passed"),),
    }
    values.update(overrides)
    return TurnRecorded(**values)  # type: ignore[arg-type]


def test_a_turn_round_trips_through_its_message_unchanged():
    turn = make_turn()
    message = encode(turn)
    assert message.topic == "turns"
    assert message.ordering_key == "app1/user_dev_42/sess_2026_01"
    assert message.attributes == {
        "event_id": turn.event_id,
        "event_type": "turn.recorded.v1",
        "schema_version": "1",
        "app": "app1",
    }
    assert decode(message.data, message.attributes) == turn


def test_the_body_is_plain_json_with_every_field_present():
    record = json.loads(encode(make_turn(project_id="")).data)
    assert record["project_id"] == ""
    assert record["prev_session_id"] == ""
    assert record["created_at"] == "2026-01-02T03:04:05.678901Z"
    assert set(record) == {
        "event_id", "app", "user_id", "session_id", "project_id", "prev_session_id",
        "turn_id", "created_at", "user", "assistant", "tool_events", "agent_id",
    }  # fmt: skip


def test_a_turn_of_a_producer_that_knows_no_agents_is_of_no_agent():
    message = encode(make_turn(agent_id="planner"))
    record = json.loads(message.data)
    assert record["agent_id"] == "planner"
    del record["agent_id"]
    older = decode(json.dumps(record).encode(), message.attributes)
    assert older == make_turn(event_id=record["event_id"], agent_id="")
    record["agent_id"] = "bad\u0007id"
    with pytest.raises(InvalidEvent, match="agent_id: must not contain control characters"):
        decode(json.dumps(record).encode(), message.attributes)


def test_derived_event_ids_are_stable_and_distinct():
    assert derived_event_id("a", "u", "s", "t1") == derived_event_id("a", "u", "s", "t1")
    assert derived_event_id("a", "u", "s", "t1") != derived_event_id("a", "u", "s", "t2")
    # the separator keeps ("a:b","c") and ("a","b:c") apart
    assert derived_event_id("a:b", "c") != derived_event_id("a", "b:c")
    uuid.UUID(derived_event_id("x"))


def _message(record: dict, **attributes: str) -> tuple[bytes, dict[str, str]]:
    # ensure_ascii: a lone surrogate travels as the JSON escape "\\ud800"
    attrs = {
        "event_id": record.get("event_id", ""),
        "event_type": "turn.recorded.v1",
        "schema_version": "1",
        "app": record.get("app", ""),
    }
    attrs.update(attributes)
    return json.dumps(record).encode(), attrs


def _record(**changes: object) -> dict:
    record = json.loads(encode(make_turn()).data)
    record.update(changes)
    return record


@pytest.mark.parametrize(
    ("record", "attributes", "reason"),
    [
        (
            _record(),
            {"event_type": "turn.deleted.v9"},
            "unknown event_type attribute 'turn.deleted.v9'",
        ),
        (_record(), {"schema_version": "2"}, "unsupported schema_version '2' for turn.recorded.v1"),
        (
            _record(user=5),
            {},
            "schema: agent_memory.events.v1.TurnRecorded.user is <5> of type <class 'int'> "
            "expected string",
        ),
        (_record(color="red"), {}, "schema: unknown field(s) color"),
        (_record(user_id=""), {}, "user_id: must not be empty"),
        (_record(user_id="a\x00b"), {}, "user_id: must not contain control characters"),
        (_record(session_id="s" * 257), {}, "session_id: must be at most 256 characters"),
        (_record(project_id="p\n"), {}, "project_id: must not contain control characters"),
        (_record(event_id="not-a-uuid"), {}, "event_id: must be a UUID"),
        (_record(created_at="yesterday"), {}, "created_at: not an RFC 3339 time with an offset"),
        (
            _record(created_at="2026-01-01T00:00:00"),
            {},
            "created_at: not an RFC 3339 time with an offset",
        ),
        (_record(), {"app": "other-app"}, "attribute app does not match the body's app"),
        (_record(user="a\ud800"), {}, "user: must be valid Unicode (it contains a lone surrogate)"),
        (_record(session_id="s\udfff"), {}, "session_id: must be valid Unicode"),
        (_record(assistant="a\x00b"), {}, "assistant: must not contain NUL characters"),
        (
            _record(tool_events=[{"name": "t", "arguments": "{}", "output": "x\x00"}]),
            {},
            "tool_events[0].output: must not contain NUL characters",
        ),
    ],
)
def test_a_bad_message_is_refused_with_its_reason(record, attributes, reason):
    data, attrs = _message(record, **attributes)
    with pytest.raises(InvalidEvent) as caught:
        decode(data, attrs)
    assert str(caught.value).startswith(reason)


def test_an_unknown_event_type_is_its_own_error():
    data, attrs = _message(_record(), event_type="nope")
    with pytest.raises(UnknownEventType):
        decode(data, attrs)


def test_a_body_that_is_not_json_is_refused():
    with pytest.raises(InvalidEvent, match="body is not JSON"):
        decode(b"{nope", {"event_type": "turn.recorded.v1", "schema_version": "1"})


def test_texts_over_the_limit_are_refused_naming_the_field():
    limits = Limits(max_message_bytes=10, max_tool_events_bytes=20)
    with pytest.raises(InvalidEvent, match="^turn.recorded.v1: assistant: is 11 bytes"):
        encode(make_turn(user="ok", assistant="x" * 11, tool_events=()), limits)
    with pytest.raises(InvalidEvent, match="tool_events: 23 bytes, over the limit of 20 bytes"):
        encode(make_turn(user="ok", assistant="ok"), limits)
    # multi-byte characters count as bytes, not characters
    with pytest.raises(InvalidEvent, match="user: is 12 bytes"):
        encode(make_turn(user="é" * 6, tool_events=()), limits)


def test_compaction_rules_beyond_the_schema():
    request = CompactionRequested(
        event_id=str(uuid.uuid4()),
        app="a",
        user_id="u",
        retention_days=0,
        batch_limit=50,
        created_at=datetime.now(UTC),
    )
    with pytest.raises(InvalidEvent, match="retention_days: must be at least 1"):
        encode(request)


def test_schema_check_names_nested_unknown_fields():
    record = _record(tool_events=[{"name": "a", "arguments": "{}", "output": "", "extra": 1}])
    assert (
        schema_problem("turn.recorded.v1", record)
        == "schema: unknown field(s) tool_events[0].extra"
    )


def test_reserved_attributes_are_not_carried_into_a_new_publish():
    from shared.bus.dlq import DeadLetter
    from shared.bus.publisher import publishable

    attrs = {"event_id": "e", "googclient_schemaname": "x", "GOOG_x": "y", "app": "a"}
    assert publishable(attrs) == {"event_id": "e", "app": "a"}
    letter = DeadLetter(
        ack_id="ack",
        message_id="m",
        data=b"{}",
        attributes={
            **attrs,
            "dead_letter_reason": "r",
            "dead_letter_delivery_attempt": "5",
            "dead_letter_ordering_key": "a/u/s",
            "CloudPubSubDeadLetterSourceDeliveryCount": "5",
        },
        dead_lettered_at=datetime.now(UTC),
    )
    assert letter.original_attributes() == {"event_id": "e", "app": "a"}
    assert letter.ordering_key() == "a/u/s"
    assert letter.attempts == 5
    assert letter.reason == "r"


def test_an_ordering_key_longer_than_pubsub_allows_is_hashed():
    short = make_turn()
    assert short.ordering_key == "app1/user_dev_42/sess_2026_01"
    long = make_turn(user_id="é" * 256, session_id="ü" * 256)
    key = long.ordering_key
    assert key.startswith("sha256:") and len(key.encode()) <= 1024
    assert key == make_turn(user_id="é" * 256, session_id="ü" * 256).ordering_key


def test_dead_letter_reasons_are_cut_by_bytes_on_a_character_boundary():
    from shared.bus.attributes import truncate_utf8

    cut = truncate_utf8("é" * 600, 1000)
    assert cut == "é" * 500 and len(cut.encode()) == 1000
    assert truncate_utf8("aé", 2) == "a"


def test_publish_batches_keep_order_per_topic_within_the_request_limits():
    from concurrent.futures import Future

    from google.pubsub_v1.types import PubsubMessage

    from shared.bus.publisher import MAX_BATCH_BYTES, MAX_BATCH_MESSAGES, _batches, _Pending

    def pending(topic: str, i: int, size: int = 10) -> _Pending:
        return _Pending(topic, PubsubMessage(data=str(i).encode()), size, Future())

    queued = [pending("a", i) for i in range(MAX_BATCH_MESSAGES + 5)]
    queued.insert(3, pending("b", -1))
    batches = _batches(queued)
    assert [(b[0].topic, len(b)) for b in batches] == [
        ("a", MAX_BATCH_MESSAGES),
        ("a", 5),
        ("b", 1),
    ]
    assert [p.message.data for b in batches[:2] for p in b] == [
        str(i).encode() for i in range(MAX_BATCH_MESSAGES + 5)
    ]
    big = [pending("a", i, MAX_BATCH_BYTES // 2) for i in range(3)]
    assert [len(b) for b in _batches(big)] == [2, 1]
