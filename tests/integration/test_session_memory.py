"""Short-term memory: the session buffer through the API and the summary worker's
summarize-before-trim, on the real Valkey and Pub/Sub emulator."""

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
import valkey
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from services.api.app import create_app
from services.api.context_models import ContextResponse
from services.api.memory_models import SearchResponse
from services.api.models import SessionResponse
from services.dev.localstack.process import free_port
from services.dev.localstack.valkey_server import LocalValkey
from services.summary_worker.folding import Folder, FoldPolicy
from shared.events import TurnRecorded, format_time
from shared.llm import OfflineLLM
from shared.session_buffer import (
    FOLD_TURN_GONE,
    FOLD_VERSION_MOVED,
    BufferedTurn,
    FoldResult,
    SessionBuffer,
    SessionKey,
)
from tests.bus_helpers import Recorder, make_turn, running, summary_handler
from tests.support import wait_for

VALKEY_ERRORS = "agent_memory_store_errors_total"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def client(settings, topology):
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _turn_body(ids, n, **extra):
    body = {
        "user_id": ids["user_id"],
        "turn_id": f"turn-{n:04d}",
        "created_at": format_time(T0 + timedelta(seconds=n)),
        "user": f"I prefer option {n}.",
        "assistant": f"Noted: option {n}.",
    }
    body.update(extra)
    return body


def _timing(response) -> dict[str, float]:
    """The entries of a response's Server-Timing header, in order."""
    parts = [part.strip().split(";dur=") for part in response.headers["server-timing"].split(",")]
    return {name: float(dur) for name, dur in parts}


def _view(client, ids, session_id=None):
    response = client.get(
        f"/v1/sessions/{session_id or ids['session_id']}", params={"user_id": ids["user_id"]}
    )
    assert response.status_code == 200, response.text
    timing = _timing(response)
    assert list(timing) == ["app"] and timing["app"] > 0
    body = response.json()
    # The route builds the body by hand: it must be exactly what the model lays out.
    assert SessionResponse.model_validate(body).model_dump() == body
    return body


def test_a_recorded_turn_is_readable_at_once_and_a_retry_is_one_turn(
    client, settings, topology, publisher, valkey_client, ids
):
    body = _turn_body(ids, 1, project_id="CloudRetail")
    first = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=body)
    assert first.status_code == 202, first.text
    timing = _timing(first)
    assert list(timing) == ["buffer", "publish", "app"]
    # The API's whole time covers the buffer append and the publish wait.
    assert 0 < timing["buffer"] + timing["publish"] <= timing["app"]
    # Read-your-writes: the API buffered it before answering.
    view = _view(client, ids)
    assert [t["turn_id"] for t in view["turns"]] == ["turn-0001"]
    assert view["turns"][0]["project_id"] == "CloudRetail"
    again = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=body)
    assert (
        again.json()
        == first.json()
        == {
            "event_id": first.json()["event_id"],
            "turn_id": "turn-0001",
            "buffered": True,
        }
    )
    # Both publishes reach the summary worker; the second delivery changes nothing.
    recorder = Recorder()
    buffer = SessionBuffer(valkey_client, 3600)
    table = {TurnRecorded: recorder.wrap(summary_handler(settings, buffer))}
    with running(settings, "turns-summary", table, publisher):
        wait_for(lambda: recorder.count() == 2, 30, "both deliveries")
    assert recorder.outcomes("turn-0001") == ["duplicate", "duplicate"]
    view = _view(client, ids)
    assert (view["turn_count"], view["turns_total"]) == (1, 1)


def test_turns_are_ordered_by_created_at_and_a_late_turn_lands_in_place(client, ids):
    for n in (1, 3, 2):
        response = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=_turn_body(ids, n))
        assert response.status_code == 202
    view = _view(client, ids)
    assert [t["turn_id"] for t in view["turns"]] == ["turn-0001", "turn-0002", "turn-0003"]
    assert view["tokens"] == sum(t["tokens"] for t in view["turns"])


