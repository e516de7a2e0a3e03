"""One Pub/Sub publisher per process: one sender thread, batches of what is queued,
ordering kept, a bounded queue that blocks (workers) or refuses (the API).

The client library's batching publisher starts two threads for every batch; at the
API's pace (a batch is one turn) that cost more CPU per turn than the route itself
and held the GIL while requests waited. Here one long-lived thread sends everything queued since
its last request in one `Publish` call per topic, through the library's generated
client (its retry and timeout defaults). Requests go one at a time, so messages of
one ordering key reach Pub/Sub in the order they were published."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass

import structlog
from google.api_core import exceptions as gexc
from google.api_core import retry as retries
from google.cloud import pubsub_v1
from google.pubsub_v1.types import PubsubMessage

from shared.bus.attributes import COUNTED
from shared.bus.clients import publisher_client
from shared.bus.topology import full_name
from shared.config import Settings
from shared.events import Event, Limits, OutgoingMessage, encode
from shared.metrics import EVENTS_PUBLISHED
from shared.tracing import with_trace_context

log = structlog.get_logger(__name__)

# Pub/Sub's limits for one Publish request are 1,000 messages and 10 MB.
MAX_BATCH_MESSAGES = 1000
MAX_BATCH_BYTES = 9 * 1024 * 1024
# Queued and in flight at most (AM_PUBLISH_QUEUE_LIMIT's default); beyond that a
# worker's publish waits, the API's fails.
QUEUE_MESSAGE_LIMIT = 10_000
QUEUE_BYTE_LIMIT = 64 * 1024 * 1024


class PublishQueueFull(RuntimeError):
    """More messages wait for Pub/Sub than the queue holds."""


@dataclass(slots=True)
class _Pending:
    topic: str
    message: PubsubMessage
    size: int
    future: Future


# What the generated client retries (its own default, whose 600 s deadline would
# hold every later publish behind one batch while Pub/Sub is down).
_RETRIED = retries.if_exception_type(
    gexc.Aborted,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.ResourceExhausted,
    gexc.ServiceUnavailable,
    gexc.Unknown,
)


class _Sender:
    """The queue and the thread that empties it."""

    def __init__(
        self,
        client: pubsub_v1.PublisherClient,
        block_when_full: bool,
        timeout: float,
        prefix: str = "",
        limit: int = QUEUE_MESSAGE_LIMIT,
    ) -> None:
        self.api = client.api
        self.limit = limit
        self.prefix = prefix  # taken off a topic's id in EVENTS_PUBLISHED's label
        self.block_when_full = block_when_full
        # One batch gets at most what a caller waits for its confirmation.
        self.timeout = timeout
        self.retry = retries.Retry(
            predicate=_RETRIED, initial=0.1, maximum=2.0, multiplier=2.0, timeout=timeout
        )
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        self._count = 0  # queued and in flight
        self._bytes = 0
        self._stopping = False
        self._thread: threading.Thread | None = None

    def put(self, topic: str, message: PubsubMessage, size: int) -> Future:
        future: Future = Future()
        with self._cond:
            while self._full(size):
                if self._stopping:
                    break
                if not self.block_when_full:
                    raise PublishQueueFull(
                        f"{self._count} messages ({self._bytes} bytes) wait for Pub/Sub"
                    )
                self._cond.wait()
            if self._stopping:
                raise RuntimeError("the publisher is stopped")
            self._queue.append(_Pending(topic, message, size, future))
            self._count += 1
            self._bytes += size
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="agent-memory-publisher", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
        return future

    def _full(self, size: int) -> bool:
        # One message alone always fits, whatever its size.
        return self._count > 0 and (
            self._count >= self.limit or self._bytes + size > QUEUE_BYTE_LIMIT
        )

    def full(self) -> bool:
        with self._cond:
            return self._full(0)

    def stop(self) -> None:
        """Send what is queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                taken, self._queue = self._queue, []
            for batch in _batches(taken):
                try:
                    self._send(batch)
                except Exception as exc:  # the thread must outlive anything a batch does
                    log.error("publish batch failed unexpectedly", error=repr(exc))
                with self._cond:
                    self._count -= len(batch)
                    self._bytes -= sum(p.size for p in batch)
                    self._cond.notify_all()

    def _send(self, batch: list[_Pending]) -> None:
        # A caller that stopped waiting may have cancelled its future (asyncio does,
        # on a timeout); it is published all the same (its event id makes a second
        # one harmless), but only a claimed future takes a result.
        claimed = [p.future.set_running_or_notify_cancel() for p in batch]
        try:
            response = self.api.publish(
                topic=batch[0].topic,
                messages=[p.message for p in batch],
                retry=self.retry,
                timeout=self.timeout,
            )
        except Exception as exc:  # every message of the batch fails with it
            for p, mine in zip(batch, claimed, strict=True):
                if mine:
                    p.future.set_exception(exc)
            return
        # Counted whether or not a caller still waits: they are published.
        topic = batch[0].topic.rsplit("/", 1)[-1].removeprefix(self.prefix)
        EVENTS_PUBLISHED.labels(topic).inc(len(batch))
        for p, mine, message_id in zip(batch, claimed, response.message_ids, strict=True):
            if mine:
                p.future.set_result(message_id)


