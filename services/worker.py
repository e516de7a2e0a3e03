"""`agent-memory worker KIND`: one worker process consuming its subscriptions.

SIGTERM or SIGINT stops pulling; handlers in flight get `AM_WORKER_SHUTDOWN_SECONDS`
(default 8 s, inside Cloud Run's 10 s termination grace period) to finish, held
messages are nacked, and the process exits. A handler still running at the
deadline does not ack: its message is redelivered and the ledger makes that safe.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import structlog
from google.cloud import pubsub_v1

from services.compaction_worker import handlers as compaction
from services.extraction_worker import handlers as extraction
from services.extraction_worker.idle_windows import IdleWindows
from services.summary_worker import handlers as summary
from shared.bootstrap import Resources, bootstrap, throttled_llm
from shared.bus.changes import ChangeRelay
from shared.bus.clients import subscriber_client
from shared.bus.contract import BatchHandler, DeadLetterHook, Handler
from shared.bus.dependencies import Dependencies
from shared.bus.reporting import start_reporting
from shared.bus.topology import WORKER_KINDS, full_name, subscriptions_of
from shared.bus.worker import SubscriberRuntime
from shared.config import Settings
from shared.db.unit_of_work import UnitsOfWork
from shared.llm.accounting import set_worker
from shared.metrics import serve_metrics
from shared.probes import worker_probes
from shared.tracing import configure as configure_tracing

log = structlog.get_logger("agent_memory.worker")

# A Postgres worker's pool when AM_DB_POOL_SIZE is unset: its handlers hold a
# connection only for their reads and one short transaction, never across a model
# call, so a few connections serve many handlers.
DEFAULT_POOL_SIZE = 4


@dataclass(frozen=True)
class WorkerKind:
    postgres: bool
    valkey: bool
    llm: bool
    embedder: bool
    # The handler of each event type its subscriptions carry (the topology's).
    handlers: Callable[[Resources], Mapping[type, Handler | BatchHandler]]
    # Handlers at once when AM_WORKER_CONCURRENCY is unset. The summary handler
    # waits mostly on Valkey round trips, so more of them drain faster; an extraction
    # handler mostly on the model.
    default_concurrency: int
    # What a subscription's dead letters must tell before they go (see DeadLetterHook).
    dead_letter_hooks: Callable[[Resources], Mapping[type, DeadLetterHook]] | None = None
    # A thread of the kind's own beside its subscriptions (started and stopped with them).
    background: Callable[[Resources, Dependencies], Background] | None = None


class Background(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


def idle_windows(resources: Resources, dependencies: Dependencies) -> IdleWindows:
    """The extraction worker's check for windows with no new turn for a while."""
    assert resources.pool is not None and resources.publisher is not None
    settings = resources.settings
    return IdleWindows(
        UnitsOfWork(resources.pool, "extraction"),
        extraction.publishing(resources.publisher, settings),
        settings.extraction_window_seconds,
        ready=lambda: dependencies.ready,
    )


WORKERS: dict[str, WorkerKind] = {
    "summary": WorkerKind(
        postgres=False,
        valkey=True,
        llm=True,
        embedder=False,
        handlers=summary.handlers,
        default_concurrency=64,
    ),
    "extraction": WorkerKind(
        postgres=True,
        valkey=False,
        llm=True,
        embedder=True,
        handlers=extraction.handlers,
        default_concurrency=16,
        dead_letter_hooks=extraction.dead_letter_hooks,
        background=idle_windows,
    ),
    "compaction": WorkerKind(
        postgres=True,
        valkey=False,
        llm=True,
        embedder=True,
        handlers=compaction.handlers,
        # Few requests, each a large fold (an LLM call over up to a batch of episodes);
        # folds of one user are serialised by the user's lock anyway.
        default_concurrency=4,
    ),
}
assert tuple(WORKERS) == WORKER_KINDS, "a worker kind is declared by its subscriptions"


def stop_all(runtimes: list[SubscriberRuntime], timeout: float) -> bool:
    """Stop every runtime within one shared deadline; True if all drained."""
    deadline = time.monotonic() + timeout
    for runtime in runtimes:
        runtime.request_stop()
    drained = True
    for runtime in runtimes:
        drained &= runtime.stop(timeout=max(0.0, deadline - time.monotonic()))
    return drained