BAD_TURNS = [
    ({"user": "", "assistant": "  "}, "user", "a turn needs at least one of them"),
    ({"created_at": "2999-01-01T00:00:00Z"}, "created_at", "more than a day in the future"),
    ({"created_at": "yesterday"}, "created_at", "valid datetime"),
    ({"created_at": "0001-01-01T00:00:00+01:00"}, "created_at", "out of range"),
    (
        {"tool_events": [{"name": "shell", "arguments": {"cmd": "ls"}, "output": "x" * 300}]},
        "tool_events",
        "over the limit of 256 bytes",
    ),
    ({"tool_events": [{"name": "shell", "output": "a\x00b"}]}, "tool_events[0].output", "NUL"),
    ({"tool_events": [{"arguments": {}}]}, "tool_events.0.name", "Field required"),
    ({"prev_session_id": ""}, "prev_session_id", "must not be empty"),
]


@pytest.mark.parametrize(("change", "field", "message"), BAD_TURNS)
def test_a_bad_turn_is_422_naming_the_field_and_nothing_is_buffered(
    settings, topology, ids, change, field, message
):
    small = settings.model_copy(update={"max_tool_events_bytes": 256})
    with TestClient(create_app(small), raise_server_exceptions=False) as client:
        body = _turn_body(ids, 1, **change)
        response = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=body)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert [f["field"] for f in error["fields"]] == [field]
        assert message in error["fields"][0]["message"]
        assert _view(client, ids)["turns_total"] == 0


def test_tool_events_are_published_as_json_text(client, topology, ids):
    tool = {"name": "shell", "arguments": {"cmd": "ls", "n": 1}, "output": {"files": ["a"]}}
    body = _turn_body(ids, 1, tool_events=[tool])
    assert client.post(f"/v1/sessions/{ids['session_id']}/turns", json=body).status_code == 202
    path = topology.subscription_path("turns-summary")
    response = topology.subscriber.pull(request={"subscription": path, "max_messages": 1})
    record = json.loads(response.received_messages[0].message.data)
    assert record["tool_events"] == [
        {"name": "shell", "arguments": '{"cmd":"ls","n":1}', "output": '{"files":["a"]}'}
    ]


def test_summarize_before_trim_by_turns_keeps_the_window_and_bumps_the_version(valkey_client, ids):
    buffer = SessionBuffer(valkey_client, 3600)
    folder = Folder(buffer, OfflineLLM(), FoldPolicy(trigger_turns=10, kept_turns=4))
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    turns = [BufferedTurn.from_event(make_turn(ids, n)) for n in range(1, 19)]
    for turn in turns[:10]:
        assert folder.fold_if_due(key, buffer.append(key, turn)) == []
    assert folder.fold_if_due(key, buffer.append(key, turns[10])) == [1]
    view = buffer.read(key, with_folds=True)
    assert [t.turn_id for t in view.turns] == [t.turn_id for t in turns[7:11]]
    assert view.folds == {1: [t.turn_id for t in turns[:7]]}
    assert view.summary.version == 1
    assert view.summary.text.startswith("User asked: user message 1")
    assert view.tokens == sum(t.tokens for t in turns[7:11])
    for turn in turns[11:17]:
        assert folder.fold_if_due(key, buffer.append(key, turn)) == []
    assert folder.fold_if_due(key, buffer.append(key, turns[17])) == [2]
    view = buffer.read(key, with_folds=True)
    assert view.folds[2] == [t.turn_id for t in turns[7:14]]
    assert [t.turn_id for t in view.turns] == [t.turn_id for t in turns[14:]]
    assert (view.summary.version, view.turns_total, view.folded_total) == (2, 18, 14)


