"""Unary pull, dispatcher and settler together, without Pub/Sub (`offline_pull`):
settling a message hands its key's next message on from the pull's hand-off
thread, never by entering the dispatcher again from the handler thread that
settled it; the pull and the dispatcher stop in either order, also with a settle
under way, and each message ends once: acknowledged, or given or handed back."""

from __future__ import annotations

import sys
import threading

import pytest

from shared.bus.contract import Outcome
from shared.errors import PermanentError
from shared.events import TurnRecorded
from tests.bus_helpers import make_turn
from tests.runtime_fakes import FakePublisher, dispatcher_of, offline_pull, received
from tests.support import wait_for

IDS = {"app": "app-1", "user_id": "user-1", "session_id": "sess-a"}
HANDOFF_THREAD = "handoff-projects/p/subscriptions/s"


def depth() -> int:
    frame, frames = sys._getframe(), 0
    while frame is not None:
        frame, frames = frame.f_back, frames + 1
    return frames


class Runtime:
    """An offline pull handing its messages to a dispatcher, and each call of the
    dispatcher's `receive`: its thread, its stack depth and the message ids."""

    def __init__(self, handle, concurrency: int = 1, publisher: FakePublisher | None = None):
        self.calls: list[tuple[str, int, list[str]]] = []
        self.dispatcher = dispatcher_of(
            {TurnRecorded: handle}, publisher=publisher, concurrency=concurrency
        )
        self.pull = offline_pull(self.receive)
        self.dispatcher.start()

    def receive(self, messages) -> None:
        ids = [m.message_id for m in messages]
        self.calls.append((threading.current_thread().name, depth(), ids))
        self.dispatcher.receive(messages)

    def take_in(self, sessions: list[str]) -> None:
        """Pull one turn per session given, numbered 1, 2, ... in that order."""
        turns = [
            make_turn(IDS, n, session_id=session) for n, session in enumerate(sessions, start=1)
        ]
        self.pull._take_in([received(n, turn) for n, turn in enumerate(turns, start=1)])

    def settled(self) -> tuple[list[str], list[str]]:
        """The message ids acknowledged, and those nacked."""
        return (
            sorted(a.removeprefix("ack-") for a in self.pull._to_ack),
            sorted(a.removeprefix("ack-") for a in self.pull._to_nack),
        )

    def received_ids(self) -> list[str]:
        return [i for _thread, _depth, ids in self.calls for i in ids]


def test_a_keys_next_message_is_handed_on_by_the_pull_not_by_the_settling_thread():
    order: list[str] = []

    def handle(event, delivery):
        order.append(f"{event.session_id}/{event.turn_id}")
        return Outcome.APPLIED

    runtime = Runtime(handle, concurrency=2)
    sessions = ["sess-a"] * 30 + ["sess-b"] * 10
    runtime.take_in(sessions)
    wait_for(lambda: len(runtime.pull._to_ack) == 40, 10, "every message acknowledged")
    runtime.pull.request_stop()
    assert runtime.dispatcher.stop(5)
    assert {thread for thread, _depth, _ids in runtime.calls} == {HANDOFF_THREAD}
    # Thirty releases of one key, each handed on at the same depth: no call chain grows.
    assert len({d for _thread, d, _ids in runtime.calls}) == 1
    assert sorted(runtime.received_ids(), key=int) == [str(n) for n in range(1, 41)]
    assert [o for o in order if o.startswith("sess-a/")] == [
        f"sess-a/turn-{n:04d}" for n in range(1, 31)
    ]
    assert runtime.settled() == (sorted(str(n) for n in range(1, 41)), [])


@pytest.mark.parametrize("order", ["pull first", "dispatcher first", "settle under way"])
def test_the_pull_and_the_dispatcher_stop_in_either_order(order):
    """Turns 1-3 share a key, turn 4 has its own; one handler thread. Turn 1's
    handling (or, for `settle under way`, its dead-letter publish) waits while the
    worker stops: turn 4 waits in the dispatcher's queue, 2 and 3 behind their key."""
    started, release = threading.Event(), threading.Event()
    handled: list[str] = []

    def wait_in(_what=None):
        started.set()
        assert release.wait(10)

    def handle(event, delivery):
        handled.append(event.turn_id)
        if order == "settle under way":
            raise PermanentError("never")  # dead-lettered: the publish waits
        wait_in()
        return Outcome.APPLIED

    publisher = FakePublisher(before=wait_in)
    runtime = Runtime(handle, publisher=publisher)
    runtime.take_in(["sess-a", "sess-a", "sess-a", "sess-b"])
    assert started.wait(10)
    assert runtime.received_ids() == ["1", "4"]
    if order == "dispatcher first":
        runtime.dispatcher.request_stop()
        release.set()
        # The pull still runs: turn 1's ack hands 2 on, whose hand-back hands 3 on.
        wait_for(lambda: runtime.received_ids() == ["1", "4", "2", "3"], 10, "the key drained")
        runtime.pull.request_stop()
    else:
        runtime.pull.request_stop()
        runtime.dispatcher.request_stop()
        release.set()
    assert runtime.dispatcher.stop(5)

    assert handled == ["turn-0001"]
    assert runtime.settled() == (["1"], ["2", "3", "4"])
    assert runtime.pull._leased == {}
    assert {thread for thread, _depth, _ids in runtime.calls} == {HANDOFF_THREAD}
    assert len({d for _thread, d, _ids in runtime.calls}) == 1
    assert len(publisher.published) == (order == "settle under way")
