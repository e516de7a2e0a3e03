"""Streaming pull, the pull the runtime uses on Pub/Sub (`unary_pull` is the
emulator's, whose streams do not survive a worker that stops).

The client library leases, extends and orders: it calls back with a message of
an ordering key only once the one before it is settled, on a thread of its own
executor, never on a handler thread. With `backoff_emulated` (a streaming pull
against the emulator, `AM_PULL_MODE=streaming`) a nack's delay is kept here.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import structlog
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber.message import Message as StreamMessage
from google.cloud.pubsub_v1.subscriber.scheduler import ThreadScheduler
from google.cloud.pubsub_v1.types import FlowControl

from shared.bus.delayed_nacks import DelayedNacks
from shared.bus.message import PullOptions, Sink

log = structlog.get_logger("agent_memory.worker")

# Streaming pull: how long the library keeps extending a held message's lease. A
# message held through a longer outage comes back as a new delivery attempt.
MAX_STREAMING_LEASE_SECONDS = 7 * 24 * 3600


class StreamedMessage:
    """A streaming-pull message behind the runtime's `Message` surface."""

    def __init__(self, message: StreamMessage, delayed: DelayedNacks | None) -> None:
        self._message = message
        self._delayed = delayed
        self._decided = threading.Event()
        self.data: bytes = message.data
        self.attributes: Mapping[str, str] = message.attributes
        self.ordering_key: str = message.ordering_key
        self.message_id: str = message.message_id
        self.delivery_attempt: int = message.delivery_attempt or 1
        self.publish_time: datetime | None = message.publish_time

    def ack(self) -> None:
        if self._decided.is_set():  # the first ack or nack counts
            return
        self._message.ack()
        self._decided.set()

    def nack(self, delay: float = 0.0) -> None:
        if self._decided.is_set():
            return
        if self._delayed is not None and delay > 0:
            self._delayed.add(self._message.nack, delay)
        else:
            self._message.nack()
        self._decided.set()

    def extend(self) -> None:
        """Nothing to do: the library extends every lease up to its maximum itself."""

    def wait_decided(self) -> None:
        self._decided.wait()


class StreamingPull:
    """Streaming pull with the client library's flow control and lease management.

    Each message's library callback hands it to the sink and waits until it is
    acknowledged or nacked: the library sends acks only while callbacks run at
    shutdown, and counts a message against flow control until it is settled."""

    def __init__(self, options: PullOptions, sink: Sink, *, thread_name: str) -> None:
        self.options = options
        self.sink = sink
        self.delayed = options.delayed_nacks()
        self.thread_name = thread_name
        self._future: pubsub_v1.subscriber.futures.StreamingPullFuture | None = None
        self._waiting = 0  # messages handed to the sink and not yet settled
        self._lock = threading.Lock()

    def start(self) -> None:
        executor = ThreadPoolExecutor(
            self.options.max_outstanding, thread_name_prefix=self.thread_name
        )
        self._future = self.options.subscriber.subscribe(
            self.options.path,
            callback=self._on_message,
            flow_control=FlowControl(
                max_messages=self.options.max_outstanding,
                max_duration_per_lease_extension=self.options.lease_seconds,
                max_lease_duration=MAX_STREAMING_LEASE_SECONDS,
            ),
            scheduler=ThreadScheduler(executor=executor),
            await_callbacks_on_shutdown=True,
        )

    def _on_message(self, message: StreamMessage) -> None:
        streamed = StreamedMessage(message, self.delayed)
        with self._lock:
            self._waiting += 1
        try:
            self.sink([streamed])
            streamed.wait_decided()
        finally:
            with self._lock:
                self._waiting -= 1

    def request_stop(self) -> None:
        """Stop receiving (returns at once); what waits for its backoff is nacked now."""
        if self.delayed is not None:
            self.delayed.flush()
        if self._future is not None:
            self._future.cancel()

    def stop(self, timeout: float) -> bool:
        """Wait up to `timeout` for the stream to close; True if it did."""
        self.request_stop()
        if self._future is None:
            return True
        drained = True
        try:
            self._future.result(timeout=timeout)
        except TimeoutError:
            drained = False
        except Exception as exc:  # the stream had already failed; it is stopped either way
            log.warning("worker stream ended with an error", error=repr(exc))
        if self.delayed is not None:
            self.delayed.close()
        return drained

    @property
    def running(self) -> bool:
        return self._future is not None and not self._future.done()

    @property
    def error(self) -> BaseException | None:
        if self._future is None or not self._future.done():
            return None
        try:
            return self._future.exception(timeout=0)
        except Exception as exc:  # cancelled
            return exc

    def in_flight(self) -> int:
        with self._lock:
            return self._waiting
