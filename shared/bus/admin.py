"""Create and inspect the Pub/Sub topology (`agent-memory topology apply|show`).

Works on the emulator and on GCP. `apply` is idempotent: it creates what is
missing and updates what can be updated in place; a difference that Pub/Sub
cannot change in place (a subscription's topic or ordering) is reported, never
silently ignored.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field

from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1
from google.protobuf import duration_pb2, field_mask_pb2
from google.pubsub_v1.types import (
    DeadLetterPolicy,
    Encoding,
    ExpirationPolicy,
    RetryPolicy,
    Schema,
    SchemaSettings,
    Subscription,
    Topic,
)

from shared.bus.clients import publisher_client, subscriber_client
from shared.bus.topology import (
    SUBSCRIPTIONS,
    TOPICS,
    dead_letter_name,
    full_name,
    schema_name,
)
from shared.config import Settings
from shared.events.schemas import schema_definition

DEAD_LETTER_ACK_DEADLINE = 600  # the maximum: `dlq show` and `replay` hold what they read


@dataclass
class ResourceState:
    kind: str  # schema | topic | subscription
    name: str
    status: str = "ok"  # ok | missing | differs | created | updated
    details: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DesiredSubscription:
    name: str
    topic: str
    ordered: bool
    ack_deadline_seconds: int
    dead_letter_topic: str | None
    max_delivery_attempts: int | None
    retry_min: int | None
    retry_max: int | None


class TopologyAdmin:
    """Reads and writes the topology of one project and prefix."""

    def __init__(
        self,
        settings: Settings,
        publisher: pubsub_v1.PublisherClient | None = None,
        subscriber: pubsub_v1.SubscriberClient | None = None,
        schemas: pubsub_v1.SchemaServiceClient | None = None,
    ) -> None:
        self.settings = settings
        self.project = settings.google_cloud_project
        self.prefix = settings.topic_prefix
        self.publisher = publisher or publisher_client()
        self.subscriber = subscriber or subscriber_client()
        self.schemas = schemas or pubsub_v1.SchemaServiceClient()

    # -- names -------------------------------------------------------------
    def topic_path(self, short: str) -> str:
        return self.publisher.topic_path(self.project, full_name(self.prefix, short))

    def subscription_path(self, short: str) -> str:
        return self.subscriber.subscription_path(self.project, full_name(self.prefix, short))

    def schema_path(self, event_type: str) -> str:
        return self.schemas.schema_path(self.project, schema_name(self.prefix, event_type))

    # -- desired state -----------------------------------------------------
    def desired_subscriptions(self) -> list[DesiredSubscription]:
        s = self.settings
        wanted = []
        for spec in SUBSCRIPTIONS:
            dlq = dead_letter_name(spec.name)
            wanted.append(
                DesiredSubscription(
                    name=self.subscription_path(dlq),
                    topic=self.topic_path(dlq),
                    ordered=False,
                    ack_deadline_seconds=DEAD_LETTER_ACK_DEADLINE,
                    dead_letter_topic=None,
                    max_delivery_attempts=None,
                    retry_min=None,
                    retry_max=None,
                )
            )
            wanted.append(
                DesiredSubscription(
                    name=self.subscription_path(spec.name),
                    topic=self.topic_path(spec.topic),
                    ordered=spec.ordered,
                    ack_deadline_seconds=s.ack_deadline_seconds,
                    dead_letter_topic=self.topic_path(dlq),
                    # One more than the worker's own: a message that comes back after
                    # its last attempt was never settled (the worker crashed or was
                    # stopped on it), and the worker dead-letters it on receipt, with a
                    # reason, before Pub/Sub would (without one) or the emulator would
                    # drop it (it drops what an ordered subscription gives up on).
                    max_delivery_attempts=s.max_delivery_attempts + 1,
                    retry_min=s.retry_min_backoff_seconds,
                    retry_max=max(s.retry_max_backoff_seconds, s.retry_min_backoff_seconds),
                )
            )
        return wanted

    # -- apply / show ------------------------------------------------------
    def apply(self) -> list[ResourceState]:
        """Create or update every resource; return what was found and done."""
        return self._walk(write=True)

    def show(self) -> list[ResourceState]:
        """Compare what exists with the configuration, changing nothing."""
        return self._walk(write=False)

    def _walk(self, write: bool) -> list[ResourceState]:
        states: list[ResourceState] = []
        for spec in TOPICS:
            states.append(self._schema(spec.event_type, write))
            states.append(self._topic(self.topic_path(spec.name), spec.event_type, write))
        for subscription in SUBSCRIPTIONS:
            dead_letters = self.topic_path(dead_letter_name(subscription.name))
            states.append(self._topic(dead_letters, None, write))
        for desired in self.desired_subscriptions():
            states.append(self._subscription(desired, write))
        return states

    def _schema(self, event_type: str, write: bool) -> ResourceState:
        path = self.schema_path(event_type)
        state = ResourceState("schema", path)
        definition = schema_definition(event_type)
        try:
            current = self.schemas.get_schema(request={"name": path})
        except gexc.NotFound:
            state.status = "missing"
            if write:
                self.schemas.create_schema(
                    request={
                        "parent": f"projects/{self.project}",
                        "schema": Schema(name=path, type_=Schema.Type.AVRO, definition=definition),
                        "schema_id": path.rsplit("/", 1)[1],
                    }
                )
                state.status = "created"
            return state
        if json.loads(current.definition) != json.loads(definition):
            state.status = "differs"
            state.details.append("definition differs from schemas/events")
            if write:
                self.schemas.commit_schema(
                    request={
                        "name": path,
                        "schema": Schema(name=path, type_=Schema.Type.AVRO, definition=definition),
                    }
                )
                state.status = "updated"
        return state

    def _topic(self, path: str, event_type: str | None, write: bool) -> ResourceState:
        state = ResourceState("topic", path)
        settings = (
            SchemaSettings(schema=self.schema_path(event_type), encoding=Encoding.JSON)
            if event_type
            else None
        )
        try:
            current = self.publisher.get_topic(request={"topic": path})
        except gexc.NotFound:
            state.status = "missing"
            if write:
                topic = Topic(name=path, schema_settings=settings) if settings else Topic(name=path)
                # Another `apply` may have won the race; it created the same thing.
                with contextlib.suppress(gexc.AlreadyExists):
                    self.publisher.create_topic(request=topic)
                state.status = "created"
            return state
        if settings is not None:
            have = current.schema_settings
            if have.schema != settings.schema or have.encoding != settings.encoding:
                state.status = "differs"
                state.details.append(
                    f"schema {have.schema or 'none'} ({Encoding(have.encoding).name}), "
                    f"want {settings.schema} (JSON)"
                )
                if write:
                    self.publisher.update_topic(
                        request={
                            "topic": Topic(name=path, schema_settings=settings),
                            "update_mask": field_mask_pb2.FieldMask(paths=["schema_settings"]),
                        }
                    )
                    state.status = "updated"
        return state

    def _subscription(self, want: DesiredSubscription, write: bool) -> ResourceState:
        state = ResourceState("subscription", want.name)
        try:
            have = self.subscriber.get_subscription(request={"subscription": want.name})
        except gexc.NotFound:
            state.status = "missing"
            if write:
                with contextlib.suppress(gexc.AlreadyExists):
                    self.subscriber.create_subscription(request=_subscription_message(want))
                state.status = "created"
            return state
        fixed, mutable = _subscription_differences(want, have)
        if fixed or mutable:
            state.status = "differs"
            state.details.extend(fixed + [d for d, _ in mutable])
        if write and mutable:
            self.subscriber.update_subscription(
                request={
                    "subscription": _subscription_message(want),
                    "update_mask": field_mask_pb2.FieldMask(paths=sorted({p for _, p in mutable})),
                }
            )
            state.status = "updated" if not fixed else "differs"
        if fixed:
            state.details.append("delete and re-create the subscription to change this")
        return state


def _duration(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


def _subscription_message(want: DesiredSubscription) -> Subscription:
    sub = Subscription(
        name=want.name,
        topic=want.topic,
        enable_message_ordering=want.ordered,
        ack_deadline_seconds=want.ack_deadline_seconds,
        # No ttl: the subscription never expires. Pub/Sub's default deletes one after
        # 31 days without activity, and a dead-letter subscription is idle most of
        # the time: its topic would then lose what it receives.
        expiration_policy=ExpirationPolicy(),
    )
    if want.dead_letter_topic:
        sub.dead_letter_policy = DeadLetterPolicy(
            dead_letter_topic=want.dead_letter_topic,
            max_delivery_attempts=want.max_delivery_attempts,
        )
    if want.retry_min is not None and want.retry_max is not None:  # set together
        sub.retry_policy = RetryPolicy(
            minimum_backoff=_duration(want.retry_min), maximum_backoff=_duration(want.retry_max)
        )
    return sub


def _seconds(value: object) -> int:
    # proto-plus turns Duration fields into datetime.timedelta.
    total = getattr(value, "total_seconds", None)
    return int(total()) if total else int(getattr(value, "seconds", 0))


def _subscription_differences(
    want: DesiredSubscription, have: Subscription
) -> tuple[list[str], list[tuple[str, str]]]:
    fixed: list[str] = []
    mutable: list[tuple[str, str]] = []
    if have.topic != want.topic:
        fixed.append(f"topic is {have.topic}, want {want.topic}")
    if bool(have.enable_message_ordering) != want.ordered:
        fixed.append(f"ordering is {have.enable_message_ordering}, want {want.ordered}")
    if have.ack_deadline_seconds != want.ack_deadline_seconds:
        mutable.append(
            (
                f"ack deadline {have.ack_deadline_seconds}s, want {want.ack_deadline_seconds}s",
                "ack_deadline_seconds",
            )
        )
    have_dlq = have.dead_letter_policy.dead_letter_topic or None
    have_max = have.dead_letter_policy.max_delivery_attempts or None
    if (have_dlq, have_max) != (want.dead_letter_topic, want.max_delivery_attempts):
        mutable.append(
            (
                f"dead letter {have_dlq} after {have_max}, "
                f"want {want.dead_letter_topic} after {want.max_delivery_attempts}",
                "dead_letter_policy",
            )
        )
    ttl = _seconds(have.expiration_policy.ttl) if "expiration_policy" in have else 0
    if ttl:
        mutable.append((f"expires after {ttl}s without activity, want never", "expiration_policy"))
    if want.retry_min is not None:
        have_min = _seconds(have.retry_policy.minimum_backoff)
        have_max_b = _seconds(have.retry_policy.maximum_backoff)
        if (have_min, have_max_b) != (want.retry_min, want.retry_max):
            mutable.append(
                (
                    f"retry backoff {have_min}-{have_max_b}s, "
                    f"want {want.retry_min}-{want.retry_max}s",
                    "retry_policy",
                )
            )
    return fixed, mutable