def test_summarize_before_trim_by_tokens(valkey_client, ids):
    buffer = SessionBuffer(valkey_client, 3600)
    folder = Folder(
        buffer, OfflineLLM(), FoldPolicy(trigger_turns=100, trigger_tokens=100, kept_turns=1)
    )
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    # Each turn is 40 tokens: 80 characters of user text, 80 of assistant text.
    turns = [
        BufferedTurn.from_event(make_turn(ids, n, user="u" * 80, assistant="a" * 80))
        for n in range(1, 4)
    ]
    assert [t.tokens for t in turns] == [40, 40, 40]
    assert folder.fold_if_due(key, buffer.append(key, turns[0])) == []
    assert folder.fold_if_due(key, buffer.append(key, turns[1])) == []
    assert folder.fold_if_due(key, buffer.append(key, turns[2])) == [1]
    view = buffer.read(key, with_folds=True)
    assert [t.turn_id for t in view.turns] == [turns[2].turn_id]
    assert view.folds == {1: [turns[0].turn_id, turns[1].turn_id]}
    assert view.tokens == 40


def test_a_buffer_longer_than_one_read_slice_reads_whole_and_in_order(valkey_client, ids):
    # With the summary worker down, nothing trims: the read script fetches the turns
    # in slices of 1,000, so 2,001 turns cross two slice edges. Appended newest
    # first, so only their times order them.
    buffer = SessionBuffer(valkey_client, 3600)
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    turns = [
        BufferedTurn.from_event(make_turn(ids, n, created_at=T0 + timedelta(seconds=n)))
        for n in range(2001)
    ]
    results = buffer.append_many([(key, turn, "") for turn in reversed(turns)])
    assert all(r.added for r in results)
    view = buffer.read(key)
    assert [t.turn_id for t in view.turns] == [t.turn_id for t in turns]
    assert view.turns[1000].user == turns[1000].user
    assert (view.turns_total, view.tokens) == (2001, sum(t.tokens for t in turns))


def test_a_fold_is_stored_only_against_the_version_and_turns_it_read(valkey_client, ids):
    buffer = SessionBuffer(valkey_client, 3600)
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    turns = [BufferedTurn.from_event(make_turn(ids, n)) for n in range(1, 4)]
    for turn in turns:
        buffer.append(key, turn)
    now = datetime.now(UTC)
    assert buffer.store_fold(key, 0, "first", turns[:1], now) == FoldResult(
        1, 2, turns[1].tokens + turns[2].tokens
    )
    # A writer that read version 0 lost: nothing of its fold is stored.
    assert buffer.store_fold(key, 0, "stale", turns[1:2], now).version == FOLD_VERSION_MOVED
    # A turn already folded cannot be folded (or removed) twice.
    assert buffer.store_fold(key, 1, "again", turns[:2], now).version == FOLD_TURN_GONE
    view = buffer.read(key, with_folds=True)
    assert (view.summary.text, view.summary.version) == ("first", 1)
    assert [t.turn_id for t in view.turns] == [t.turn_id for t in turns[1:]]
    assert view.folds == {1: [turns[0].turn_id]}


def test_eight_concurrent_writers_while_the_worker_folds_lose_and_double_nothing(
    client, settings, topology, publisher, valkey_client, ids
):
    writers, per_writer = 8, 50
    recorder = Recorder()
    buffer = SessionBuffer(valkey_client, settings.session_ttl_seconds)
    table = {TurnRecorded: recorder.wrap(summary_handler(settings, buffer))}
    failures: list[str] = []

    def write(w: int) -> None:
        for i in range(per_writer):
            n = w * per_writer + i
            body = _turn_body(ids, n, turn_id=f"w{w}-{i:03d}")
            response = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=body)
            if response.status_code != 202 or not response.json()["buffered"]:
                failures.append(response.text)

    with running(settings, "turns-summary", table, publisher):
        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        wait_for(lambda: recorder.count() >= writers * per_writer, 120, "every delivery")
    expected = {f"w{w}-{i:03d}" for w in range(writers) for i in range(per_writer)}
    view = _view(client, ids)
    in_buffer = [t["turn_id"] for t in view["turns"]]
    folded = [turn_id for fold in view["folds"] for turn_id in fold["turn_ids"]]
    # Every turn in exactly one place: the buffer, or one summary version.
    assert sorted(in_buffer + folded) == sorted(expected)
    assert len(set(in_buffer + folded)) == writers * per_writer
    versions = [fold["version"] for fold in view["folds"]]
    assert versions == list(range(1, len(versions) + 1)) and versions
    assert view["summary"]["version"] == versions[-1]
    assert view["turn_count"] <= 10
    assert (view["turns_total"], view["folded_turn_count"]) == (400, len(folded))
    assert view["tokens"] == sum(t["tokens"] for t in view["turns"])
    assert "error" not in " ".join(o for (_t, _a, o) in recorder.calls)


