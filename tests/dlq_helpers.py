"""Dead letters made by hand, and a look at what reached a subscription."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.bus.clients import subscriber_client
from shared.bus.publisher import EventPublisher
from shared.bus.topology import full_name
from shared.config import Settings
from shared.events import Event, encode


def dead_letter(
    publisher: EventPublisher, subscription: str, events: Sequence[Event], reason: str = "test"
) -> None:
    """Publish `events` into `<subscription>-dlq` as the worker would have dead-lettered them."""
    topic = publisher.topic_path(f"{subscription}-dlq")
    futures = []
    for event in events:
        message = encode(event)
        attributes = dict(
            message.attributes,
            dead_letter_reason=reason,
            dead_letter_subscription=subscription,
            dead_letter_delivery_attempt="5",
            dead_letter_ordering_key=message.ordering_key,
        )
        futures.append(publisher.publish_raw(topic, message.data, attributes))
    for future in futures:
        future.result(timeout=30)


def pull_all(settings: Settings, subscription: str) -> list[Any]:
    """Every message waiting in `subscription` (PubsubMessage), handed back unacknowledged."""
    client = subscriber_client()
    path = client.subscription_path(
        settings.google_cloud_project, full_name(settings.topic_prefix, subscription)
    )
    messages, ack_ids = [], []
    while True:
        response = client.pull(
            request={"subscription": path, "max_messages": 100, "return_immediately": True},
            timeout=10,
        )
        if not response.received_messages:
            break
        for received in response.received_messages:
            messages.append(received.message)
            ack_ids.append(received.ack_id)
    if ack_ids:
        client.modify_ack_deadline(
            request={"subscription": path, "ack_ids": ack_ids, "ack_deadline_seconds": 0}
        )
    return messages
