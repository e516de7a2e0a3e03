"""Unary (synchronous) pull with our own leases and batched acks.

Why this exists: on the Pub/Sub emulator (v0.8.20, measured here), a streaming-pull
stream that closes — a worker stopped by SIGTERM as much as one killed — is never
released: the emulator's gRPC layer throws while closing it, keeps routing
messages to the dead stream, and on an ordered subscription whole ordering keys
stay blocked (more than four minutes observed; a fresh subscriber receives
nothing for them). Unary pulls hold no stream; a message pulled by a worker that
dies comes back when its lease ends, as Pub/Sub promises. The runtime therefore
uses this pull against the emulator and streaming pull against Pub/Sub.

Flow control is explicit: at most `max_outstanding` messages are leased (a pull
asks only for the free room). A lease thread extends the deadline of every
message not yet settled until its lease clock has run MAX_LEASE_SECONDS; acks
and nacks are sent in batches. What is pulled reaches the sink through a
`Handoff`, in ordering-key order with `in_key_order`, from a thread of its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import structlog
from google.api_core import exceptions as gexc

from shared.bus.handoff import Handoff
from shared.bus.message import PullOptions, Sink

log = structlog.get_logger("agent_memory.worker")

# A pull whose answer reaches the worker after its deadline has leased its
# messages to nobody: they come back only when the subscription's ack deadline
# ends, as delivery attempt 2, and no error says so (seen with a puller stopped
# for longer than its deadline, and under a saturated CPU). The emulator answers
# an empty long poll 1 s before the deadline it is given, whatever the deadline,
# which leaves a long poll 1 s to spare. So every pull asks to be answered at once
# (`return_immediately`: full or empty, in milliseconds) with a deadline of
# PULL_TIMEOUT_SECONDS, 10 s to spare; an idle worker pauses between empty pulls,
# from IDLE_PAUSE_SECONDS up to MAX_IDLE_PAUSE_SECONDS.
PULL_TIMEOUT_SECONDS = 10.0
IDLE_PAUSE_SECONDS = 0.01
MAX_IDLE_PAUSE_SECONDS = 0.1
PULL_ERROR_PAUSE_SECONDS = 1.0
ACK_FLUSH_SECONDS = 0.05  # acks wait at most this long, to go in batches
MAX_IDS_PER_REQUEST = 1000
# A handler stuck longer loses its lease: the message is redelivered. A message's
# clock starts when it is pulled and again when it is held on purpose
# (`extend()`); the messages waiting behind its ordering key restart theirs with
# it, and whenever their key moves on.
MAX_LEASE_SECONDS = 3600


def ack_id_chunks(ack_ids: list[str]) -> Iterator[list[str]]:
    """`ack_ids` in slices that one acknowledge or modifyAckDeadline request accepts."""
    for start in range(0, len(ack_ids), MAX_IDS_PER_REQUEST):
        yield ack_ids[start : start + MAX_IDS_PER_REQUEST]


class PulledMessage:
    """One received message. Built from the raw protobuf: proto-plus wrappers cost
    more CPU per message than the summary handler itself."""

    def __init__(self, received: Any, pull: UnaryPull) -> None:
        message = received.message
        self.ack_id: str = received.ack_id
        self.delivery_attempt: int = received.delivery_attempt or 1
        self.data: bytes = message.data
        self.attributes: dict[str, str] = dict(message.attributes)
        self.ordering_key: str = message.ordering_key
        self.message_id: str = message.message_id
        self.publish_time: datetime | None = message.publish_time.ToDatetime(tzinfo=UTC)
        self._pull = pull
        self._decided = False

    def ack(self) -> None:
        if self.take_decision():
            self._pull.settle(self, ack=True)

    def nack(self, delay: float = 0.0) -> None:
        if self.take_decision():
            self._pull.nack(self, delay)

    def take_decision(self) -> bool:
        """True for the first ack or nack only: a second must not release its key again."""
        first, self._decided = not self._decided, True
        return first

    def extend(self) -> None:
        self._pull.keep_leased(self)


class UnaryPull:
    """Pulls messages of one subscription and hands them to `sink`."""

    def __init__(
        self,
        options: PullOptions,
        sink: Sink,
        *,
        in_key_order: bool,
        may_pull: Callable[[], bool] | None = None,
        on_error: Callable[[Exception], None] | None = None,
        on_arrival: Sink | None = None,
    ) -> None:
        self.options = options
        self.delayed = options.delayed_nacks()
        # False while a dependency is down: nothing new is pulled meanwhile.
        self.may_pull = may_pull or (lambda: True)
        self.on_error = on_error or (lambda _exc: None)
        # Told of every message as it is pulled, before it waits behind its key.
        self.on_arrival = on_arrival or (lambda _messages: None)
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        # ack id -> when its lease clock started (pulled, handed on, or held on
        # purpose), for every message not settled
        self._leased: dict[str, float] = {}
        # Lease extensions and nacks go out in the order they were decided, so an
        # extension can never overtake (and undo) a nack. (Acks need no order: an
        # extension of an acknowledged message is ignored.)
        self._nack_lock = threading.Lock()
        self._to_ack: list[str] = []
        self._to_nack: list[str] = []
        self._to_extend: list[str] = []  # first leases of fresh pulls
        self._threads: list[threading.Thread] = []
        self._handoff: Handoff[PulledMessage] = Handoff(
            sink, in_key_order=in_key_order, name=f"handoff-{options.path}"
        )

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        self._handoff.start()
        for target, name in (
            (self._pull_loop, "pull"),
            (self._lease_loop, "lease"),
            (self._settle_loop, "settle"),
        ):
            thread = threading.Thread(
                target=target, name=f"{name}-{self.options.path}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def request_stop(self) -> None:
        """Stop pulling and handing on (returns at once). What waits for its backoff
        is nacked now; what waits behind its ordering key, never handed on, is
        given back unopened. Whatever the dispatcher is doing meanwhile."""
        self._stopping.set()
        if self.delayed is not None:
            self.delayed.flush()
        left = self._handoff.stop()
        if left:
            self._give_back(left)
            log.info(
                "worker stopped with messages waiting behind their ordering key; given back",
                subscription=self.options.path,
                messages=len(left),
            )

    def stop(self, timeout: float) -> bool:
        """Stop pulling; wait up to `timeout` for every leased message to be settled.

        The pull in progress is answered at once (within PULL_TIMEOUT_SECONDS at
        worst; what it brings is returned unopened). True if nothing stayed
        leased; a message still in a handler at the deadline is not acknowledged,
        and Pub/Sub redelivers it when its lease ends."""
        deadline = time.monotonic() + timeout
        self.request_stop()
        puller = self._threads[0] if self._threads else None
        with self._cond:
            while time.monotonic() < deadline and (
                self._leased or (puller is not None and puller.is_alive())
            ):
                self._cond.wait(timeout=max(0.0, min(0.05, deadline - time.monotonic())))
            drained = not self._leased
        if self.delayed is not None:
            self.delayed.close()
        self._handoff.join(max(0.0, deadline - time.monotonic()))
        self._done.set()
        self._flush()
        return drained

    @property
    def running(self) -> bool:
        return not self._done.is_set() and self.error is None

    @property
    def error(self) -> BaseException | None:
        return self._error or self._handoff.error

    def in_flight(self) -> int:
        with self._cond:
            return len(self._leased)

    # -- settling --------------------------------------------------------------------
    def settle(self, message: PulledMessage, ack: bool, *, release: bool = True) -> None:
        with self._cond:
            self._leased.pop(message.ack_id, None)
            (self._to_ack if ack else self._to_nack).append(message.ack_id)
            self._cond.notify_all()
        if release:
            self._release_key(message)

    def nack(self, message: PulledMessage, delay: float) -> None:
        if self.delayed is None or delay <= 0:
            self.settle(message, ack=False)
            return
        # It stays leased until its nack; its key moves on now, as it did when
        # Pub/Sub itself held the nacked message back for the backoff.
        self.delayed.add(lambda: self.settle(message, ack=False, release=False), delay)
        self._release_key(message)

    def keep_leased(self, message: PulledMessage) -> None:
        """`message` is held on purpose: its lease, and those of the messages
        waiting behind it, are kept for another MAX_LEASE_SECONDS."""
        self._restart_lease_clock([message, *self._handoff.behind(message)])

    def _release_key(self, message: PulledMessage) -> None:
        """Its key's next message is handed on (by the hand-off's thread, not this
        one); the key moves, so the lease clocks of its messages start again."""
        self._restart_lease_clock(self._handoff.release(message))

    def _restart_lease_clock(self, messages: list[PulledMessage]) -> None:
        if not messages:
            return
        now = time.monotonic()
        with self._cond:
            for message in messages:
                if message.ack_id in self._leased:
                    self._leased[message.ack_id] = now

    def _give_back(self, messages: list[PulledMessage]) -> None:
        """Nack messages that never reached the sink (nothing releases their key)."""
        with self._cond:
            for message in messages:
                if message.take_decision():
                    self._leased.pop(message.ack_id, None)
                    self._to_nack.append(message.ack_id)
            self._cond.notify_all()

    def _flush(self) -> None:
        with self._cond:
            acks, self._to_ack = self._to_ack, []
        for chunk in ack_id_chunks(acks):
            self._call(
                self.options.subscriber.acknowledge,
                {"subscription": self.options.path, "ack_ids": chunk},
            )
        with self._nack_lock:
            with self._cond:
                nacks, self._to_nack = self._to_nack, []
                # Only what is still leased: a first lease must not revive a nack.
                fresh = [a for a in self._to_extend if a in self._leased]
                self._to_extend = []
            self._modack(fresh, self.options.lease_seconds)
            self._modack(nacks, 0)

    def _modack(self, ack_ids: list[str], seconds: int) -> None:
        for chunk in ack_id_chunks(ack_ids):
            self._call(
                self.options.subscriber.modify_ack_deadline,
                {
                    "subscription": self.options.path,
                    "ack_ids": chunk,
                    "ack_deadline_seconds": seconds,
                },
            )

    def _call(self, rpc: Callable, request: dict) -> None:
        try:
            rpc(request=request, timeout=10)
        except gexc.GoogleAPICallError as exc:
            # A lost ack only means a redelivery, which the ledger makes harmless.
            log.warning("ack or lease request failed", error=repr(exc), ids=len(request["ack_ids"]))

    def _take_in(self, received: list[Any]) -> None:
        """Lease what a pull brought and offer it to the hand-off."""
        if not received:
            return
        now = time.monotonic()
        with self._cond:
            self._leased.update((r.ack_id, now) for r in received)
            # Shorten the first lease from the subscription's ack deadline to
            # ours (sent with the next settle flush, before any nack), so a
            # worker killed now has its messages back within seconds.
            self._to_extend.extend(r.ack_id for r in received)
        pulled = [PulledMessage(r, self) for r in received]
        self.on_arrival(pulled)
        refused = self._handoff.offer(pulled)
        if refused:  # pulled as the worker stopped: given back unopened
            self._give_back(refused)

    # -- threads ---------------------------------------------------------------------
    def _settle_loop(self) -> None:
        while not self._done.is_set():
            self._done.wait(ACK_FLUSH_SECONDS)
            self._flush()

    def _lease_loop(self) -> None:
        # Extend every lease well before it ends, up to MAX_LEASE_SECONDS.
        interval = max(1.0, self.options.lease_seconds / 3)
        while not self._done.wait(interval):
            with self._nack_lock:
                self._modack(self._to_renew(), self.options.lease_seconds)

    def _to_renew(self) -> list[str]:
        """The ack ids whose lease is kept: those whose clock has not run out."""
        oldest = time.monotonic() - MAX_LEASE_SECONDS
        with self._cond:
            return [a for a, since in self._leased.items() if since > oldest]

    def _pull_loop(self) -> None:
        pause = 0.0  # before the next pull: grows while pulls come back empty
        try:
            while not self._stopping.is_set():
                with self._cond:
                    while not self._stopping.is_set() and (
                        len(self._leased) >= self.options.max_outstanding or not self.may_pull()
                    ):
                        self._cond.wait(timeout=0.2)
                    want = self.options.max_outstanding - len(self._leased)
                if self._stopping.is_set():
                    return
                request = {
                    "subscription": self.options.path,
                    "max_messages": want,
                    "return_immediately": True,
                }
                try:
                    response = self.options.subscriber.pull(
                        request=request, timeout=PULL_TIMEOUT_SECONDS
                    )
                    received = list(type(response).pb(response).received_messages)
                except gexc.DeadlineExceeded:  # the emulator did not answer in time
                    received = []
                except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
                    # Pub/Sub down, or the subscription gone (an emulator restarted
                    # before its topology is applied again): wait, then pull again.
                    self.on_error(exc)
                    self._stopping.wait(PULL_ERROR_PAUSE_SECONDS)
                    received = []
                pause = (
                    0.0
                    if received
                    else min(max(2 * pause, IDLE_PAUSE_SECONDS), MAX_IDLE_PAUSE_SECONDS)
                )
                if received and self._stopping.is_set():
                    # Pulled as we were stopping: returned unopened, never received.
                    self._modack([r.ack_id for r in received], 0)
                    received = []
                self._take_in(received)
                if pause:
                    self._stopping.wait(pause)
        except BaseException as exc:
            self._error = exc
            log.error("pull loop failed", subscription=self.options.path, error=repr(exc))
            self._done.set()
