"""The subscriber runtime every worker uses.

Streaming pull (on Pub/Sub) or unary pull (on the emulator; see `unary_pull`)
with explicit flow control and a thread pool of the same size (sized to the
worker's connection pool). Each message goes through `dispatch` (decode, handle,
settle, one log line); `settling` decides what an error means (dead-letter now,
hold for a dependency, retry after a backoff). While a dependency is down
(`dependencies`) the runtime pulls nothing new.

A table with a `BatchHandler` gets whole unary pulls, so that its `first` takes
all events of its type from one pull in one call (the summary worker appends
them to Valkey in one pipeline); every event still gets its own outcome, ack,
retry or dead letter, and each `then` runs on a handler thread.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import structlog
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber.message import Message
from google.cloud.pubsub_v1.subscriber.scheduler import ThreadScheduler
from google.cloud.pubsub_v1.types import FlowControl

from shared.bus.clients import subscriber_client
from shared.bus.contract import (
    BatchHandler,
    BatchResult,
    Continue,
    DeadLetter,
    DeadLetterHook,
    Delivery,
    Handler,
    HandlerTable,
    Outcome,
)
from shared.bus.dependencies import Dependencies
from shared.bus.dispatch import Dispatcher
from shared.bus.publisher import EventPublisher
from shared.bus.settling import Settler
from shared.bus.topology import dead_letter_name, full_name
from shared.bus.unary_pull import PREFETCH_FACTOR, PulledMessage, UnaryPullDelivery
from shared.config import Settings
from shared.metrics import MESSAGES_IN_FLIGHT, WORKER_CONCURRENCY

__all__ = [
    "BatchHandler",
    "BatchResult",
    "Continue",
    "DeadLetter",
    "DeadLetterHook",
    "Delivery",
    "Handler",
    "HandlerTable",
    "Outcome",
    "SubscriberRuntime",
]

log = structlog.get_logger("agent_memory.worker")

# Streaming pull: how long the library keeps extending a held message's lease. A
# message held through a longer outage comes back as a new delivery attempt.
MAX_LEASE_SECONDS = 7 * 24 * 3600


def resolve_pull_mode(settings: Settings) -> str:
    if settings.pull_mode != "auto":
        return settings.pull_mode
    return "unary" if settings.pubsub_emulator_host else "streaming"


class SubscriberRuntime:
    """Consumes one subscription with a handler table until stopped."""

    def __init__(
        self,
        settings: Settings,
        subscription: str,
        handlers: HandlerTable,
        publisher: EventPublisher,
        *,
        concurrency: int,
        subscriber: pubsub_v1.SubscriberClient | None = None,
        dependencies: Dependencies | None = None,
        on_dead_letter: DeadLetterHook | None = None,
    ) -> None:
        self.settings = settings
        self.subscription = subscription
        self.handlers = handlers
        self.publisher = publisher
        self.subscriber = subscriber or subscriber_client()
        self.concurrency = concurrency
        # Without probes a dependency counts as back once its backoff has passed.
        self._own_dependencies = dependencies is None
        self.dependencies = dependencies or Dependencies(
            retry_min=settings.dependency_retry_min_seconds,
            retry_max=settings.dependency_retry_max_seconds,
        )
        project = settings.google_cloud_project
        self.subscription_path = self.subscriber.subscription_path(
            project, full_name(settings.topic_prefix, subscription)
        )
        self.settler = Settler(
            settings,
            subscription,
            publisher,
            publisher.client.topic_path(
                project, full_name(settings.topic_prefix, dead_letter_name(subscription))
            ),
            self.dependencies,
            on_dead_letter,
        )
        self.mode = resolve_pull_mode(settings)
        self._future: pubsub_v1.subscriber.futures.StreamingPullFuture | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._unary: UnaryPullDelivery | None = None
        WORKER_CONCURRENCY.labels(subscription).set(concurrency)
        MESSAGES_IN_FLIGHT.labels(subscription).set_function(self.in_flight)
        self._handling = 0  # streaming pull: messages in a handler's callback now
        self._handling_lock = threading.Lock()
        self._stopping = threading.Event()
        self._dispatcher = Dispatcher(
            settings, subscription, handlers, self.settler, self.dependencies, self._stopping
        )

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> None:
        self.dependencies.start()  # shared by the process's runtimes: once is enough
        threads = f"handler-{self.subscription}"
        if self.mode == "unary":
            # A pull goes to one thread only where a batch handler can take it
            # whole; otherwise each message is decoded and handled on its own.
            batches = any(isinstance(e, BatchHandler) for e in self.handlers.values())
            self._unary = UnaryPullDelivery(
                self.subscriber,
                self.subscription_path,
                self._on_pull,
                self.concurrency,
                self.settings.lease_extension_seconds,
                threads,
                whole_pulls=batches,
                may_pull=lambda: self.dependencies.ready,
                on_error=lambda exc: self.dependencies.report("pubsub", exc),
            )
            self._unary.start()
        else:
            self._executor = ThreadPoolExecutor(
                max_workers=self.concurrency, thread_name_prefix=threads
            )
            self._future = self.subscriber.subscribe(
                self.subscription_path,
                callback=self._on_message,
                flow_control=FlowControl(
                    max_messages=self.concurrency * PREFETCH_FACTOR,
                    max_duration_per_lease_extension=self.settings.lease_extension_seconds,
                    max_lease_duration=MAX_LEASE_SECONDS,
                ),
                scheduler=ThreadScheduler(executor=self._executor),
                await_callbacks_on_shutdown=True,
            )
        log.info(
            "worker started",
            subscription=self.subscription,
            concurrency=self.concurrency,
            pull_mode=self.mode,
        )

    def request_stop(self) -> None:
        """Stop taking new messages (returns at once; `stop` waits for the drain)."""
        self._stopping.set()
        self.settler.flush()
        if self._unary is not None:
            self._unary.request_stop()
        if self._future is not None:
            self._future.cancel()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop pulling, let in-flight handlers finish for at most `timeout` seconds.

        Messages held but not started (or held for a dependency) are nacked
        (redelivered elsewhere). Returns False if handlers were still running at
        the deadline; their messages are not acknowledged and come back when their
        lease ends.
        """
        timeout = self.settings.worker_shutdown_seconds if timeout is None else timeout
        self._stopping.set()
        self.settler.flush()
        if self._unary is not None:
            drained = self._unary.stop(timeout)
        elif self._future is not None:
            self._future.cancel()
            drained = True
            try:
                self._future.result(timeout=timeout)
            except TimeoutError:
                drained = False
            except Exception as exc:  # the stream had already failed; it is stopped either way
                log.warning("worker stream ended with an error", error=repr(exc))
        else:
            return True
        self.settler.close()
        if self._own_dependencies:
            self.dependencies.close()
        if not drained:
            log.warning(
                "worker stop deadline passed with handlers running",
                subscription=self.subscription,
                in_flight=self._unary.in_flight() if self._unary else None,
                timeout_s=timeout,
            )
        log.info("worker stopped", subscription=self.subscription, drained=drained)
        return drained

    def wait(self, timeout: float | None = None) -> None:
        """Block until delivery ends; raise its error if it failed."""
        if self._unary is not None:
            if self._unary.error is not None:
                raise self._unary.error
            return
        assert self._future is not None
        self._future.result(timeout=timeout)

    @property
    def running(self) -> bool:
        if self._unary is not None:
            return self._unary.running
        return self._future is not None and not self._future.done()

    def in_flight(self) -> int:
        """Messages leased and not yet settled (streaming pull: those in a handler)."""
        return self._unary.in_flight() if self._unary is not None else self._handling

    # -- messages --------------------------------------------------------------
    def _on_message(self, message: Message) -> None:
        """Streaming pull: one message on a handler thread, every step inline."""
        with self._handling_lock:
            self._handling += 1
        try:
            self._dispatcher.handle([message], None)
        finally:
            with self._handling_lock:
                self._handling -= 1

    def _on_pull(self, messages: list[PulledMessage]) -> None:
        """Unary pull. Whole pulls (a table with a `BatchHandler`): events of a
        `BatchHandler` are handled together here, every other message (and every
        `then`) on its own thread. Otherwise one message, every step inline."""
        assert self._unary is not None
        self._dispatcher.handle(
            messages, self._unary.run_later if self._unary.whole_pulls else None
        )
