"""The Pub/Sub clients every process builds: through here, never by hand.

Against the emulator the library opens a plain gRPC channel with gRPC's default
limit of 4 MB per received message, while a topic accepts messages of up to
10 MB: a worker then could not pull a message the topic had accepted (the pull
failed with `Received message larger than max`, on every attempt). Our channel
to the emulator lifts that limit, as the library does for Pub/Sub itself.
"""

from __future__ import annotations

import os

import grpc
from google.auth.credentials import AnonymousCredentials
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

# What the library itself sets on its channel to Pub/Sub.
_UNLIMITED = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def _emulator_host() -> str | None:
    # The client library reads the same variable; so do we, for the same clients.
    return os.environ.get("PUBSUB_EMULATOR_HOST") or None


def _emulator_transport(transport_class: type) -> object:
    """A transport on an unlimited channel to the emulator (no credentials)."""
    host = _emulator_host()
    channel = grpc.insecure_channel(host, options=_UNLIMITED)
    return transport_class(channel=channel, host=host, credentials=AnonymousCredentials())


def subscriber_client() -> pubsub_v1.SubscriberClient:
    if _emulator_host() is None:
        return pubsub_v1.SubscriberClient()
    return pubsub_v1.SubscriberClient(transport=_emulator_transport(SubscriberGrpcTransport))


def publisher_client() -> pubsub_v1.PublisherClient:
    if _emulator_host() is None:
        return pubsub_v1.PublisherClient()
    return pubsub_v1.PublisherClient(transport=_emulator_transport(PublisherGrpcTransport))
