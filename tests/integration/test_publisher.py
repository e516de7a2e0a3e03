"""The publisher's own sender: order, attributes, failures, stop."""

import uuid

import pytest
from google.api_core import exceptions as gexc

from shared.bus.publisher import EventPublisher


@pytest.fixture
def plain_topic(topology):
    """A topic without a schema and an ordered subscription on it, removed afterwards."""
    name = f"plain-{uuid.uuid4().hex[:8]}"
    topic = topology.topic_path(name)
    subscription = topology.subscription_path(name)
    topology.publisher.create_topic(request={"name": topic})
    topology.subscriber.create_subscription(
        request={"name": subscription, "topic": topic, "enable_message_ordering": True}
    )
    yield topic, subscription
    topology.subscriber.delete_subscription(request={"subscription": subscription})
    topology.publisher.delete_topic(request={"topic": topic})


def pull_all(topology, subscription: str, count: int) -> list:
    received = []
    for _ in range(50):
        response = topology.subscriber.pull(
            request={"subscription": subscription, "max_messages": count}, timeout=10
        )
        received += [m.message for m in response.received_messages]
        if response.received_messages:
            topology.subscriber.acknowledge(
                request={
                    "subscription": subscription,
                    "ack_ids": [m.ack_id for m in response.received_messages],
                }
            )
        if len(received) >= count:
            return received
    raise AssertionError(f"{len(received)} of {count} messages arrived")


def test_a_burst_arrives_in_publish_order_with_its_attributes(topology, publisher, plain_topic):
    topic, subscription = plain_topic
    # Names the client library once took as its own keyword parameters.
    attributes = {"timeout": "5", "ordering_key": "x", "retry": "no"}
    futures = [
        publisher.publish_raw(topic, f"m{i}".encode(), {**attributes, "i": str(i)}, "key-1")
        for i in range(300)
    ]
    ids = [f.result(timeout=30) for f in futures]
    assert len(set(ids)) == 300
    received = pull_all(topology, subscription, 300)
    assert [m.data for m in received] == [f"m{i}".encode() for i in range(300)]
    assert dict(received[7].attributes) == {**attributes, "i": "7"}
    assert {m.ordering_key for m in received} == {"key-1"}
    assert [m.message_id for m in received] == ids


def test_a_failed_batch_fails_its_messages_only(topology, publisher, plain_topic):
    topic, subscription = plain_topic
    missing = topology.topic_path(f"missing-{uuid.uuid4().hex[:8]}")
    lost = [publisher.publish_raw(missing, b"lost", {}) for _ in range(3)]
    kept = publisher.publish_raw(topic, b"kept", {})
    for future in lost:
        with pytest.raises(gexc.NotFound):
            future.result(timeout=30)
    assert kept.result(timeout=30)
    assert [m.data for m in pull_all(topology, subscription, 1)] == [b"kept"]


def test_stop_sends_what_is_queued_then_refuses(settings, topology, plain_topic):
    topic, subscription = plain_topic
    publisher = EventPublisher(settings)
    futures = [publisher.publish_raw(topic, f"q{i}".encode(), {}) for i in range(50)]
    publisher.stop()
    assert all(f.done() and f.exception() is None for f in futures)
    assert len(pull_all(topology, subscription, 50)) == 50
    with pytest.raises(RuntimeError, match="stopped"):
        publisher.publish_raw(topic, b"late", {})


def test_a_caller_that_stops_waiting_never_stops_the_sender(settings, monkeypatch):
    # Pub/Sub does not answer: each batch is retried for the publish timeout, then
    # fails. A caller that gave up meanwhile cancels its future (asyncio does, on
    # its own timeout); the batch's failure must not end the sender with it.
    from services.dev.localstack.process import free_port

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{free_port()}")  # nothing there
    settings = settings.model_copy(update={"publish_timeout_seconds": 1.0})
    publisher = EventPublisher(settings)
    topic = publisher.topic_path("turns")
    try:
        first = publisher.publish_raw(topic, b"first", {})  # keeps the sender busy
        given_up = publisher.publish_raw(topic, b"given up", {})
        assert given_up.cancel()  # still queued behind the first
        with pytest.raises(gexc.RetryError):
            first.result(timeout=10)
        later = publisher.publish_raw(topic, b"later", {})
        # Answered (with Pub/Sub's refusal) within the publish timeout: the sender is alive.
        with pytest.raises(gexc.RetryError):
            later.result(timeout=10)
    finally:
        publisher.stop()
