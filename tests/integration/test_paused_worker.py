"""A worker process stopped (SIGSTOP) for longer than a long poll's deadline while
turns arrive, then continued: each turn is handled once, on its first delivery
attempt. A pull the emulator answered while the worker could not read it must not
have leased its messages to nobody (they would come back 30 s later, as attempt 2):
the worker's pulls are answered at once and have PULL_TIMEOUT_SECONDS to arrive."""

from __future__ import annotations

import signal
import time

from shared.bus.unary_pull import PULL_TIMEOUT_SECONDS
from shared.session_buffer import SessionBuffer, SessionKey
from tests.bus_helpers import make_turn
from tests.support import WorkerProcess, wait_for

# Longer than the emulator's one second of spare time in a long poll, and the
# 2.5 s a long poll would last; well within PULL_TIMEOUT_SECONDS.
PAUSED_SECONDS = 3.5
# How long the worker idles before it is stopped: past the pull that follows a
# handled message (part of the fault's shape; nothing is waited for).
IDLE_SECONDS = 1.0
TURNS = 6


def test_a_paused_worker_loses_no_pulled_message(
    settings, topology, publisher, valkey_client, ids, tmp_path
):
    assert PAUSED_SECONDS < PULL_TIMEOUT_SECONDS
    buffer = SessionBuffer(valkey_client, 3600)
    key = SessionKey(ids["app"], ids["user_id"], ids["session_id"])
    worker = WorkerProcess(settings, "summary", tmp_path / "summary.log")
    turns = [make_turn(ids, n) for n in range(1, TURNS + 1)]
    try:
        wait_for(lambda: "worker started" in worker.log_text(), 60, "the worker up")
        publisher.publish(turns[0])
        wait_for(lambda: buffer.read(key).turns_total == 1, 30, "the first turn")
        time.sleep(IDLE_SECONDS)  # noqa: sleep-ok - the fault's shape: an idle worker
        worker.signal(signal.SIGSTOP)
        try:
            for turn in turns[1:]:
                publisher.publish(turn)
            time.sleep(PAUSED_SECONDS)  # noqa: sleep-ok - the fault: stopped this long
        finally:
            worker.signal(signal.SIGCONT)
        wait_for(lambda: buffer.read(key).turns_total == TURNS, 60, "every turn")
    finally:
        worker.stop()
    handled = [
        (r["message_id"], r["delivery_attempt"])
        for r in worker.log_records()
        if r.get("message") == "message handled" and r.get("app") == ids["app"]
    ]
    assert [attempt for _, attempt in handled] == [1] * TURNS, handled
    assert [t.turn_id for t in buffer.read(key).turns] == [t.turn_id for t in turns]
