"""Unary pull's ordering keys and leases, without Pub/Sub (`offline_pull`): a key's
next message reaches the sink only once the one before it is settled, and from
the hand-off's thread, not the settling one; a second ack or nack releases
nothing more; a stop gives back what waits behind a key; what waits behind a
held message keeps its lease as long as that one does."""

from __future__ import annotations

import threading
import time

from shared.bus.unary_pull import MAX_LEASE_SECONDS, PulledMessage, UnaryPull
from tests.runtime_fakes import offline_pull, received
from tests.support import wait_for


class Sink:
    """Records what reaches it, and on which thread."""

    def __init__(self) -> None:
        self.messages: list[PulledMessage] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, messages) -> None:
        with self._lock:
            self.messages.extend(messages)
            self.threads.add(threading.current_thread().name)

    def ids(self) -> list[str]:
        with self._lock:
            return [m.message_id for m in self.messages]

    def reaches(self, *ids: str) -> list[PulledMessage]:
        wait_for(lambda: self.ids() == list(ids), 5, f"the sink to hold {ids}")
        return list(self.messages)


def pull_of(*keys: str) -> tuple[UnaryPull, Sink]:
    """An offline pull that has pulled one message per key given (ids 1, 2, ...)."""
    sink = Sink()
    pull = offline_pull(sink)
    pull._take_in([received(n, key=key) for n, key in enumerate(keys, start=1)])
    return pull, sink


def test_a_keys_messages_reach_the_sink_one_at_a_time_from_the_handoffs_thread():
    pull, sink = pull_of("a", "a", "a", "b")
    one, other = sink.reaches("1", "4")
    one.ack()  # on this thread, as a handler thread would
    two = sink.reaches("1", "4", "2")[2]
    two.nack()
    sink.reaches("1", "4", "2", "3")
    assert sink.threads == {"handoff-projects/p/subscriptions/s"}
    assert (pull._to_ack, pull._to_nack) == (["ack-1"], ["ack-2"])
    pull.request_stop()


def test_a_second_ack_or_nack_of_a_message_releases_nothing_more():
    pull, sink = pull_of("a", "a", "a")
    (one,) = sink.reaches("1")
    one.ack()
    one.nack()
    one.ack()
    sink.reaches("1", "2")
    pull.request_stop()
    assert sink.ids() == ["1", "2"]
    assert pull._to_ack == ["ack-1"] and pull._to_nack == ["ack-3"]  # 3: given back


def test_a_stop_gives_back_what_waits_behind_its_key_and_a_later_settle_hands_on_nothing():
    pull, sink = pull_of("a", "a", "a", "b")
    one, _other = sink.reaches("1", "4")
    pull.request_stop()
    assert sorted(pull._to_nack) == ["ack-2", "ack-3"]
    one.ack()  # a handler that ends after the stop
    pull._take_in([received(5, key="c")])  # a pull that was under way
    assert sink.ids() == ["1", "4"]
    assert pull._to_ack == ["ack-1"] and sorted(pull._to_nack) == ["ack-2", "ack-3", "ack-5"]
    assert set(pull._leased) == {"ack-4"}  # at the sink: its handler settles it


def test_what_waits_behind_a_held_message_keeps_its_lease_as_long_as_that_one():
    pull, sink = pull_of("a", "a", "b")
    held, _other = sink.reaches("1", "3")
    # Pulled longer ago than any lease is kept: the outage has lasted that long.
    long_ago = time.monotonic() - MAX_LEASE_SECONDS - 1
    pull._leased = dict.fromkeys(pull._leased, long_ago)
    assert pull._to_renew() == []
    held.extend()  # what the dispatcher does while a dependency is down
    assert sorted(pull._to_renew()) == ["ack-1", "ack-2"]  # not 3: another key
    pull.request_stop()


def test_a_key_that_moves_on_restarts_the_lease_clock_of_what_waits_behind_it():
    pull, sink = pull_of("a", "a", "a")
    (one,) = sink.reaches("1")
    pull._leased = dict.fromkeys(pull._leased, time.monotonic() - MAX_LEASE_SECONDS - 1)
    one.ack()
    sink.reaches("1", "2")
    assert sorted(pull._to_renew()) == ["ack-2", "ack-3"]
    pull.request_stop()