def run_worker(kind: str, settings: Settings) -> int:
    """Run until SIGTERM/SIGINT (exit 0) or until a stream fails (exit 1)."""
    spec = WORKERS[kind]
    set_worker(kind)
    concurrency = settings.worker_concurrency or spec.default_concurrency
    # The model calls' limit per app is counted in Valkey: every kind then needs it
    # (and its readiness covers it).
    throttled = spec.llm and throttled_llm(settings)
    resources = bootstrap(
        settings,
        postgres=spec.postgres,
        use_valkey=spec.valkey or throttled,
        llm=spec.llm,
        llm_throttle=throttled,
        embedder=spec.embedder,
        publisher=True,
        pool_size=settings.db_pool_size or min(concurrency, DEFAULT_POOL_SIZE),
    )
    handlers = spec.handlers(resources)
    publisher = resources.publisher
    assert publisher is not None  # every worker publishes (dead letters, continuations)
    hooks = spec.dead_letter_hooks(resources) if spec.dead_letter_hooks else {}
    subscriptions = subscriptions_of(kind)
    subscriber = subscriber_client()
    names = [s.name for s in subscriptions]
    dependencies = _dependencies(spec, settings, resources, subscriber, names)
    serve_metrics(settings.metrics_host, settings.metrics_port, down=dependencies.down)
    configure_tracing(settings.tracing, f"agent-memory-worker-{kind}")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    runtimes = [
        SubscriberRuntime(
            settings,
            subscription.name,
            {subscription.event: handlers[subscription.event]},
            publisher,
            concurrency=concurrency,
            subscriber=subscriber,
            dependencies=dependencies,
            on_dead_letter=hooks.get(subscription.event),
        )
        for subscription in subscriptions
    ]
    background = spec.background(resources, dependencies) if spec.background else None
    # The backlog, replicas and rates the console shows, in Valkey (off without it).
    figures = start_reporting(
        settings, kind=kind, subscriptions=names, dependencies=dependencies.states
    )
    # The Postgres kinds change memories: they publish their changes (the outbox).
    relay = None
    if spec.postgres:
        assert resources.pool is not None and resources.publisher is not None
        relay = ChangeRelay(settings, resources.pool, resources.publisher)
    dependencies.start()
    try:
        for runtime in runtimes:
            runtime.start()
        if background is not None:
            background.start()
        if relay is not None:
            relay.start()
        exit_code = _run_until_stopped(runtimes, stop)
        if background is not None:
            background.stop()
        drained = stop_all(runtimes, settings.worker_shutdown_seconds)
        if relay is not None and drained:
            relay.stop()
        log.info("worker exiting", kind=kind, drained=drained, exit_code=exit_code)
        if not drained:
            # Handlers still running hold pool connections and non-daemon threads that
            # would keep the process alive past its bound; their messages were not
            # acknowledged and come back when their lease ends.
            if figures is not None:
                figures.stop()
            sys.stderr.flush()
            os._exit(exit_code or 1)
    finally:
        dependencies.close()
        resources.close()
        # After the publisher's flush, so that its last publishes are counted.
        if figures is not None:
            figures.stop()
    return exit_code


def _dependencies(
    spec: WorkerKind,
    settings: Settings,
    resources: Resources,
    subscriber: pubsub_v1.SubscriberClient,
    subscriptions: list[str],
) -> Dependencies:
    """What the worker's handlers need, probed while down (and Postgres and Valkey
    while up as well)."""
    paths = [
        subscriber.subscription_path(
            settings.google_cloud_project, full_name(settings.topic_prefix, name)
        )
        for name in subscriptions
    ]
    return Dependencies(
        worker_probes(
            settings,
            pool=resources.pool,
            valkey_client=resources.valkey,
            llm=spec.llm,
            embeddings=spec.embedder,
            subscriber=subscriber,
            subscription_paths=paths,
        ),
        retry_min=settings.dependency_retry_min_seconds,
        retry_max=settings.dependency_retry_max_seconds,
        probe_interval=settings.dependency_probe_seconds,
    )


def _run_until_stopped(runtimes: list[SubscriberRuntime], stop: threading.Event) -> int:
    """Wait for a stop signal (0) or for a runtime whose delivery failed (1)."""
    while not stop.wait(0.5):
        failed = [r for r in runtimes if not r.running]
        if failed:
            for runtime in failed:
                try:
                    runtime.wait()
                except Exception as exc:
                    log.error(
                        "subscription stream failed",
                        subscription=runtime.subscription,
                        error=repr(exc),
                    )
            return 1
    return 0
