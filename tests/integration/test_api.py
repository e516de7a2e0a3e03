import json

import pytest
from fastapi.testclient import TestClient
from google.api_core import exceptions as gexc

from services.api.app import create_app
from services.dev.localstack.process import free_port
from shared.events import derived_event_id


@pytest.fixture
def client(settings, topology):
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _pull_all(topology, subscription="turns-summary"):
    path = topology.subscription_path(subscription)
    try:
        response = topology.subscriber.pull(
            request={"subscription": path, "max_messages": 100}, timeout=3
        )
    except gexc.DeadlineExceeded:
        return []
    return list(response.received_messages)


BAD_REQUESTS = [
    ({"user": "hi", "assistant": "ok"}, "user_id", "Field required"),
    ({"user_id": "", "user": "hi", "assistant": "ok"}, "user_id", "must not be empty"),
    ({"user_id": "u" * 257, "user": "hi", "assistant": "ok"}, "user_id", "at most 256"),
    ({"user_id": "a\tb", "user": "hi", "assistant": "ok"}, "user_id", "control characters"),
    ({"user_id": "u", "project_id": "", "user": "hi", "assistant": "ok"}, "project_id", "empty"),
    ({"user_id": "u", "turn_id": "t\n", "user": "hi", "assistant": "ok"}, "turn_id", "control"),
    ({"user_id": "u", "assistant": "ok"}, "user", "Field required"),
    ({"user_id": "u", "user": 5, "assistant": "ok"}, "user", "valid string"),
    ({"user_id": "u", "user": "x" * 32769, "assistant": "ok"}, "user", "over the limit"),
    ({"user_id": "u", "user": "hi", "assistant": "é" * 16385}, "assistant", "32770 bytes"),
    ({"user_id": "u", "user": "hi", "assistant": "ok", "app": "x"}, "app", "not a known field"),
    ({"user_id": "u\ud800", "user": "hi", "assistant": "ok"}, "user_id", "lone surrogate"),
    ({"user_id": "u", "user": "hi\ud800", "assistant": "ok"}, "user", "lone surrogate"),
    ({"user_id": "u", "user": "hi", "assistant": "a\x00b"}, "assistant", "NUL"),
]