def _batches(pending: list[_Pending]) -> list[list[_Pending]]:
    """Per topic, in publish order, within Pub/Sub's request limits."""
    by_topic: dict[str, list[list[_Pending]]] = {}
    for p in pending:
        chunks = by_topic.setdefault(p.topic, [[]])
        last = chunks[-1]
        if len(last) >= MAX_BATCH_MESSAGES or (
            last and sum(q.size for q in last) + p.size > MAX_BATCH_BYTES
        ):
            last = []
            chunks.append(last)
        last.append(p)
    return [chunk for chunks in by_topic.values() for chunk in chunks]


def counted_publishes(settings: Settings) -> bool:
    """Whether a process of agent-memory reports what it publishes: with Valkey, as
    `shared.bus.reporting` reports (a script's own EventPublisher does not)."""
    return bool(settings.valkey_url)


def publishable(attributes: Mapping[str, str]) -> dict[str, str]:
    """Drop the attributes Pub/Sub adds itself (`googclient_schema…`): keys starting
    with `goog` are reserved and a publish that carries them is refused."""
    return {k: v for k, v in attributes.items() if not k.lower().startswith("goog")}


class EventPublisher:
    """Publishes events (validated against their schemas) and raw messages."""

    def __init__(
        self,
        settings: Settings,
        client: pubsub_v1.PublisherClient | None = None,
        limits: Limits | None = None,
        block_when_full: bool = True,
        counted: bool = False,
    ) -> None:
        """`counted`: this process reports what it publishes to the figures (the
        API, the workers, `dlq replay`, `compact`: `counted_publishes`), so every
        message it publishes says so (COUNTED)."""
        # The library's client gives the generated client (channel, emulator,
        # credentials) and names; its own batching publisher is not used.
        self.client = client or publisher_client()
        self._sender = _Sender(
            self.client,
            block_when_full,
            settings.publish_timeout_seconds,
            settings.topic_prefix,
            settings.publish_queue_limit,
        )
        self.project = settings.google_cloud_project
        self.prefix = settings.topic_prefix
        self.limits = limits or Limits.from_settings(settings)
        self.counted = counted

    def topic_path(self, short: str) -> str:
        return self.client.topic_path(self.project, full_name(self.prefix, short))

    def full(self) -> bool:
        """Would a publish now find the queue full (a worker's wait, the API's refusal)?"""
        return self._sender.full()

    def publish(self, event: Event) -> Future:
        """Publish an event to its topic; the future resolves to the message id."""
        return self.publish_message(encode(event, self.limits))

    def publish_message(self, message: OutgoingMessage) -> Future:
        """Publish an event already encoded (and so validated) by `encode`."""
        return self.publish_raw(
            self.topic_path(message.topic),
            message.data,
            with_trace_context(message.attributes),
            message.ordering_key,
        )

    def publish_raw(
        self,
        topic_path: str,
        data: bytes,
        attributes: Mapping[str, str],
        ordering_key: str = "",
    ) -> Future:
        """Publish bytes as they are (dead-lettering and replay keep the original body);
        COUNTED as this publisher is, whatever the attributes said before."""
        sent = {k: v for k, v in publishable(attributes).items() if k != COUNTED}
        if self.counted:
            sent[COUNTED] = "1"
        message = PubsubMessage(data=data, attributes=sent, ordering_key=ordering_key)
        future = self._sender.put(topic_path, message, len(data))
        future.add_done_callback(
            lambda f: self._after_publish(f, topic_path, ordering_key, attributes)
        )
        return future

    def _after_publish(
        self, future: Future, topic_path: str, ordering_key: str, attributes: Mapping[str, str]
    ) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None:
            return
        log.warning(
            "publish failed",
            topic=topic_path,
            event_id=attributes.get("event_id"),
            event_type=attributes.get("event_type"),
            error=repr(exc),
        )

    def stop(self) -> None:
        """Send what is queued, then stop."""
        self._sender.stop()
