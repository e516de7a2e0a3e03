"""The way of one message through a worker: decode and validate, run its table
entry, then settle it (`settling`) and write its one log line.

A message's table entry is a list of handlers, run one after another on one
thread, or a `BatchHandler`, whose `first` takes every event of its type from
one pull in one call; an event it answers with `Continue` goes on to the
entry's `then`, on a handler thread where the delivery has one (`Later`).

While a dependency is down every message held here waits, leased, until the
dependency answers; then it is handled again from the start. Its delivery
attempts are not spent on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import structlog
from google.cloud.pubsub_v1.subscriber.message import Message

from shared.bus.attributes import REPLAYED_FOR
from shared.bus.contract import (
    BatchHandler,
    BatchResult,
    Continue,
    Delivery,
    Handler,
    HandlerTable,
    Outcome,
)
from shared.bus.dependencies import Dependencies
from shared.bus.settling import HELD, Pending, Settler
from shared.bus.unary_pull import PulledMessage
from shared.config import Settings
from shared.errors import PermanentError
from shared.events import Event, Limits, decode
from shared.llm.accounting import for_app
from shared.metrics import DELIVERY_LAG_SECONDS, HANDLER_SECONDS, MESSAGES, MESSAGES_HELD
from shared.tracing import current, end_span, start_consumer_span

log = structlog.get_logger("agent_memory.worker")

AnyMessage = Message | PulledMessage
# Runs the rest of a message's work (second argument) on a handler thread, or the
# third argument when the worker stops first. None: on this thread, now.
Later = Callable[[AnyMessage, Callable[[], None], Callable[[], None]], None] | None
Work = Callable[[], list[Outcome]]


@dataclass
class _Item:
    """One message on its way through the runtime."""

    message: AnyMessage
    attributes: dict[str, str]
    attempt: int
    started: float
    event: Event | None = None
    span: Any = None  # its tracing span (None when tracing is off)

    def delivery(self, subscription: str) -> Delivery:
        m = self.message
        return Delivery(
            subscription,
            m.message_id,
            self.attempt,
            m.publish_time,
            m.ordering_key,
            self.attributes,
        )


class Dispatcher:
    """Handles and settles the messages of one subscription."""

    def __init__(
        self,
        settings: Settings,
        subscription: str,
        handlers: HandlerTable,
        settler: Settler,
        dependencies: Dependencies,
        stopping: threading.Event,
    ) -> None:
        self.settings = settings
        self.subscription = subscription
        self.handlers = handlers
        self.settler = settler
        self.dependencies = dependencies
        self.limits = Limits(settings.max_message_bytes, settings.max_tool_events_bytes)
        self._stopping = stopping
        self._duration = HANDLER_SECONDS.labels(subscription)
        self._held = MESSAGES_HELD.labels(subscription)
        self._lag = DELIVERY_LAG_SECONDS.labels(subscription)

    def handle(self, messages: Sequence[AnyMessage], later: Later) -> None:
        """Handle `messages`; those held for a dependency wait here, leased, until
        it answers, and are handled again from the start."""
        now = datetime.now(UTC)
        for message in messages:
            if message.publish_time is not None:
                self._lag.observe(max(0.0, (now - message.publish_time).total_seconds()))
        pending = list(messages)
        while pending:
            if not self._await_dependencies(pending):
                return
            pending = self._dispatch(pending, later)

    def _await_dependencies(self, held: list[AnyMessage]) -> bool:
        """Wait until every dependency answers: True; or the worker stops first:
        False, and `held` is handed back (nacked) for redelivery."""
        if self.dependencies.ready:
            return True
        self._held.inc(len(held))
        try:
            while not self.dependencies.wait_until_ready(self._stopping, timeout=60.0):
                if self._stopping.is_set():
                    break
                for message in held:  # however long the outage, they stay ours
                    if isinstance(message, PulledMessage):
                        message.keep_leased()
            else:
                return True
        finally:
            self._held.dec(len(held))
        down = ", ".join(sorted(self.dependencies.down())) or "a dependency"
        reason = f"the worker stopped while {down} was down; nacked for redelivery"
        for message in held:
            message.nack()
            MESSAGES.labels(self.subscription, "retried").inc()
            log.warning(
                "message handled",
                outcome="retried",
                error=reason,
                subscription=self.subscription,
                message_id=message.message_id,
                event_id=message.attributes.get("event_id"),
            )
        return False

    def _dispatch(self, messages: Sequence[AnyMessage], later: Later) -> list[AnyMessage]:
        """Decode and handle `messages`; the ones held for a dependency are returned
        (work run elsewhere waits for its dependency there)."""
        started = time.perf_counter()
        held: list[AnyMessage] = []
        batches: dict[BatchHandler, list[_Item]] = {}
        for message in messages:
            item = _Item(message, dict(message.attributes), message.delivery_attempt or 1, started)
            item.span = start_consumer_span(self.subscription, item.attributes)
            entry = self._route(item)
            if isinstance(entry, BatchHandler):
                batches.setdefault(entry, []).append(item)
                continue
            if isinstance(entry, (Outcome, Exception)):
                settled = self._settle(item, entry)
            else:
                work = partial(self._call_all, entry, item)
                settled = self._start(item, work, later, timed_from_here=True)
            if not settled:
                held.append(message)
        for handler, items in batches.items():
            held.extend(self._run_batch(handler, items, later))
        return held

    def _route(self, item: _Item) -> Sequence[Handler] | BatchHandler | Outcome | Exception:
        """The table entry that handles `item`, or what it ends with unhandled."""
        meant_for = item.attributes.get(REPLAYED_FOR)
        if meant_for and meant_for != self.subscription:
            return Outcome.SKIPPED
        if item.attempt > self.settings.max_delivery_attempts:
            # Not run again: whatever happened on its last attempt may happen again.
            return PermanentError(
                f"delivered {item.attempt} times; attempt {item.attempt - 1} ended "
                "without an outcome (a worker crashed or was stopped while handling it)"
            )
        try:
            item.event = decode(item.message.data, item.attributes, self.limits)
            entry = self.handlers.get(type(item.event))
            if not entry:
                raise PermanentError(
                    f"no handler for {item.event.EVENT_TYPE} on {self.subscription}"
                )
        except Exception as exc:
            return exc
        return entry

    def _run_batch(
        self, handler: BatchHandler, items: list[_Item], later: Later
    ) -> list[AnyMessage]:
        events = [(i.event, i.delivery(self.subscription)) for i in items]
        try:
            results = list(handler.first(events))  # type: ignore[arg-type]
            if len(results) != len(items):
                raise RuntimeError(f"{len(results)} results for {len(items)} events")
        except Exception as exc:
            results = [exc] * len(items)
        held = []
        for item, (event, delivery), result in zip(items, events, results, strict=True):
            if isinstance(result, Continue) and handler.then is not None:
                work = partial(_then, handler.then, event, delivery, result.value)
                settled = self._start(item, work, later)  # type: ignore[arg-type]
            else:
                settled = self._settle(item, _checked(result))
            if not settled:
                held.append(item.message)
        return held

    def _call_all(self, handlers: Sequence[Handler], item: _Item) -> list[Outcome]:
        assert item.event is not None
        delivery = item.delivery(self.subscription)
        outcomes = [handler(item.event, delivery) for handler in handlers]
        for outcome in outcomes:
            if not isinstance(outcome, Outcome):
                raise TypeError(f"a handler returned {type(outcome).__name__}, not an Outcome")
        return outcomes

    def _start(
        self, item: _Item, work: Work, later: Later, *, timed_from_here: bool = False
    ) -> bool:
        """Run `work` now, or hand it to `later`; False: held for a dependency."""
        if later is None:
            return self._run(item, work, timed_from_here=timed_from_here)
        later(
            item.message,
            partial(self._run_elsewhere, item, work, timed_from_here=timed_from_here),
            partial(self._abandoned, item),
        )
        return True

    def _run(self, item: _Item, work: Work, *, timed_from_here: bool = False) -> bool:
        """Run the rest of `item` on this thread, its log context bound for the
        handlers' own log lines and its app for the model calls they make (their
        metrics and limit). False: held for a dependency."""
        if timed_from_here:
            item.started = time.perf_counter()
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(**self._context(item))
        try:
            with current(item.span), for_app(item.attributes.get("app") or ""):
                outcomes = work()
        except Exception as exc:
            return self._conclude(item, error=exc)
        else:
            return self._conclude(item, outcomes=outcomes)
        finally:
            structlog.contextvars.clear_contextvars()

    def _run_elsewhere(self, item: _Item, work: Work, *, timed_from_here: bool = False) -> None:
        """`_run` on a handler thread; held, the message is handled again from the
        start once its dependency answers."""
        if not self._run(item, work, timed_from_here=timed_from_here):
            self.handle([item.message], None)

    def _abandoned(self, item: _Item) -> None:
        """The worker stopped before `item`'s work began; its message was nacked."""
        reason = "the worker stopped before handling it; nacked for redelivery"
        MESSAGES.labels(self.subscription, "retried").inc()
        end_span(item.span, "retried", reason)
        log.warning("message handled", outcome="retried", error=reason, **self._context(item))

    def _context(self, item: _Item) -> dict[str, object]:
        found = {
            "event_id": item.attributes.get("event_id"),
            "event_type": item.attributes.get("event_type"),
            "app": item.attributes.get("app"),
            "subscription": self.subscription,
            "delivery_attempt": item.attempt,
            "message_id": item.message.message_id,
        }
        key = getattr(item.event, "ordering_key", "")
        if key:
            found["session"] = key
        return found

    def _settle(self, item: _Item, result: Outcome | Exception) -> bool:
        if isinstance(result, Exception):
            return self._conclude(item, error=result)
        return self._conclude(item, outcomes=[result])

    def _conclude(
        self,
        item: _Item,
        outcomes: list[Outcome] | None = None,
        error: Exception | None = None,
    ) -> bool:
        """Ack, nack or dead-letter the message, then write its one log line; or
        hold it for a dependency (False), to be handled again."""
        pending = Pending(item.message, item.attributes, item.attempt, item.event)
        outcome, reason = self.settler.settle(pending, outcomes or [], error)
        if outcome == HELD:
            end_span(item.span, HELD, reason)
            log.debug(
                "message held", dependency=pending.dependency, error=reason, **self._context(item)
            )
            return False
        seconds = time.perf_counter() - item.started
        MESSAGES.labels(self.subscription, outcome).inc()
        self._duration.observe(seconds)
        end_span(item.span, outcome, reason if outcome in ("retried", "dead_lettered") else "")
        fields: dict[str, object] = {"outcome": outcome, "duration_ms": round(seconds * 1000, 3)}
        if reason:
            fields["error"] = reason
        fields.update(self._context(item))
        if outcome in ("acked", "duplicate", "dropped", "skipped"):
            log.info("message handled", **fields)
        else:
            log.warning("message handled", **fields)
        return True


def _checked(result: BatchResult) -> Outcome | Exception:
    """A batch handler's result that settles its event here."""
    if isinstance(result, (Outcome, Exception)):
        return result
    if isinstance(result, Continue):
        return TypeError("a batch handler without `then` returned Continue")
    return TypeError(f"a batch handler returned {type(result).__name__}")


def _then(
    then: Callable[[Event, Delivery, Any], Outcome], event: Event, delivery: Delivery, value: Any
) -> list[Outcome]:
    outcome = then(event, delivery, value)
    if not isinstance(outcome, Outcome):
        raise TypeError(f"a batch handler's `then` returned {type(outcome).__name__}")
    return [outcome]
