"""Backpressure: a Valkey at its memory limit and a publish queue that is full.

A Valkey of the test's own is put at its memory limit as Memorystore runs it
(`maxmemory` below what it holds, `noeviction`): recording a turn answers 503 with
`Retry-After` in the API's error shape and publishes nothing; the summary worker
holds what was accepted before (no attempt spent, no dead letter) and applies it
once when memory is freed; the context read still answers. The API's publisher,
pointed at a server that accepts connections and never answers, fills its queue:
the next turn is a 503 with `Retry-After`, at once.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import grpc
import pytest
from fastapi.testclient import TestClient
from google.auth.credentials import AnonymousCredentials
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

from services.api.app import create_app
from services.api.errors import RETRY_AFTER_SECONDS, VALKEY_FULL_RETRY_AFTER_SECONDS
from services.dev.localstack.process import free_port
from services.dev.localstack.valkey_server import LocalValkey
from shared.bootstrap import make_valkey
from shared.bus.dlq import DeadLetterQueues
from shared.bus.publisher import EventPublisher
from shared.bus.worker import SubscriberRuntime
from shared.events import TurnRecorded
from shared.session_buffer import SessionBuffer, SessionKey
from tests.bus_helpers import attempts_spent, make_turn, summary_handler, watched_valkey
from tests.support import stays, wait_for


@pytest.fixture
def own_valkey(tmp_path) -> Iterator[LocalValkey]:
    server = LocalValkey(tmp_path, free_port(), tmp_path / "logs")
    server.start()
    yield server
    server.process.stop(5)


def _at_memory_limit(client) -> None:
    """Below what it holds already: every write that would add memory is refused."""
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")


def _turn_body(ids: dict[str, str], n: int) -> dict[str, str]:
    return {
        "user_id": ids["user_id"],
        "turn_id": f"api-{n:04d}",
        "user": f"user message {n}",
        "assistant": "Noted.",
    }


def test_a_full_valkey_refuses_turns_with_503_and_the_worker_holds_until_memory_is_freed(
    settings, topology, publisher, ids, own_valkey
):
    settings = settings.model_copy(update={"valkey_url": own_valkey.url, "default_app": ids["app"]})
    client = make_valkey(settings)
    buffer = SessionBuffer(client, 3600)
    dependencies = watched_valkey(client)
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    table = {TurnRecorded: summary_handler(settings, buffer)}
    spent = attempts_spent("turns-summary")
    runtime = SubscriberRuntime(
        settings, "turns-summary", table, publisher, concurrency=4, dependencies=dependencies
    )
    runtime.start()
    session = f"/v1/sessions/{ids['session_id']}"
    try:
        with TestClient(create_app(settings), raise_server_exceptions=False) as api:
            assert api.post(f"{session}/turns", json=_turn_body(ids, 1)).status_code == 202
            wait_for(lambda: len(buffer.read(key).turns) == 1, 30, "the first turn buffered")

            _at_memory_limit(client)
            refused = api.post(f"{session}/turns", json=_turn_body(ids, 2))
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == str(VALKEY_FULL_RETRY_AFTER_SECONDS)
            error = refused.json()["error"]
            assert error["code"] == "valkey_full"
            assert error["turn_id"] == "api-0002"
            assert "memory limit" in error["message"]

            # Accepted before the limit (published, as a turn in flight would be).
            for n in range(1, 6):
                publisher.publish(make_turn(ids, n)).result(timeout=10)
            wait_for(lambda: "valkey" in dependencies.down(), 30, "the worker to see Valkey full")
            assert "OutOfMemoryError" in dependencies.down()["valkey"]
            stays(lambda: attempts_spent("turns-summary") == spent, 3.0, "no attempt spent")
            # Reads still work: the context has the session's one buffered turn.
            context = api.post(
                "/v1/context",
                json={"user_id": ids["user_id"], "session_id": ids["session_id"], "query": "x"},
            )
            assert context.status_code == 200
            assert context.json()["degraded"] == []
            assert [t["turn_id"] for t in context.json()["recent_turns"]] == ["api-0001"]

            client.config_set("maxmemory", "0")  # the operator frees memory
            expected = ["api-0001"] + [f"turn-{n:04d}" for n in range(1, 6)]
            wait_for(
                lambda: sorted(t.turn_id for t in buffer.read(key).turns) == expected,
                30,
                "every held turn applied once",
            )
            wait_for(lambda: runtime.in_flight() == 0, 30, "every message settled")
            again = api.post(f"{session}/turns", json=_turn_body(ids, 2))
            assert again.status_code == 202
    finally:
        runtime.stop(timeout=10)
        dependencies.close()
        client.close()
    assert attempts_spent("turns-summary") == spent
    assert DeadLetterQueues(settings).peek("turns-summary") == []


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers (the kernel completes the
    handshake into the listen backlog): a Pub/Sub that hangs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock.getsockname()[1]
    sock.close()


def test_a_full_publish_queue_answers_503_with_retry_after_at_once(
    settings, topology, ids, silent_server
):
    settings = settings.model_copy(
        update={"default_app": ids["app"], "publish_queue_limit": 1, "publish_timeout_seconds": 3}
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{silent_server}")
    transport = PublisherGrpcTransport(channel=channel, credentials=AnonymousCredentials())
    hanging = EventPublisher(
        settings, client=pubsub_v1.PublisherClient(transport=transport), block_when_full=False
    )
    session = f"/v1/sessions/{ids['session_id']}"
    try:
        with TestClient(
            create_app(settings, event_publisher=hanging), raise_server_exceptions=False
        ) as api:
            # One publish waits for a confirmation that never comes: the queue of
            # one is full until its timeout.
            waiting = hanging.publish(make_turn(ids, 1))
            assert hanging.full()
            started = time.monotonic()
            refused = api.post(f"{session}/turns", json=_turn_body(ids, 2))
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
            error = refused.json()["error"]
            assert error["code"] == "overloaded"
            assert error["turn_id"] == "api-0002"
            assert time.monotonic() - started < 1.0  # refused at once, not after a wait
            # The refused turn never reached the buffer: a retry is the first copy.
            view = api.get(session, params={"user_id": ids["user_id"]}).json()
            assert view["turns"] == []
            with pytest.raises(Exception, match="Timeout"):
                waiting.result(timeout=10)
            wait_for(lambda: not hanging.full(), 5, "the queue emptied by the timeout")
    finally:
        channel.close()