def test_a_new_session_carries_the_previous_sessions_summary(client, settings, valkey_client, ids):
    previous = ids["session_id"]
    _record_and_fold(client, settings, valkey_client, ids)
    summary = _view(client, ids, previous)["summary"]
    assert summary["version"] == 1 and "I prefer option 1." in summary["text"]

    new = previous + "-next"
    body = _turn_body(ids, 50, prev_session_id=previous)
    assert client.post(f"/v1/sessions/{new}/turns", json=body).status_code == 202
    view = _view(client, ids, new)
    assert view["prev_session_id"] == previous
    assert view["carried_summary"] == {
        "session_id": previous,
        "text": summary["text"],
        "version": 1,
    }
    assert view["summary"]["version"] == 0
    # A session without a previous one carries nothing.
    assert _view(client, ids, previous)["carried_summary"] is None


def _record_and_fold(client, settings, valkey_client, ids):
    """Eleven turns through the API (which only buffers), then the summary worker's
    fold, as its handler would run it for the eleventh. Returns the session's key."""
    for n in range(1, 12):
        response = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=_turn_body(ids, n))
        assert response.status_code == 202, response.text
    assert _view(client, ids)["summary"]["version"] == 0
    buffer = SessionBuffer(valkey_client, settings.session_ttl_seconds)
    key = SessionKey(settings.default_app, ids["user_id"], ids["session_id"])
    # Appending a turn already there only reports how full the buffer is.
    again = buffer.append(key, BufferedTurn.from_event(make_turn(ids, 1, turn_id="turn-0001")))
    assert again.added is False
    assert Folder(buffer, OfflineLLM(), FoldPolicy()).fold_if_due(key, again) == [1]
    return key


def test_keys_carry_the_ttl_and_a_deleted_session_leaves_no_key(
    client, settings, valkey_client, ids
):
    key = _record_and_fold(client, settings, valkey_client, ids)
    ttls = SessionBuffer(valkey_client, settings.session_ttl_seconds).ttl(key)
    # turns, data, seen, meta and folds exist (the fold lock is released).
    assert sorted(ttls) == sorted(key.keys[:5])
    ttl = settings.session_ttl_seconds
    assert all(ttl - 10 <= value <= ttl for value in ttls.values()), ttls

    response = client.delete(
        f"/v1/sessions/{ids['session_id']}", params={"user_id": ids["user_id"]}
    )
    assert response.json() == {"session_id": ids["session_id"], "deleted_keys": 5}
    assert valkey_client.keys(f"am:{key.tag}*") == []
    assert _view(client, ids)["turns_total"] == 0


def test_a_turn_recorded_while_valkey_is_down_is_buffered_in_order_when_it_is_back(
    settings, topology, publisher, tmp_path, ids
):
    own = LocalValkey(tmp_path, free_port(), tmp_path / "logs")  # append-only: survives restart
    own.start()
    try:
        local = settings.model_copy(update={"valkey_url": own.url})
        with TestClient(create_app(local), raise_server_exceptions=False) as client:
            first = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=_turn_body(ids, 1))
            assert first.json()["buffered"] is True
            own.process.request_stop()
            assert own.process.wait(10)
            errors_before = REGISTRY.get_sample_value(VALKEY_ERRORS, {"store": "valkey"}) or 0
            second = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=_turn_body(ids, 2))
            # The turn is still recorded (published); only the buffer missed it.
            assert second.status_code == 202, second.text
            assert second.json()["buffered"] is False
            down = client.get(
                f"/v1/sessions/{ids['session_id']}", params={"user_id": ids["user_id"]}
            )
            assert down.status_code == 503
            assert down.json()["error"]["code"] == "valkey_unavailable"
            # Both failures are counted in the process's metrics.
            errors = REGISTRY.get_sample_value(VALKEY_ERRORS, {"store": "valkey"})
            assert errors - errors_before == 2
            own.start()
            third = client.post(f"/v1/sessions/{ids['session_id']}/turns", json=_turn_body(ids, 3))
            assert third.json()["buffered"] is True
            assert [t["turn_id"] for t in _view(client, ids)["turns"]] == [
                "turn-0001",
                "turn-0003",
            ]
            with (
                valkey.Valkey.from_url(own.url) as own_client,
                running(
                    local,
                    "turns-summary",
                    {TurnRecorded: summary_handler(settings, SessionBuffer(own_client, 3600))},
                    publisher,
                ),
            ):
                wait_for(
                    lambda: len(_view(client, ids)["turns"]) == 3, 60, "the worker to buffer it"
                )
            assert [t["turn_id"] for t in _view(client, ids)["turns"]] == [
                "turn-0001",
                "turn-0002",
                "turn-0003",
            ]
    finally:
        own.process.stop(5)


