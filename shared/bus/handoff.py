"""The hand-off from unary pull to the dispatcher: what a pull brings goes to the
sink from one thread of its own, and a message of an ordering key only once the
one of its key before it is settled (with `in_key_order`), as the streaming-pull
client holds them back: turns of one session would otherwise take handler slots
only to wait on each other (the extraction worker's per-user lock).

Settling a message on a handler thread only releases its key (`release`): the
key's next message moves to the ready list, and this thread hands it on. So
the dispatcher is never entered from a handler thread, however many messages
wait behind a key, and stopping needs no order: `stop` returns what was never
handed on, for the pull to give back unopened, and a release after it hands on
nothing.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

import structlog

from shared.bus.message import Message

log = structlog.get_logger("agent_memory.worker")

M = TypeVar("M", bound=Message)


class Handoff(Generic[M]):
    """Hands messages to `sink` from its own thread, in key order when asked to."""

    def __init__(
        self, sink: Callable[[Sequence[M]], None], *, in_key_order: bool, name: str
    ) -> None:
        self.sink = sink
        self.in_key_order = in_key_order
        self.name = name
        self.error: BaseException | None = None
        self._ready: list[M] = []
        # An ordering key is here while one of its messages is at the sink: with
        # the messages that wait behind that one, in the order they were pulled.
        self._behind: dict[str, deque[M]] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def offer(self, messages: Iterable[M]) -> list[M]:
        """Take pulled messages in: each whose key is free is handed on (and takes
        its key), the others wait behind their key. Returns the messages refused
        because the hand-off has stopped."""
        with self._cond:
            if self._stopped:
                return list(messages)
            for message in messages:
                key = self._key(message)
                waiting = self._behind.get(key) if key else None
                if waiting is not None:
                    waiting.append(message)
                    continue
                if key:
                    self._behind[key] = deque()
                self._ready.append(message)
            self._cond.notify()
        return []

    def release(self, message: M) -> list[M]:
        """`message` is settled: the next message of its key is handed on. Returns
        the messages of that key still here, the one handed on first."""
        key = self._key(message)
        if not key:
            return []
        with self._cond:
            waiting = self._behind.get(key)
            if waiting is None:  # stopped: what waited was returned
                return []
            if not waiting:
                del self._behind[key]
                return []
            following = waiting.popleft()
            self._ready.append(following)
            self._cond.notify()
            return [following, *waiting]

    def behind(self, message: M) -> list[M]:
        """The messages waiting behind `message`'s key."""
        key = self._key(message)
        with self._cond:
            return list(self._behind.get(key, ())) if key else []

    def stop(self) -> list[M]:
        """Hand nothing more on. Returns what was never handed on, in pulled order
        within each key; a sink call under way still ends."""
        with self._cond:
            self._stopped = True
            left = self._ready + [m for waiting in self._behind.values() for m in waiting]
            self._ready, self._behind = [], {}
            self._cond.notify_all()
        return left

    def join(self, timeout: float) -> None:
        """Wait for the sink call under way, if any (not from the sink itself)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _key(self, message: M) -> str:
        return message.ordering_key if self.in_key_order else ""

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._ready and not self._stopped:
                        self._cond.wait()
                    if self._stopped:
                        return
                    ready, self._ready = self._ready, []
                self.sink(ready)
        except BaseException as exc:
            # The pull reports it (`UnaryPull.error`) and the worker exits: what
            # this thread held comes back to Pub/Sub when its lease ends.
            self.error = exc
            log.error("hand-off failed", thread=self.name, error=repr(exc))
