"""The way of a message through a worker: a pull hands it to `receive`, from a
thread of the pull's own; a handler thread decodes it, calls its handler and
settles it (`settling`). Nothing here calls back into a pull: a message leaves
only through `ack`, `nack` or `extend`, all called by the settler, or by the
hold for a dependency.

Messages wait in one queue for `concurrency` handler threads. A thread takes one
message, or, where the table's handlers are `BatchHandler`s, every message
waiting (up to MAX_BATCH) for one call of `first`; an event that `first` answers
with `Continue` goes back to the front of the queue for another thread to run its
`then`. The same under streaming and unary pull.

While a dependency is down every message taken here waits, leased, until the
dependency answers; then it is handled again from the start. Its delivery
attempts are not spent on it. What waits in the queue meanwhile, behind the
held ones, is extended with them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from shared.bus.attributes import COUNTED, REPLAYED_FOR
from shared.bus.contract import BatchHandler, Continue, Handler, HandlerTable, Outcome
from shared.bus.dependencies import Dependencies
from shared.bus.message import Message
from shared.bus.settling import Pending, Settler
from shared.config import Settings
from shared.errors import PermanentError
from shared.events import Limits, decode
from shared.llm.accounting import for_app
from shared.metrics import DELIVERY_LAG_SECONDS, MESSAGES_HELD, MESSAGES_UNCOUNTED
from shared.tracing import current, start_consumer_span

log = structlog.get_logger("agent_memory.worker")

MAX_BATCH = 1000  # messages one call of a batch handler's `first` takes at most
HOLD_CHECK_SECONDS = 60.0  # how often the leases of held and queued messages are renewed


@dataclass
class _Then:
    """A batch handler's second phase for one event, waiting for a thread."""

    pending: Pending
    value: Any