def test_a_dead_folders_lock_only_delays_the_fold_until_it_expires(valkey_client, ids):
    # No other turn arrives: the handler that found the lock taken looks again by itself.
    buffer = SessionBuffer(valkey_client, 3600)
    folder = Folder(buffer, OfflineLLM(), FoldPolicy(lock_seconds=1.0))
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    # A worker that took the lock and was killed before releasing it.
    assert buffer.lock_and_read(key, "dead-worker", 1.0) is not None
    assert buffer.lock_and_read(key, "another", 1.0) is None
    for n in range(1, 12):
        appended = buffer.append(key, BufferedTurn.from_event(make_turn(ids, n)))
    assert folder.fold_if_due(key, appended) == []
    assert buffer.read(key).summary.version == 0
    wait_for(lambda: buffer.read(key).summary.version == 1, 10, "the fold after the lock expires")
    assert [t.turn_id for t in buffer.read(key).turns] == [f"turn-{n:04d}" for n in range(8, 12)]


def test_the_context_body_is_what_its_model_lays_out(client, settings, valkey_client, ids):
    """The context route builds its body as plain data: with every part filled in,
    it must be exactly what `ContextResponse` lays out (and a search's `SearchResponse`)."""
    previous = ids["session_id"]
    _record_and_fold(client, settings, valkey_client, ids)
    user = ids["user_id"]
    for text, kind in (("Never deploy on Fridays.", "rule"), ("User prefers option 3.", "fact")):
        written = client.post(
            "/v1/memories", json={"user_id": user, "text": text, "kind": kind, "scope": "global"}
        )
        assert written.status_code == 201, written.text
    new = previous + "-next"
    body = _turn_body(ids, 50, prev_session_id=previous)
    assert client.post(f"/v1/sessions/{new}/turns", json=body).status_code == 202

    def context(session_id):
        query = {"user_id": user, "session_id": session_id, "query": "which option do I prefer?"}
        response = client.post("/v1/context", json=query)
        assert response.status_code == 200, response.text
        body = response.json()
        assert ContextResponse.model_validate(body).model_dump() == body
        return body

    folded = context(previous)
    assert folded["rolling_summary"]["version"] == 1
    assert [t["turn_id"] for t in folded["recent_turns"]] == [f"turn-{n:04d}" for n in range(8, 12)]
    assert [r["text"] for r in folded["pinned_rules"]] == ["Never deploy on Fridays."]
    # Ranked first; the rule, pinned, may be found too (two memories in all).
    assert folded["memories"][0]["text"] == "User prefers option 3."
    assert folded["memories"][0]["rankers"] and folded["memories"][0]["score"] > 0
    carried = context(new)
    assert carried["carried_summary"] == {
        "session_id": previous,
        "text": folded["rolling_summary"]["text"],
        "version": 1,
    }
    assert carried["rolling_summary"] is None and carried["degraded"] == []

    response = client.post("/v1/memories:search", json={"user_id": user, "query": "option"})
    assert response.status_code == 200, response.text
    found = response.json()
    assert SearchResponse.model_validate(found).model_dump() == found
    assert found["memories"][0]["text"] == "User prefers option 3."
