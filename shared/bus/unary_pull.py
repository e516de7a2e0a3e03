"""Delivery by unary (synchronous) Pull with our own leases and batched acks.

Why this exists: on the Pub/Sub emulator (v0.8.20, measured here), a streaming-pull
stream that closes — a worker stopped by SIGTERM as much as one killed — is never
released: the emulator's gRPC layer throws while closing it, keeps routing
messages to the dead stream, and on an ordered subscription whole ordering keys
stay blocked (more than four minutes observed; a fresh subscriber receives
nothing for them). Unary pulls hold no stream; a message pulled by a worker that
dies comes back when its lease ends, as Pub/Sub promises. The runtime therefore
uses this delivery against the emulator and streaming pull against Pub/Sub.

Flow control is explicit: at most `concurrency` handlers run at once and at most
PREFETCH_FACTOR times as many messages are leased (a pull asks only for the free
room); on stop, leased messages that have not started are nacked (any still queued
behind busy handlers at the stop deadline are left to their lease). A lease thread extends
the deadline of every message in flight; acks and nacks are sent in batches.
Messages of one ordering key run one after another, as the streaming-pull client
holds them back: turns of one session would otherwise take handler slots only to
wait on each other (the extraction worker's per-user lock).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import structlog
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1

log = structlog.get_logger("agent_memory.worker")

PULL_TIMEOUT_SECONDS = 2.5  # the emulator answers an empty pull about 1 s before this
PULL_ERROR_PAUSE_SECONDS = 1.0
ACK_FLUSH_SECONDS = 0.05  # acks wait at most this long, to go in batches
MAX_IDS_PER_REQUEST = 1000


def ack_id_chunks(ack_ids: list[str]) -> Iterator[list[str]]:
    """`ack_ids` in slices that one acknowledge or modifyAckDeadline request accepts."""
    for start in range(0, len(ack_ids), MAX_IDS_PER_REQUEST):
        yield ack_ids[start : start + MAX_IDS_PER_REQUEST]


PREFETCH_FACTOR = 4  # messages leased ahead of the handlers, so pulls come in batches
MAX_LEASE_SECONDS = 3600  # a handler stuck longer loses its lease: the message is redelivered


class PulledMessage:
    """One received message, with the same surface the handlers' runtime uses for
    streaming-pull messages (data, attributes, ordering_key, ack, nack, ...).

    Built from the raw protobuf: proto-plus wrappers cost more CPU per message
    than the summary handler itself."""

    def __init__(self, received: Any, delivery: UnaryPullDelivery) -> None:
        message = received.message
        self.ack_id: str = received.ack_id
        self.delivery_attempt: int = received.delivery_attempt or 1
        self.data: bytes = message.data
        self.attributes: dict[str, str] = dict(message.attributes)
        self.ordering_key: str = message.ordering_key
        self.message_id: str = message.message_id
        self.publish_time: datetime | None = message.publish_time.ToDatetime(tzinfo=UTC)
        self.settled = False
        self.handed_on = False  # given to `run_later`, which settles it
        self._delivery = delivery

    def ack(self) -> None:
        self.settled = True
        self._delivery.settle(self.ack_id, ack=True)

    def nack(self) -> None:
        self.settled = True
        self._delivery.settle(self.ack_id, ack=False)

    def defer(self) -> None:
        """Someone else settles it later (a nack after its retry backoff)."""
        self.handed_on = True

    def keep_leased(self) -> None:
        """Held for a dependency, not stuck: keep extending its lease past
        MAX_LEASE_SECONDS."""
        self._delivery.keep_leased(self.ack_id)


class UnaryPullDelivery:
    """Pulls messages for one subscription and hands each pull's messages to
    `callback` on a pool thread; the callback settles each message or hands it to
    `run_later` (another pool thread). Unless `whole_pulls`, each message is its
    own call, on its own thread."""

    def __init__(
        self,
        subscriber: pubsub_v1.SubscriberClient,
        subscription_path: str,
        callback: Callable[[list[PulledMessage]], None],
        concurrency: int,
        lease_seconds: int,
        thread_name: str,
        whole_pulls: bool = True,
        may_pull: Callable[[], bool] | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.subscriber = subscriber
        # False while a dependency is down: nothing new is pulled meanwhile.
        self.may_pull = may_pull or (lambda: True)
        self.on_error = on_error or (lambda _exc: None)
        self.whole_pulls = whole_pulls
        self.path = subscription_path
        self.callback = callback
        self.concurrency = concurrency
        self.max_outstanding = concurrency * PREFETCH_FACTOR
        self.lease_seconds = lease_seconds
        self.executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=thread_name)
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        # ack id -> when it was pulled, for every message not yet settled
        self._leased: dict[str, float] = {}
        # Lease extensions and nacks go out in the order they were decided, so an
        # extension can never overtake (and undo) a nack. (Acks need no order: an
        # extension of an acknowledged message is ignored.)
        self._nack_lock = threading.Lock()
        self._to_ack: list[str] = []
        self._to_nack: list[str] = []
        self._to_extend: list[str] = []  # first leases of fresh pulls
        self._threads: list[threading.Thread] = []
        # Ordering key -> messages of that key pulled while one of it is in a handler,
        # in delivery order (as the streaming-pull client holds them): turns of one
        # session must not take handler slots only to wait on each other's user lock.
        self._on_hold: dict[str, deque[list[PulledMessage]]] = {}

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        for target, name in (
            (self._pull_loop, "pull"),
            (self._lease_loop, "lease"),
            (self._settle_loop, "settle"),
        ):
            thread = threading.Thread(target=target, name=f"{name}-{self.path}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def request_stop(self) -> None:
        """Stop pulling (returns at once)."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()

    def stop(self, timeout: float) -> bool:
        """Stop pulling; wait up to `timeout` for handlers; settle what they decided.

        The pull in progress ends by itself within PULL_TIMEOUT_SECONDS (what it
        brings is handed back at once), meanwhile handlers finish. True if every
        handler finished; one still running at the deadline keeps its message
        unacknowledged, and Pub/Sub redelivers it when its lease ends."""
        deadline = time.monotonic() + timeout
        self.request_stop()
        puller = self._threads[0] if self._threads else None
        with self._cond:
            while time.monotonic() < deadline and (
                self._leased or (puller is not None and puller.is_alive())
            ):
                self._cond.wait(timeout=max(0.0, min(0.05, deadline - time.monotonic())))
            drained = not self._leased
        self.executor.shutdown(wait=False, cancel_futures=True)
        self._done.set()
        self._flush()
        return drained

    @property
    def running(self) -> bool:
        return not self._done.is_set() and self._error is None

    @property
    def error(self) -> BaseException | None:
        return self._error

    def in_flight(self) -> int:
        with self._cond:
            return len(self._leased)

    def keep_leased(self, ack_id: str) -> None:
        with self._cond:
            if ack_id in self._leased:
                self._leased[ack_id] = time.monotonic()

    # -- settling --------------------------------------------------------------------
    def settle(self, ack_id: str, ack: bool) -> None:
        with self._cond:
            self._leased.pop(ack_id, None)
            (self._to_ack if ack else self._to_nack).append(ack_id)
            self._cond.notify_all()

    def _flush(self) -> None:
        with self._cond:
            acks, self._to_ack = self._to_ack, []
        for chunk in ack_id_chunks(acks):
            self._call(self.subscriber.acknowledge, {"subscription": self.path, "ack_ids": chunk})
        with self._nack_lock:
            with self._cond:
                nacks, self._to_nack = self._to_nack, []
                # Only what is still leased: a first lease must not revive a nack.
                fresh = [a for a in self._to_extend if a in self._leased]
                self._to_extend = []
            self._modack(fresh, self.lease_seconds)
            self._modack(nacks, 0)

    def _modack(self, ack_ids: list[str], seconds: int) -> None:
        for chunk in ack_id_chunks(ack_ids):
            self._call(
                self.subscriber.modify_ack_deadline,
                {"subscription": self.path, "ack_ids": chunk, "ack_deadline_seconds": seconds},
            )

    def _call(self, rpc: Callable, request: dict) -> None:
        try:
            rpc(request=request, timeout=10)
        except gexc.GoogleAPICallError as exc:
            # A lost ack only means a redelivery, which the ledger makes harmless.
            log.warning("ack or lease request failed", error=repr(exc), ids=len(request["ack_ids"]))

    def _run(self, messages: list[PulledMessage]) -> None:
        try:
            if self._stopping.is_set():
                for message in messages:
                    message.nack()  # leased ahead but not started: hand it back
                return
            self.callback(messages)
        except Exception as exc:
            log.error("pull callback failed", subscription=self.path, error=repr(exc))
        finally:
            for message in messages:
                if not (message.settled or message.handed_on):  # escaped without deciding
                    message.nack()

    def _key(self, part: list[PulledMessage]) -> str:
        return "" if self.whole_pulls else part[0].ordering_key

    def _hold(self, part: list[PulledMessage]) -> bool:
        """Queue `part` behind the message of its ordering key in a handler now (it
        stays leased meanwhile); False if none is, and its key is now taken."""
        key = self._key(part)
        if not key:
            return False
        with self._cond:
            if key in self._on_hold:
                self._on_hold[key].append(part)
                return True
            self._on_hold[key] = deque()
            return False

    def _run_in_order(self, part: list[PulledMessage]) -> None:
        """`_run`, then each message of its ordering key held meanwhile, in order."""
        key = self._key(part)
        while True:
            self._run(part)
            if not key:
                return
            with self._cond:
                held = self._on_hold[key]
                if not held:
                    del self._on_hold[key]
                    return
                part = held.popleft()

    def run_later(
        self, message: PulledMessage, work: Callable[[], None], abandoned: Callable[[], None]
    ) -> None:
        """Run `work`, which settles `message`, on a pool thread. If the worker stops
        before it starts, the message is nacked and `abandoned` is called instead."""
        message.handed_on = True
        try:
            self.executor.submit(self._run_one, message, work, abandoned)
        except RuntimeError:  # the pool shut down at the stop deadline
            message.nack()
            abandoned()

    def _run_one(
        self, message: PulledMessage, work: Callable[[], None], abandoned: Callable[[], None]
    ) -> None:
        try:
            if self._stopping.is_set():
                message.nack()  # not started: hand it back
                abandoned()
                return
            work()
        finally:
            if not message.settled:
                message.nack()

    # -- threads ---------------------------------------------------------------------
    def _settle_loop(self) -> None:
        while not self._done.is_set():
            self._done.wait(ACK_FLUSH_SECONDS)
            self._flush()

    def _lease_loop(self) -> None:
        # Extend every lease well before it ends, up to MAX_LEASE_SECONDS.
        interval = max(1.0, self.lease_seconds / 3)
        while not self._done.wait(interval):
            oldest = time.monotonic() - MAX_LEASE_SECONDS
            with self._nack_lock:
                with self._cond:
                    leased = [a for a, pulled in self._leased.items() if pulled > oldest]
                self._modack(leased, self.lease_seconds)

    def _pull_loop(self) -> None:
        try:
            while not self._stopping.is_set():
                with self._cond:
                    while not self._stopping.is_set() and (
                        len(self._leased) >= self.max_outstanding or not self.may_pull()
                    ):
                        self._cond.wait(timeout=0.2)
                    want = self.max_outstanding - len(self._leased)
                if self._stopping.is_set():
                    return
                try:
                    response = self.subscriber.pull(
                        request={"subscription": self.path, "max_messages": want},
                        timeout=PULL_TIMEOUT_SECONDS,
                    )
                    received = list(type(response).pb(response).received_messages)
                except gexc.DeadlineExceeded:  # nothing to deliver within the timeout
                    received = []
                except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
                    # Pub/Sub down, or the subscription gone (an emulator restarted
                    # before its topology is applied again): wait, then pull again.
                    self.on_error(exc)
                    self._stopping.wait(PULL_ERROR_PAUSE_SECONDS)
                    received = []
                if received and self._stopping.is_set():
                    # Pulled as we were stopping: hand them straight back.
                    self._modack([r.ack_id for r in received], 0)
                    received = []
                now = time.monotonic()
                with self._cond:
                    self._leased.update((r.ack_id, now) for r in received)
                    # Shorten the first lease from the subscription's ack deadline to
                    # ours (sent with the next settle flush, before any nack), so a
                    # worker killed now has its messages back within seconds.
                    self._to_extend.extend(r.ack_id for r in received)
                pulled = [PulledMessage(r, self) for r in received]
                for part in [pulled] if self.whole_pulls and pulled else [[m] for m in pulled]:
                    if self._hold(part):
                        continue
                    try:
                        self.executor.submit(self._run_in_order, part)
                    except RuntimeError:  # the pool shut down at the stop deadline
                        for message in part:
                            message.nack()
        except BaseException as exc:
            self._error = exc
            log.error("pull loop failed", subscription=self.path, error=repr(exc))
            self._done.set()
