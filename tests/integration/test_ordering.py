import random
import threading
import time
from collections import Counter, defaultdict

import pytest

from shared.bus.contract import Outcome
from shared.errors import PermanentError
from shared.events import TurnRecorded
from shared.session_buffer import SessionBuffer, SessionKey
from tests.bus_helpers import Recorder, intercept, make_turn, running, summary_handler
from tests.conftest import both_pull_modes
from tests.support import run_cli, wait_for

TURNS = 8


def test_turns_land_in_created_at_order_despite_redelivery_and_replay(
    settings, topology, publisher, valkey_client, ids
):
    """Two sessions at once. In each, turn 3's first delivery is nacked (redelivered
    later) and turn 5 is dead-lettered and replayed after the others are buffered;
    events are also published in shuffled order. The buffer still reads in time order."""
    buffer = SessionBuffer(valkey_client, 3600)
    recorder = Recorder()
    sessions = [dict(ids, session_id=f"{ids['session_id']}-{n}") for n in (1, 2)]
    nacked: set[str] = set()
    dead = {"on": True}
    lock = threading.Lock()

    def disorderly(event, delivery):
        if event.turn_id == "turn-0003":
            with lock:
                first = event.event_id not in nacked
                nacked.add(event.event_id)
            if first:
                raise RuntimeError("nack the first delivery")
        if event.turn_id == "turn-0005" and dead["on"]:
            raise PermanentError("parked for replay")

    events = [make_turn(s, n) for s in sessions for n in range(1, TURNS + 1)]
    random.Random(7).shuffle(events)
    table = {TurnRecorded: recorder.wrap(intercept(summary_handler(settings, buffer), disorderly))}
    with running(settings, "turns-summary", table, publisher):
        for event in events:
            publisher.publish(event)
        keys = [SessionKey(s["app"], s["user_id"], s["session_id"]) for s in sessions]
        wait_for(
            lambda: all(len(buffer.read(k).turns) == TURNS - 1 for k in keys),
            60,
            "every turn but the parked one",
        )
        dead["on"] = False
        replay = run_cli(settings, "dlq", "replay", "turns-summary")
        assert replay.stdout.strip().splitlines()[-1] == "replayed 2, skipped 0, failed 0"
        wait_for(
            lambda: all(len(buffer.read(k).turns) == TURNS for k in keys), 60, "the replayed turns"
        )

    applied = [label for (label, _a, outcome) in recorder.calls if outcome == "applied"]
    # The delivery order really was disturbed: turn 5 was applied last, after turn 8.
    assert applied[-2:] == ["turn-0005", "turn-0005"]
    assert recorder.outcomes("turn-0003").count("error:nack the first delivery") == 2
    for key in keys:
        view = buffer.read(key)
        assert [t.turn_id for t in view.turns] == [f"turn-{n:04d}" for n in range(1, TURNS + 1)]
        assert [t.created_at for t in view.turns] == sorted(t.created_at for t in view.turns)
        assert view.turns_total == TURNS


@both_pull_modes
def test_a_sessions_turns_run_one_at_a_time_beside_other_sessions(
    settings, topology, publisher, ids
):
    """Per-message handlers (the extraction worker's kind): the turns of one session
    share an ordering key and run one after another, in order, as the user's lock
    would make them wait anyway; other sessions' turns run beside them."""
    sessions = [dict(ids, session_id=f"{ids['session_id']}-{n}") for n in range(4)]
    now, most, order = Counter(), Counter(), defaultdict(list)
    lock = threading.Lock()

    def slow(event, delivery):
        with lock:
            now[event.session_id] += 1
            now["all"] += 1
            for key in (event.session_id, "all"):
                most[key] = max(most[key], now[key])
            order[event.session_id].append(event.turn_id)
        # Work that takes time, so that turns run at once would overlap.
        time.sleep(0.05)  # noqa: sleep-ok
        with lock:
            now[event.session_id] -= 1
            now["all"] -= 1
        return Outcome.APPLIED

    table = {TurnRecorded: slow}
    with running(settings, "turns-extraction", table, publisher):
        for n in range(1, TURNS + 1):
            for session in sessions:
                publisher.publish(make_turn(session, n))
        wait_for(lambda: sum(map(len, order.values())) == len(sessions) * TURNS, 60, "every turn")

    turns = [f"turn-{n:04d}" for n in range(1, TURNS + 1)]
    assert {s["session_id"]: (most[s["session_id"]], order[s["session_id"]]) for s in sessions} == {
        s["session_id"]: (1, turns) for s in sessions
    }
    assert most["all"] > 1  # sessions did run beside each other


@pytest.mark.parametrize("order", ["pull first", "dispatcher first"])
def test_a_worker_stopped_in_either_order_gives_its_keys_waiting_turns_to_the_next(
    settings, topology, publisher, ids, order
):
    """Unary pull against the emulator: turn 1 of a session is in its handler when
    the worker stops, turns 2-5 wait behind it (given back by the pull, or handed
    back by the dispatcher when it stopped first and the key moved on). Turn 1 is
    acknowledged; the next worker gets 2-5 and never turn 1 again (in whatever
    order the emulator redelivers what was nacked together)."""
    unary = settings.model_copy(update={"pull_mode": "unary", "worker_concurrency": 2})
    started, release = threading.Event(), threading.Event()
    first: list[str] = []
    second: list[str] = []

    def held_up(event, delivery):
        first.append(event.turn_id)
        started.set()
        assert release.wait(30)
        return Outcome.APPLIED

    def recorded(event, delivery):
        second.append(event.turn_id)
        return Outcome.APPLIED

    for n in range(1, 6):
        publisher.publish(make_turn(ids, n)).result(timeout=10)
    with running(unary, "turns-extraction", {TurnRecorded: held_up}, publisher) as runtime:
        assert started.wait(30)
        wait_for(lambda: runtime.in_flight() == 5, 30, "all five turns pulled")
        if order == "pull first":
            runtime.pull.request_stop()
            runtime.dispatcher.request_stop()
            release.set()
        else:
            runtime.dispatcher.request_stop()
            release.set()
            wait_for(lambda: runtime.in_flight() == 0, 30, "the key handed back turn by turn")
            runtime.pull.request_stop()
        assert runtime.stop(10)
    assert first == ["turn-0001"]

    with running(unary, "turns-extraction", {TurnRecorded: recorded}, publisher):
        wait_for(lambda: len(set(second)) == 4, 30, "turns 2-5 at the next worker")
    assert sorted(set(second)) == [f"turn-{n:04d}" for n in range(2, 6)]
