import json
import uuid

from shared.bus.attributes import COUNTED, REPLAYED_FOR
from shared.bus.dlq import REPLAY_RUN, DeadLetterQueues
from shared.events import TurnRecorded, encode
from shared.session_buffer import SessionBuffer, SessionKey
from tests.bus_helpers import Recorder, failing, intercept, make_turn, running, summary_handler
from tests.conftest import both_pull_modes
from tests.support import run_cli, stays, wait_for


def _dead_letters(settings, subscription, expected, timeout=60):
    queues = DeadLetterQueues(settings)
    return wait_for(
        lambda: (found := queues.peek(subscription)) and len(found) >= expected and found,
        timeout,
        f"{expected} dead letter(s) in {subscription}",
        interval=0.2,
    )


@both_pull_modes
def test_invalid_messages_are_dead_lettered_once_with_a_reason_and_never_handled(
    settings, topology, publisher, valkey_client, ids
):
    buffer = SessionBuffer(valkey_client, 3600)
    recorder = Recorder()
    topic = topology.topic_path("turns")
    good = encode(make_turn(ids, 1))
    record = json.loads(good.data)
    # Each passes the topic's Avro schema but breaks a rule only our code knows.
    control = dict(record, user_id="bad\x07id", event_id=str(uuid.uuid4()))
    cases = [
        (good.data, dict(good.attributes, event_type="turn.exploded.v1")),
        (good.data, dict(good.attributes, schema_version="9")),
        (
            json.dumps(control).encode(),
            dict(good.attributes, event_id=control["event_id"]),
        ),
        (good.data, dict(good.attributes, app="someone-else")),
    ]
    for data, attributes in cases:
        publisher.publish_raw(topic, data, attributes, good.ordering_key).result(timeout=10)
    table = {TurnRecorded: recorder.wrap(summary_handler(settings, buffer))}
    with running(settings, "turns-summary", table, publisher):
        letters = _dead_letters(settings, "turns-summary", len(cases))
        # A wrong retry would show within the retry backoff (0-1 s here): watch for 3 s.
        stays(lambda: recorder.count() == 0, 3, "no delivery to the handler")
        assert len(DeadLetterQueues(settings).peek("turns-summary")) == 4

    assert recorder.count() == 0
    reasons = sorted(letter.reason for letter in letters)
    assert reasons == sorted(
        [
            "unknown event_type attribute 'turn.exploded.v1'",
            "unsupported schema_version '9' for turn.recorded.v1",
            "user_id: must not contain control characters",
            "attribute app does not match the body's app",
        ]
    )
    assert {letter.attempts for letter in letters} == {1}
    assert len(letters) == 4
    shown = run_cli(settings, "dlq", "show", "turns-summary")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == "4 dead letters in turns-summary (not consumed)"
    assert "reason=unknown event_type attribute 'turn.exploded.v1'" in shown.stdout
    listed = run_cli(settings, "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["SUBSCRIPTION", "DEAD-LETTER", "SUBSCRIPTION", "WAITING"]
    counts = {line.split()[0]: int(line.split()[-1]) for line in rows}
    assert counts == {
        "turns-summary": 4,
        "turns-extraction": 0,
        "memory-generate-extraction": 0,
        "compaction-requests": 0,
        "extraction-requests": 0,
    }


@both_pull_modes
def test_a_transient_failure_twice_then_success_applies_once(
    settings, topology, publisher, valkey_client, ids
):
    buffer = SessionBuffer(valkey_client, 3600)
    recorder = Recorder()
    turn = make_turn(ids, 1)
    handler = failing(2, summary_handler(settings, buffer), lambda e: True)
    with running(settings, "turns-summary", {TurnRecorded: recorder.wrap(handler)}, publisher):
        publisher.publish(turn).result(timeout=10)
        wait_for(lambda: "applied" in recorder.outcomes("turn-0001"), 60, "the third attempt")

    assert [(a, o) for (_t, a, o) in recorder.calls] == [
        (1, "error:injected failure 1"),
        (2, "error:injected failure 2"),
        (3, "applied"),
    ]
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    assert [t.turn_id for t in buffer.read(key).turns] == ["turn-0001"]


def test_a_handler_that_always_fails_ends_in_the_dead_letters_and_replay_applies_it_once(
    settings, topology, publisher, valkey_client, ids
):
    buffer = SessionBuffer(valkey_client, 3600)
    recorder = Recorder()
    broken = {"on": True}
    turn = make_turn(ids, 1)

    def broken_until_fixed(event, delivery):
        if broken["on"]:
            raise ConnectionError("database is down")

    handler = intercept(summary_handler(settings, buffer), broken_until_fixed)
    with running(settings, "turns-summary", {TurnRecorded: recorder.wrap(handler)}, publisher):
        publisher.publish(turn).result(timeout=10)
        (letter,) = _dead_letters(settings, "turns-summary", 1, timeout=120)
        assert letter.event_id == turn.event_id
        assert letter.attempts == 5
        assert letter.reason == ("failed 5 attempts; last error ConnectionError: database is down")
        assert [a for (_t, a, _o) in recorder.calls] == [1, 2, 3, 4, 5]

        broken["on"] = False  # the cause is removed
        replay = run_cli(settings, "dlq", "replay", "turns-summary")
        assert replay.returncode == 0, replay.stderr
        assert replay.stdout.strip().splitlines()[-1] == "replayed 1, skipped 0, failed 0"
        assert f"replayed {turn.event_id} (turn.recorded.v1) for turns-summary" in replay.stderr
        wait_for(lambda: "applied" in recorder.outcomes("turn-0001"), 60, "the replayed event")

    assert recorder.outcomes("turn-0001").count("applied") == 1
    # The replayed message is the original (same event id, attributes and ordering
    # key), addressed to the subscription that dead-lettered it, with the run's id.
    first, replayed = recorder.deliveries[0], recorder.deliveries[-1]
    assert replayed.ordering_key == first.ordering_key == turn.ordering_key
    attributes = {k: v for k, v in replayed.attributes.items() if not k.startswith("goog")}
    assert len(attributes.pop(REPLAY_RUN)) == 32
    assert attributes == {
        "event_id": turn.event_id,
        "event_type": "turn.recorded.v1",
        "schema_version": "1",
        "app": ids["app"],
        REPLAYED_FOR: "turns-summary",
        COUNTED: "1",  # `dlq replay` reports what it publishes to the figures
    }
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    assert [t.turn_id for t in buffer.read(key).turns] == ["turn-0001"]
    assert DeadLetterQueues(settings).peek("turns-summary") == []
    # Replaying again finds nothing: the dead letter was acknowledged after the publish.
    again = run_cli(settings, "dlq", "replay", "turns-summary")
    assert again.stdout.strip().splitlines()[-1] == "replayed 0, skipped 0, failed 0"


def test_replay_filters_dry_run_and_limit(settings, topology, publisher, ids):
    # Dead-letter three turns of two apps straight into the dead-letter topic.
    dlq_topic = topology.topic_path("turns-extraction-dlq")
    events = [
        make_turn(dict(ids, app="app-a"), 1),
        make_turn(dict(ids, app="app-a"), 2),
        make_turn(dict(ids, app="app-b"), 3),
    ]
    for event in events:
        message = encode(event)
        attributes = dict(
            message.attributes, dead_letter_reason="test", dead_letter_delivery_attempt="5"
        )
        publisher.publish_raw(dlq_topic, message.data, attributes).result(timeout=10)

    dry = run_cli(settings, "dlq", "replay", "turns-extraction", "--app", "app-a", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.strip().splitlines()[-1] == "would replay 2, skipped 1, failed 0"
    assert len(DeadLetterQueues(settings).peek("turns-extraction")) == 3

    older = run_cli(settings, "dlq", "replay", "turns-extraction", "--older-than", "1h")
    assert older.stdout.strip().splitlines()[-1] == "replayed 0, skipped 3, failed 0"
    newer = run_cli(
        settings, "dlq", "replay", "turns-extraction", "--newer-than", "1h", "--dry-run"
    )
    assert newer.stdout.strip().splitlines()[-1] == "would replay 3, skipped 0, failed 0"

    one = run_cli(
        settings, "dlq", "replay", "turns-extraction", "--event-type", "turn.recorded.v1",
        "--app", "app-a", "--limit", "1",
    )  # fmt: skip
    assert one.returncode == 0, one.stderr
    # app-b's letter is skipped if it is read before the limit is reached; one of
    # app-a's is left unread once it is: "skipped" is 0 or 1, never more.
    assert one.stdout.strip().splitlines()[-1] in (
        "replayed 1, skipped 0, failed 0",
        "replayed 1, skipped 1, failed 0",
    )
    left = DeadLetterQueues(settings).peek("turns-extraction")
    assert sorted(letter.app for letter in left) == ["app-a", "app-b"]

    bad = run_cli(settings, "dlq", "replay", "no-such-subscription")
    assert bad.returncode == 2
    assert bad.stderr.startswith("agent-memory: unknown subscription 'no-such-subscription'; ")