@pytest.mark.parametrize(("body", "field", "message"), BAD_REQUESTS)
def test_a_bad_turn_gets_422_naming_the_field(client, body, field, message):
    # Sent as raw JSON text: "\ud800" is valid JSON but not valid Unicode.
    raw = json.dumps(body).encode()
    response = client.post(
        "/v1/sessions/s1/turns", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert [f["field"] for f in error["fields"]] == [field]
    assert message in error["fields"][0]["message"]
    assert "Traceback" not in response.text


def test_bad_path_query_and_json_are_422_too(client):
    response = client.post("/v1/sessions/" + "s" * 300 + "/turns", json={})
    assert response.status_code == 422
    long_session = client.post(
        "/v1/sessions/" + "s" * 300 + "/turns", json={"user_id": "u", "user": "a", "assistant": "b"}
    )
    assert long_session.json()["error"]["fields"] == [
        {"field": "session_id", "message": "must be at most 256 characters"}
    ]
    not_json = client.post(
        "/v1/sessions/s1/turns", content=b"{oops", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 422
    assert not_json.json()["error"]["fields"][0]["field"] == "body"
    no_user = client.get("/v1/sessions/s1")
    assert no_user.status_code == 422
    assert no_user.json()["error"]["fields"][0]["field"] == "user_id"


def test_nothing_is_published_for_a_bad_request(client, topology):
    for body, _field, _message in BAD_REQUESTS:
        raw = json.dumps(body).encode()
        response = client.post(
            "/v1/sessions/s1/turns", content=raw, headers={"content-type": "application/json"}
        )
        assert response.status_code == 422
    good = client.post(
        "/v1/sessions/s1/turns", json={"user_id": "u1", "user": "hello", "assistant": "hi"}
    )
    assert good.status_code == 202
    messages = _pull_all(topology)
    assert [m.message.attributes["event_id"] for m in messages] == [good.json()["event_id"]]


def test_a_turn_is_published_with_its_attributes_and_ordering_key(client, topology, settings):
    response = client.post(
        "/v1/sessions/sess_2026_01/turns",
        json={
            "user_id": "user_dev_42",
            "project_id": "CloudRetail",
            "turn_id": "turn-1",
            "user": "I prefer Dark Mode.",
            "assistant": "Noted.",
        },
    )
    assert response.status_code == 202
    body = response.json()
    app = settings.default_app
    assert body == {
        "event_id": derived_event_id(app, "user_dev_42", "sess_2026_01", "turn-1"),
        "turn_id": "turn-1",
        "buffered": True,
    }
    (received,) = _pull_all(topology)
    message = received.message
    assert message.ordering_key == f"{app}/user_dev_42/sess_2026_01"
    ours = {k: v for k, v in message.attributes.items() if not k.startswith("googclient_")}
    assert ours == {
        "event_id": body["event_id"],
        "event_type": "turn.recorded.v1",
        "schema_version": "1",
        "app": app,
        "figures_counted": "1",  # the API reports what it publishes (shared.bus.reporting)
    }
    # Pub/Sub validated it against the attached schema (and says so in its own attributes).
    assert message.attributes["googclient_schemaencoding"] == "JSON"
    assert message.attributes["googclient_schemaname"] == topology.schema_path("turn.recorded.v1")
    record = json.loads(message.data)
    assert (record["project_id"], record["user"], record["tool_events"]) == (
        "CloudRetail",
        "I prefer Dark Mode.",
        [],
    )


def test_a_retry_with_the_same_turn_id_is_the_same_event(client):
    body = {"user_id": "u1", "turn_id": "t-42", "user": "a", "assistant": "b"}
    first = client.post("/v1/sessions/s9/turns", json=body).json()
    second = client.post("/v1/sessions/s9/turns", json=body).json()
    assert first == second
    generated = client.post(
        "/v1/sessions/s9/turns", json={"user_id": "u1", "user": "a", "assistant": "b"}
    ).json()
    assert generated["turn_id"] != "t-42" and len(generated["turn_id"]) == 36


def test_an_unknown_session_reads_empty(client):
    response = client.get("/v1/sessions/nobody-here", params={"user_id": "u1"})
    assert response.status_code == 200
    assert response.json() == {
        "session_id": "nobody-here",
        "user_id": "u1",
        "prev_session_id": None,
        "summary": {"text": "", "version": 0, "tokens": 0, "updated_at": None},
        "carried_summary": None,
        "turns": [],
        "turn_count": 0,
        "tokens": 0,
        "turns_total": 0,
        "folded_turn_count": 0,
        "folds": [],
    }


def test_healthz_and_readyz(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "down": []}


def test_readyz_names_valkey_when_it_is_unreachable(settings, topology):
    unreachable = settings.model_copy(update={"valkey_url": f"redis://127.0.0.1:{free_port()}/0"})
    with TestClient(create_app(unreachable)) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    # Names what is down; the reason (hosts, ports) stays in the server's log.
    assert response.json() == {"status": "unavailable", "down": ["valkey"]}


def test_a_publish_failure_is_503_and_says_to_retry(settings, topology):
    # A topic that does not exist: Pub/Sub refuses the publish.
    missing = settings.model_copy(
        update={"topic_prefix": "tmissing-", "publish_timeout_seconds": 5}
    )
    with TestClient(create_app(missing)) as client:
        response = client.post(
            "/v1/sessions/s1/turns", json={"user_id": "u", "user": "a", "assistant": "b"}
        )
    assert response.status_code == 503
    error = response.json()["error"]
    # The generated turn_id comes back, so the client can retry as the same turn.
    assert len(error["turn_id"]) == 36
    assert error == {
        "code": "publish_failed",
        "message": "the turn could not be published; retry with the same turn_id",
        "turn_id": error["turn_id"],
        "event_id": derived_event_id(settings.default_app, "u", "s1", error["turn_id"]),
        "request_id": response.headers["x-request-id"],
    }
