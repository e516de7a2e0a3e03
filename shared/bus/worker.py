"""The subscriber runtime every worker uses: one subscription, three parts.

    pull (unary_pull.UnaryPull on the emulator, streaming_pull.StreamingPull on Pub/Sub)
      │  hands each message, from threads of its own, to
      ▼
    dispatch.Dispatcher: a queue and `concurrency` handler threads; decodes the
      │  message and calls its handler (a batch handler takes the waiting ones)
      ▼
    settling.Settler: ack, hold for a dependency, nack with the retry backoff,
       or dead-letter; the message's one log line

While a dependency is down (`dependencies`) the runtime pulls nothing new and
holds what it has.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import structlog
from google.cloud import pubsub_v1

from shared.bus.clients import subscriber_client
from shared.bus.contract import (
    BatchHandler,
    BatchResult,
    Continue,
    DeadLetterHook,
    DeadLetterNotice,
    Delivery,
    Handler,
    HandlerTable,
    Outcome,
)
from shared.bus.dependencies import Dependencies
from shared.bus.dispatch import Dispatcher
from shared.bus.message import Message, Pull, PullOptions
from shared.bus.publisher import EventPublisher
from shared.bus.settling import Settler
from shared.bus.streaming_pull import StreamingPull
from shared.bus.topology import dead_letter_name, full_name
from shared.bus.unary_pull import UnaryPull
from shared.config import Settings
from shared.metrics import MESSAGES_IN_FLIGHT, WORKER_CONCURRENCY

__all__ = [
    "BatchHandler",
    "BatchResult",
    "Continue",
    "DeadLetterHook",
    "DeadLetterNotice",
    "Delivery",
    "Handler",
    "HandlerTable",
    "Outcome",
    "SubscriberRuntime",
]

log = structlog.get_logger("agent_memory.worker")

PREFETCH_FACTOR = 4  # messages leased ahead of the handlers, so pulls come in batches


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
        self.subscriber = subscriber or subscriber_client()
        self.concurrency = concurrency
        # Without probes a dependency counts as back once its backoff has passed.
        self._own_dependencies = dependencies is None
        self.dependencies = dependencies or Dependencies(
            retry_min=settings.dependency_retry_min_seconds,
            retry_max=settings.dependency_retry_max_seconds,
        )
        project = settings.google_cloud_project
        path = self.subscriber.subscription_path(
            project, full_name(settings.topic_prefix, subscription)
        )
        dead_letter_topic = publisher.client.topic_path(
            project, full_name(settings.topic_prefix, dead_letter_name(subscription))
        )
        settler = Settler(
            settings, subscription, publisher, dead_letter_topic, self.dependencies, on_dead_letter
        )
        self.dispatcher = Dispatcher(
            settings, subscription, handlers, settler, self.dependencies, concurrency
        )
        self.mode = resolve_pull_mode(settings)
        options = PullOptions(
            self.subscriber,
            path,
            max_outstanding=concurrency * PREFETCH_FACTOR,
            lease_seconds=settings.lease_extension_seconds,
            # Pub/Sub honours the retry policy; the emulator does not.
            backoff_emulated=bool(settings.pubsub_emulator_host),
        )
        self.pull: Pull
        if self.mode == "unary":
            self.pull = UnaryPull(
                options,
                self.dispatcher.receive,
                # A batch handler orders its events itself (the summary worker's
                # buffer by `created_at`): all of a pull can be one batch.
                in_key_order=self.dispatcher.batch_size == 1,
                may_pull=lambda: self.dependencies.ready,
                on_error=lambda exc: self.dependencies.report("pubsub", exc),
                on_arrival=self.dispatcher.arrived,
            )
        else:
            self.pull = StreamingPull(options, self._streamed, thread_name=f"stream-{subscription}")
        WORKER_CONCURRENCY.labels(subscription).set(concurrency)
        MESSAGES_IN_FLIGHT.labels(subscription).set_function(self.in_flight)

    def start(self) -> None:
        self.dependencies.start()  # shared by the process's runtimes: once is enough
        self.dispatcher.start()
        self.pull.start()
        log.info(
            "worker started",
            subscription=self.subscription,
            concurrency=self.concurrency,
            pull_mode=self.mode,
        )

    def request_stop(self) -> None:
        """Stop taking new messages (returns at once; `stop` waits for the drain).
        The two parts stop in either order: the pull gives back what it never
        handed on, the dispatcher hands back what no handler took."""
        self.pull.request_stop()
        self.dispatcher.request_stop()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop pulling, let in-flight handlers finish for at most `timeout` seconds.

        Messages received but not started (or held for a dependency) are nacked
        (redelivered elsewhere). Returns False if handlers were still running at
        the deadline; their messages are not acknowledged and come back when their
        lease ends.
        """
        timeout = self.settings.worker_shutdown_seconds if timeout is None else timeout
        deadline = time.monotonic() + timeout
        self.request_stop()
        drained = self.dispatcher.stop(timeout)
        drained &= self.pull.stop(max(0.0, deadline - time.monotonic()))
        if self._own_dependencies:
            self.dependencies.close()
        if not drained:
            log.warning(
                "worker stop deadline passed with handlers running",
                subscription=self.subscription,
                in_flight=self.in_flight(),
                timeout_s=timeout,
            )
        log.info("worker stopped", subscription=self.subscription, drained=drained)
        return drained

    def wait(self) -> None:
        """Raise the pull's error if it failed."""
        if self.pull.error is not None:
            raise self.pull.error

    @property
    def running(self) -> bool:
        return self.pull.running

    def _streamed(self, messages: Sequence[Message]) -> None:
        # The streaming client holds a key's messages itself: they arrive here in turn.
        self.dispatcher.arrived(messages)
        self.dispatcher.receive(messages)

    def in_flight(self) -> int:
        """Messages pulled and not yet settled."""
        return self.pull.in_flight()