class Dispatcher:
    """Handles and settles the messages of one subscription on its own threads."""

    def __init__(
        self,
        settings: Settings,
        subscription: str,
        handlers: HandlerTable,
        settler: Settler,
        dependencies: Dependencies,
        concurrency: int,
    ) -> None:
        batch = [isinstance(h, BatchHandler) for h in handlers.values()]
        if any(batch) and not all(batch):
            raise ValueError(f"{subscription}: a table is all batch handlers or none")
        self.subscription = subscription
        self.handlers = handlers
        self.settler = settler
        self.dependencies = dependencies
        self.concurrency = concurrency
        self.batch_size = MAX_BATCH if batch and all(batch) else 1
        self.limits = Limits(settings.max_message_bytes, settings.max_tool_events_bytes)
        self.max_delivery_attempts = settings.max_delivery_attempts
        self.hold_check_seconds = HOLD_CHECK_SECONDS
        self._queue: deque[Message | _Then] = deque()
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._held = MESSAGES_HELD.labels(subscription)
        self._lag = DELIVERY_LAG_SECONDS.labels(subscription)
        self._uncounted = MESSAGES_UNCOUNTED.labels(subscription)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        for n in range(self.concurrency):
            name = f"handler-{self.subscription}-{n}"
            thread = threading.Thread(target=self._work, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def arrived(self, messages: Sequence[Message]) -> None:
        """Note messages as they reach this process (the pull calls it at once, before
        any waits behind its ordering key): their delivery lag, and those no
        publisher counted, which the backlog figures count as published."""
        now = datetime.now(UTC)
        for message in messages:
            if message.publish_time is not None:
                self._lag.observe(max(0.0, (now - message.publish_time).total_seconds()))
            if COUNTED not in message.attributes and (message.delivery_attempt or 1) == 1:
                self._uncounted.inc()

    def receive(self, messages: Sequence[Message]) -> None:
        """Queue `messages` for the handler threads (a pull's sink, called from the
        pull's own threads)."""
        with self._cond:
            stopping = self._stopping.is_set()
            if not stopping:
                self._queue.extend(messages)
                self._cond.notify(len(messages))
        if stopping:
            for message in messages:
                self._hand_back(Pending.of(message), "before handling it")

    def request_stop(self) -> None:
        """Take nothing new: what waits in the queue is handed back (nacked)."""
        with self._cond:
            self._stopping.set()
            waiting, self._queue = list(self._queue), deque()
            self._cond.notify_all()
        for item in waiting:
            pending = item.pending if isinstance(item, _Then) else Pending.of(item)
            self._hand_back(pending, "before handling it")

    def stop(self, timeout: float) -> bool:
        """Wait up to `timeout` for the handler threads; True if every one ended."""
        deadline = time.monotonic() + timeout
        self.request_stop()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    # -- the handler threads ---------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping.is_set():
                    self._cond.wait()
                if not self._queue:
                    return
                taken = self._take()
            if isinstance(taken, _Then):
                then: _Then | None = taken
                pending = [taken.pending]
            else:
                then, pending = None, [Pending.of(m) for m in taken]
            try:
                if then is not None:
                    self._run_then(then)
                elif self._stopping.is_set():
                    for p in pending:
                        self._hand_back(p, "before handling it")
                else:
                    self._handle(pending)
            except BaseException as exc:
                # The thread outlives whatever escaped (a library's BaseException
                # too): what it had taken is handed back, not left leased.
                log.error("handler thread failed", subscription=self.subscription, error=repr(exc))
                self._hand_back_unsettled(pending, f"the runtime failed ({exc!r})")
                if isinstance(exc, KeyboardInterrupt):
                    raise

    def _hand_back_unsettled(self, pending: list[Pending], reason: str) -> None:
        for p in pending:
            if not p.settled:
                try:
                    self.settler.hand_back(p, f"{reason}; nacked for redelivery")
                except Exception as exc:  # its lease ends and Pub/Sub redelivers it
                    log.error("hand-back failed", error=repr(exc), message_id=p.message.message_id)

    def _take(self) -> list[Message] | _Then:
        """The next continuation, or the next messages (a batch where batching)."""
        first = self._queue.popleft()
        if isinstance(first, _Then):
            return first
        taken = [first]
        while len(taken) < self.batch_size and self._queue:
            following = self._queue[0]
            if isinstance(following, _Then):
                break
            self._queue.popleft()
            taken.append(following)
        return taken

    def _handle(self, pending: list[Pending]) -> None:
        """Handle `pending` until each is settled: those held for a dependency wait
        here, leased, until it answers, and are handled again from the start."""
        while pending:
            if not self._await_dependencies(pending):
                return
            pending = self._dispatch(pending)

    def _await_dependencies(self, held: list[Pending]) -> bool:
        """Wait until every dependency answers: True; or the worker stops first:
        False, and `held` is handed back (nacked) for redelivery."""
        if self.dependencies.ready:
            return True
        self._held.inc(len(held))
        try:
            while not self.dependencies.wait_until_ready(self._stopping, self.hold_check_seconds):
                if self._stopping.is_set():
                    break
                # However long the outage, they stay ours: the held ones, and what
                # waits in the queue for a thread that holds.
                for message in [p.message for p in held] + self._queued():
                    message.extend()
            else:
                return True
        finally:
            self._held.dec(len(held))
        down = ", ".join(sorted(self.dependencies.down())) or "a dependency"
        for p in held:
            self._hand_back(p, f"while {down} was down")
        return False

    def _queued(self) -> list[Message]:
        with self._cond:
            return [i.pending.message if isinstance(i, _Then) else i for i in self._queue]

    def _dispatch(self, pending: list[Pending]) -> list[Pending]:
        """Route and handle `pending`; the ones held for a dependency are returned."""
        held: list[Pending] = []
        batches: dict[BatchHandler, list[Pending]] = {}
        for p in pending:
            p.started = time.perf_counter()
            p.event, p.span = None, start_consumer_span(self.subscription, p.attributes)
            entry = self._route(p)
            if isinstance(entry, BatchHandler):
                batches.setdefault(entry, []).append(p)
            elif isinstance(entry, (Outcome, Exception)):
                held += self._settled(p, entry)
            else:
                held += self._call(p, entry)
        for handler, batch in batches.items():
            held += self._run_batch(handler, batch)
        return held

    def _route(self, p: Pending) -> Handler | BatchHandler | Outcome | Exception:
        """The handler of `p`, or what it ends with unhandled."""
        meant_for = p.attributes.get(REPLAYED_FOR)
        if meant_for and meant_for != self.subscription:
            return Outcome.SKIPPED
        if p.attempt > self.max_delivery_attempts:
            # Not run again: whatever happened on its last attempt may happen again.
            return PermanentError(
                f"delivered {p.attempt} times; attempt {p.attempt - 1} ended "
                "without an outcome (a worker crashed or was stopped while handling it)"
            )
        try:
            p.event = decode(p.message.data, p.attributes, self.limits)
            handler = self.handlers.get(type(p.event))
            if handler is None:
                raise PermanentError(f"no handler for {p.event.EVENT_TYPE} on {self.subscription}")
        except Exception as exc:
            return exc
        return handler

    def _call(self, p: Pending, handler: Handler) -> list[Pending]:
        """Run `handler` on `p` with its log context bound for the handler's own log
        lines and its app for the model calls it makes (their metrics and limit)."""
        result: object
        with _bound(p, self.subscription):
            try:
                result = handler(p.decoded, p.delivery(self.subscription))
            except Exception as exc:
                result = exc
        return self._settled(p, result)

    def _run_batch(self, handler: BatchHandler, batch: list[Pending]) -> list[Pending]:
        items = [(p.decoded, p.delivery(self.subscription)) for p in batch]
        results: list[object]
        try:
            results = list(handler.first(items))
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for {len(batch)} events")
        except Exception as exc:
            results = [exc] * len(batch)
        held: list[Pending] = []
        for p, result in zip(batch, results, strict=True):
            if isinstance(result, Continue) and handler.then is not None:
                with self._cond:
                    self._queue.appendleft(_Then(p, result.value))
                    self._cond.notify()
            elif isinstance(result, Continue):
                held += self._settled(
                    p, TypeError("a batch handler without `then` returned Continue")
                )
            else:
                held += self._settled(p, result)
        return held

    def _run_then(self, then: _Then) -> None:
        p = then.pending
        if p.settled:  # the runtime failed after its batch and handed it back
            return
        if self._stopping.is_set():
            self._hand_back(p, "before handling it")
            return
        handler = self.handlers[type(p.event)]
        assert isinstance(handler, BatchHandler) and handler.then is not None
        result: object
        with _bound(p, self.subscription):
            try:
                result = handler.then(p.decoded, p.delivery(self.subscription), then.value)
            except Exception as exc:
                result = exc
        if self._settled(p, result):  # handled again from the start once its dependency answers
            self._handle([Pending.of(p.message)])

    def _settled(self, p: Pending, result: object) -> list[Pending]:
        """Settle `p` with its handler's result; [p] when it is held instead."""
        if isinstance(result, Exception):
            outcome = self.settler.settle(p, error=result)
        else:
            outcome = self.settler.settle(p, result)
        return [p] if outcome is Outcome.HELD else []

    def _hand_back(self, p: Pending, when: str) -> None:
        self.settler.hand_back(p, f"the worker stopped {when}; nacked for redelivery")


@contextmanager
def _bound(p: Pending, subscription: str) -> Iterator[None]:
    """`p`'s log context, tracing span and app (for the model calls' metrics and
    limit), bound while its handler runs."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(**p.context(subscription))
    try:
        with current(p.span), for_app(p.attributes.get("app") or ""):
            yield
    finally:
        structlog.contextvars.clear_contextvars()
