"""Turns, and bursts of them recorded through the API as an agent service records them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from bench.chaos_suite.budgets import SEND_BUDGET, wait_until
from bench.chaos_suite.stack import Stack
from shared.client import MemoryClient
from shared.client.errors import MemoryApiError, MemoryClientError, MemoryConnectionError
from shared.events import OutgoingMessage, TurnRecorded, derived_event_id, encode


@dataclass
class Turn:
    app: str
    user_id: str
    session_id: str
    turn_id: str
    text: str
    created_at: str | None = None
    event_id: str = ""  # from the 202
    accepted_at: float | None = None  # time.monotonic() of the 202
    # When the attempt that got the 202 started: the event may have reached Pub/Sub
    # from then on.
    published_from: float | None = None
    attempts: int = 0
    failure: str = ""  # the last error; why it is not accepted, if it is not
    refusals: list[str] = field(default_factory=list)  # each error answer, as "503 code"
    latency: float | None = None  # seconds of the attempt that got the 202

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.user_id, self.session_id, self.turn_id)

    @property
    def expected_event_id(self) -> str:
        """The id the API gives this turn's event (also when no 202 came back)."""
        return derived_event_id(self.app, self.user_id, self.session_id, self.turn_id)

    def event(self, event_id: str) -> OutgoingMessage:
        """The turn's event as the API publishes it, with `event_id`, created now."""
        return encode(
            TurnRecorded(
                event_id=event_id,
                app=self.app,
                user_id=self.user_id,
                session_id=self.session_id,
                turn_id=self.turn_id,
                created_at=datetime.now(UTC),
                user=self.text,
                assistant="Noted.",
            )
        )


def make_turns(app: str, users: list[str], sessions: int, count: int, tag: str) -> list[Turn]:
    """`count` turns spread round-robin over every session of `users`."""
    keys = [(u, f"{u}-s{s}") for u in users for s in range(sessions)]
    turns = []
    for n in range(count):
        user, session = keys[n % len(keys)]
        turns.append(
            Turn(app, user, session, f"{tag}-{n:04d}", f"Turn {n} of the chaos burst: status?")
        )
    return turns


class Burst:
    """Records `turns` through the API at `rate` per second (open loop, `threads`
    senders taking them in order); each turn is retried on 503 and connection errors
    with its turn_id until SEND_BUDGET or stop()."""

    def __init__(
        self,
        stack: Stack,
        turns: list[Turn],
        rate: float,
        threads: int = 8,
        client: Callable[[], MemoryClient] | None = None,
        seconds: float | None = None,
    ) -> None:
        """`client`: how a sender gets its client (default: the stack's API).
        `seconds`: no turn is started after that long; those left are not sent."""
        self.stack = stack
        self.client = client or stack.client
        self.seconds = seconds
        self.turns = turns
        self.rate = rate
        self.threads = threads
        self._next = 0
        self._sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self.started = 0.0

    def start(self) -> Burst:
        self.started = time.monotonic()
        self._workers = [
            threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)
        ]
        for worker in self._workers:
            worker.start()
        return self

    @property
    def sent(self) -> int:
        """Turns whose first attempt has started."""
        with self._lock:
            return self._sent

    def wait_sent(self, count: int, deadline: float) -> bool:
        return wait_until(lambda: self.sent >= count, deadline, interval=0.02)

    def stop(self) -> None:
        self._stop.set()

    def join(self, deadline: float) -> bool:
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        return not any(w.is_alive() for w in self._workers)

    def _over(self) -> bool:
        return self.seconds is not None and time.monotonic() >= self.started + self.seconds

    def _run(self) -> None:
        with self.client() as client:
            while not self._stop.is_set():
                with self._lock:
                    if self._next >= len(self.turns) or self._over():
                        return
                    n = self._next
                    self._next += 1
                if self._stop.wait(max(0.0, self.started + n / self.rate - time.monotonic())):
                    return
                with self._lock:
                    self._sent += 1
                record(client, self.turns[n], time.monotonic() + SEND_BUDGET, self._stop)


def record(client: MemoryClient, turn: Turn, give_up_at: float, stop: threading.Event) -> None:
    """One turn, as an agent service records it: the client's own retries, and on a
    503 or no answer, again with the same turn_id until `give_up_at`, never sooner
    than a 503's `Retry-After` asks."""
    delay = 0.2
    while True:
        wait = delay
        turn.attempts += 1
        turn.failure = "no answer yet"  # what a tally taken during the attempt shows
        attempt_started = time.monotonic()
        try:
            answer = client.record_turn(
                turn.session_id,
                turn.user_id,
                turn.text,
                "Noted.",
                turn_id=turn.turn_id,
                created_at=turn.created_at,
            )
        except MemoryConnectionError as exc:
            turn.failure = f"no answer: {str(exc)[-120:]}"
        except MemoryApiError as exc:
            turn.failure = f"{exc.status} {exc.code}"
            turn.refusals.append(
                turn.failure
                + ("" if exc.retry_after is None else f" retry-after {exc.retry_after:g}")
            )
            if exc.status != 503:
                return  # an answer, not an outage: not retried
            wait = max(delay, exc.retry_after or 0.0)
        except MemoryClientError as exc:
            turn.failure = f"{type(exc).__name__}: {str(exc)[:120]}"
            return
        else:
            turn.event_id, turn.failure = answer.event_id, ""
            turn.accepted_at, turn.published_from = time.monotonic(), attempt_started
            turn.latency = turn.accepted_at - attempt_started
            return
        if stop.is_set() or time.monotonic() + wait > give_up_at:
            return
        stop.wait(wait)
        delay = min(1.0, delay * 2)
